// libFuzzer target of ctc_loss's validation and kernel: the bytes choose sizes, flags, lengths
// (small, or any 64-bit value), labels and inputs (NaN, infinities and extremes included). Every
// call must either be refused with lstm::Error or return results that keep the loss's contract;
// anything else (a crash, a sanitizer report, another exception, a broken contract) is a bug.
// Built by tests/fuzz/CMakeLists.txt, run by tests/fuzz/run-smoke.sh.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/loss/ctc.hpp"

namespace {

// Reads the input front to back; past the end every read is 0.
class Bytes {
public:
    Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
    int64_t word() {
        uint64_t v = 0;
        for (int k = 0; k < 8; ++k) v = v << 8 | byte();
        int64_t out;
        std::memcpy(&out, &v, sizeof(out));
        return out;
    }
    // A small signed value, or with `wide` any 64-bit one: most fuzz inputs should reach the
    // kernel, and some should probe the checks with extremes.
    int64_t integer(bool wide) { return wide ? word() : static_cast<int8_t>(byte()); }
    bool done() const { return at_ >= size_; }

private:
    const uint8_t* data_;
    size_t size_;
    size_t at_ = 0;
};

// An input value: mostly ordinary, sometimes NaN, +-inf, huge or tiny.
template <typename T>
T value(uint8_t b) {
    switch (b) {
        case 0:
            return std::numeric_limits<T>::quiet_NaN();
        case 1:
            return std::numeric_limits<T>::infinity();
        case 2:
            return -std::numeric_limits<T>::infinity();
        case 3:
            return std::numeric_limits<T>::max();
        case 4:
            return std::numeric_limits<T>::lowest();
        case 5:
            return std::numeric_limits<T>::denorm_min();
        default:
            return static_cast<T>((static_cast<int>(b) - 128) / 8.0);
    }
}

template <typename T>
void run(Bytes& in, uint8_t flags) {
    const int64_t frames = in.byte() % 9, batch = in.byte() % 5, classes = in.byte() % 7;
    const bool wide = flags & 0x80;
    const bool logits = flags & 1, padded = flags & 2, zero_infinity = flags & 4, grad = flags & 8;
    const auto reduction = static_cast<lstm::loss::Reduction>((flags >> 4) % 3);
    const int64_t blank = in.integer(wide);
    std::vector<int64_t> input_lengths(static_cast<size_t>(batch));
    std::vector<int64_t> target_lengths(static_cast<size_t>(batch));
    for (auto& l : input_lengths) l = in.integer(wide);
    for (auto& l : target_lengths) l = in.integer(wide);
    const int64_t stride = in.byte() % 8;
    const int64_t target_count = padded ? batch * stride : in.byte() % 32;
    std::vector<int64_t> targets(static_cast<size_t>(target_count));
    for (auto& t : targets) t = in.integer(wide);
    std::vector<T> input(static_cast<size_t>(frames * batch * classes));
    for (auto& x : input) x = value<T>(in.byte());

    lstm::loss::CtcArgs<T> args;
    const lstm::TensorView<const T> view(input.data(), {frames, batch, classes});
    (logits ? args.logits : args.log_probs) = view;
    args.targets = padded ? lstm::TensorView<const int64_t>(targets.data(), {batch, stride})
                          : lstm::TensorView<const int64_t>(targets.data(), {target_count});
    args.input_lengths = lstm::Span<const int64_t>(input_lengths.data(), batch);
    args.target_lengths = lstm::Span<const int64_t>(target_lengths.data(), batch);
    args.blank = blank;
    args.reduction = reduction;
    args.zero_infinity = zero_infinity;
    std::vector<T> g(input.size(), std::numeric_limits<T>::signaling_NaN());
    std::vector<T> losses(static_cast<size_t>(batch));
    lstm::loss::CtcOutputs<T> out;
    if (grad)
        (logits ? out.grad_logits : out.grad_log_probs) =
            lstm::TensorView<T>(g.data(), {frames, batch, classes});
    out.losses = lstm::TensorView<T>(losses.data(), {batch});
    // An empty tensor has no storage: std::vector's data() may be null, which reads as "not
    // given"; the refusal for that is an lstm::Error like any other.
    try {
        lstm::loss::ctc_loss(args, out);
    } catch (const lstm::Error&) {
        return;
    }

    // The contract on accepted input. A sample with NaN or +inf on a valid frame (or a logits
    // frame of all -inf) has a NaN loss and NaN gradient there; any other sample has no NaN,
    // and with logits a loss >= 0 (a probability is at most 1), +inf only if infeasible.
    for (int64_t n = 0; n < batch; ++n) {
        bool poisoned = false;
        for (int64_t t = 0; t < input_lengths[static_cast<size_t>(n)]; ++t) {
            bool all_minus_inf = true;
            for (int64_t c = 0; c < classes; ++c) {
                const T x = input[static_cast<size_t>((t * batch + n) * classes + c)];
                if (!(x < std::numeric_limits<T>::infinity())) poisoned = true;
                if (x != -std::numeric_limits<T>::infinity()) all_minus_inf = false;
            }
            if (logits && all_minus_inf) poisoned = true;
        }
        const T loss = losses[static_cast<size_t>(n)];
        if (poisoned != std::isnan(loss)) std::abort();
        if (!poisoned && logits && loss < T(-1e-3)) std::abort();
        if (!grad) continue;
        for (int64_t t = 0; t < frames; ++t)
            for (int64_t c = 0; c < classes; ++c) {
                const T x = g[static_cast<size_t>((t * batch + n) * classes + c)];
                const bool valid = t < input_lengths[static_cast<size_t>(n)];
                if (!valid && x != T(0)) std::abort();  // padding: exact zeros
                if (valid && poisoned != std::isnan(x)) std::abort();
                if (valid && !poisoned && std::isinf(x)) std::abort();
            }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Bytes in(data, size);
    const uint8_t flags = in.byte();
    const uint8_t kind = in.byte();
    if (kind & 1)
        run<double>(in, flags);
    else
        run<float>(in, flags);
    return 0;
}
