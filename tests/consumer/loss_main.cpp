// Built against the installed package: a program that uses only the cross-entropy loss (no
// layer), so the linker meets the library's compiled parts in another order than main.cpp makes
// it: with CUDA, the loss's device path pulls lstm_cuda's objects, which need the host memory
// query (lstm/memory.cpp). Checks the loss against the closed form.
#include <cmath>
#include <cstdio>
#include <lstm/loss/cross_entropy.hpp>
#include <vector>

int main() {
    // Two rows of three equal logits: each row's loss is log 3 whatever the target.
    const std::vector<float> logits = {0.5f, 0.5f, 0.5f, -2.0f, -2.0f, -2.0f};
    const std::vector<int64_t> targets = {0, 2};
    const float loss = lstm::loss::cross_entropy(
        lstm::TensorView<const float>(logits.data(), {2, 3}), lstm::Span<const int64_t>(targets));
    const double want = std::log(3.0);
    if (std::abs(loss - want) > 1e-6) {
        std::printf("cross_entropy = %.9g, expected log 3 = %.9g\n", loss, want);
        return 1;
    }
    std::printf("consumer_loss: cross_entropy = log 3, as it must\n");
    return 0;
}
