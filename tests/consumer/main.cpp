// Built against the installed package: runs a layer and checks it against the installed oracle,
// and that the registry holds onednn only where the program links lstm::onednn (EXPECT_ONEDNN).
#include <cstdio>
#include <lstm/lstm.hpp>
#include <lstm/reference/lstm_reference.hpp>
#include <lstm/reference/tolerance.hpp>
#include <string>
#include <vector>

int main() {
    const lstm::Config config{3, 5, 2, true};
    // PyTorch: sum(p.numel() for p in nn.LSTM(3, 5, 2, bidirectional=True).parameters()) == 1080
    if (lstm::param_count(config) != 1080) {
        std::printf("param_count = %lld, expected 1080\n", (long long)lstm::param_count(config));
        return 1;
    }
    lstm::Lstm layer(config, "basic");
    const int64_t seq_len = 4, batch = 2;
    std::vector<float> x(seq_len * batch * 3);
    for (size_t k = 0; k < x.size(); ++k) x[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
    const std::vector<int64_t> lengths = {4, 3};
    const auto y =
        layer.forward(lstm::TensorView<const float>(x.data(), {seq_len, batch, 3}), lengths);

    lstm::reference::LstmInputs in;
    in.config = config;
    in.seq_len = seq_len;
    in.batch = batch;
    in.x.assign(x.begin(), x.end());
    in.lengths = lengths;
    in.params.assign(layer.parameters().begin(), layer.parameters().end());
    const auto want = lstm::reference::lstm_forward(in).y;
    const std::vector<double> got(y.data(), y.data() + y.numel());
    const double rtol = lstm::reference::lstm_rtol(lstm::DType::f32, config, seq_len,
                                                   lstm::reference::Pass::forward);
    if (auto why = lstm::reference::check_close("y", got, want, rtol)) {
        std::printf("%s\n", why->c_str());
        return 1;
    }
    std::printf("consumer: %zu outputs match the reference\n", got.size());
    // The onednn variant is in the registry exactly when the program links lstm::onednn.
    bool has_onednn = false;
    for (const lstm::Variant* v : lstm::variants())
        has_onednn = has_onednn || std::string(v->name()) == "onednn";
    if (has_onednn != (EXPECT_ONEDNN != 0)) {
        std::printf("registry has onednn: %d, expected %d\n", has_onednn, EXPECT_ONEDNN);
        return 1;
    }
    std::printf("consumer: onednn registered: %d, as expected\n", has_onednn);
    // Without it, asking for onednn says why (a build with oneDNN: the target the program does
    // not link), as lstm::Unsupported, like a CUDA variant in a build without CUDA.
    if (!has_onednn) {
        const std::string want_why =
            LSTM_WITH_ONEDNN ? "lives in the lstm::onednn target" : "this build has no oneDNN";
        try {
            lstm::find_variant("onednn", lstm::Device::cpu);
            std::printf("find_variant(\"onednn\") did not throw\n");
            return 1;
        } catch (const lstm::Unsupported& e) {
            if (std::string(e.what()).find(want_why) == std::string::npos) {
                std::printf("find_variant(\"onednn\"): '%s' does not say '%s'\n", e.what(),
                            want_why.c_str());
                return 1;
            }
            std::printf("consumer: %s\n", e.what());
        }
    }
    return 0;
}
