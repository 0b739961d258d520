// Built against the installed package: runs a layer and checks it against the installed oracle,
// that the registry holds onednn only where the program links lstm::onednn (EXPECT_ONEDNN) and
// the CUDA variants only where it links lstm::cuda (EXPECT_CUDA), and prints its resident size
// after the forward, which a program linking lstm::lstm alone must keep below MAX_RSS_MIB.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <lstm/lstm.hpp>
#include <lstm/reference/lstm_reference.hpp>
#include <lstm/reference/tolerance.hpp>
#include <string>
#include <vector>

#ifndef EXPECT_CUDA
#define EXPECT_CUDA 0
#endif

namespace {

// VmRSS of /proc/self/status in KiB; -1 where there is none (not Linux).
long resident_kib() {
    std::FILE* status = std::fopen("/proc/self/status", "r");
    if (status == nullptr) return -1;
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof line, status) != nullptr)
        if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::atol(line + 6);
    std::fclose(status);
    return kib;
}

}  // namespace

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
    const long rss_kib = resident_kib();
    std::printf("consumer: resident after one forward: %ld KiB (%.1f MiB)\n", rss_kib,
                static_cast<double>(rss_kib) / 1024.0);
#ifdef MAX_RSS_MIB
    if (rss_kib > static_cast<long>(MAX_RSS_MIB) * 1024) {
        std::printf("consumer: resident %ld KiB exceeds the bound of %d MiB for a CPU program\n",
                    rss_kib, MAX_RSS_MIB);
        return 1;
    }
#endif
    // The CUDA variants are in the registry exactly when the program links lstm::cuda.
    if (!lstm::variants_on(lstm::Device::cuda).empty() != (EXPECT_CUDA != 0)) {
        std::printf("registry has %zu cuda variants, expected %s\n",
                    lstm::variants_on(lstm::Device::cuda).size(), EXPECT_CUDA ? "some" : "none");
        return 1;
    }
    if (!EXPECT_CUDA) {
        const std::string want_why =
            LSTM_WITH_CUDA ? "lives in the lstm::cuda target" : "this build has no CUDA back-end";
        try {
            lstm::find_variant("fused", lstm::Device::cuda);
            std::printf("find_variant(\"fused\", cuda) did not throw\n");
            return 1;
        } catch (const lstm::Unsupported& e) {
            if (std::string(e.what()).find(want_why) == std::string::npos) {
                std::printf("find_variant(\"fused\", cuda): '%s' does not say '%s'\n", e.what(),
                            want_why.c_str());
                return 1;
            }
            std::printf("consumer: %s\n", e.what());
        }
    }
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
