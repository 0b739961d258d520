#include "activations_bench.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "case_failures.hpp"
#include "kernels/common/gates.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "lstm/detail/random.hpp"
#include "register_case.hpp"

namespace lstm::bench {

namespace {

// 16 KiB of input and 32 KiB of output: in L1 with the code, so the case times the arithmetic.
constexpr int64_t kElements = 4096;
// Pre-activations of a trained LSTM mostly lie within a few units of zero; the range covers both
// saturated ends of sigmoid and tanh as well.
constexpr double kRange = 6.0;
constexpr uint64_t kSeed = 7;
// The vector functions' documented accuracy (a few float ulps) against the scalar ones.
constexpr double kRtol = 4e-7;

void time_activations(benchmark::State& state, int64_t target) {
    std::mt19937_64 rng(kSeed);
    std::vector<float> x(kElements), sig(kElements), th(kElements);
    for (float& v : x) v = static_cast<float>(detail::uniform(rng, -kRange, kRange));
    kernels::cpu::simd_fused_activations(target, x.data(), kElements, sig.data(), th.data());
    for (int64_t i = 0; i < kElements; ++i) {
        const double s = kernels::sigmoid(static_cast<double>(x[i]));
        const double t = kernels::tanh_act(static_cast<double>(x[i]));
        // Written as "not within", so that a NaN fails too.
        if (!(std::abs(sig[i] - s) <= kRtol * s && std::abs(th[i] - t) <= kRtol * std::abs(t))) {
            fail_case(state, "sigmoid or tanh of " + std::to_string(x[i]) +
                                 " off the double value by more than 4e-7 relative");
            return;
        }
    }
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        kernels::cpu::simd_fused_activations(target, x.data(), kElements, sig.data(), th.data());
        benchmark::DoNotOptimize(sig.data());
        benchmark::DoNotOptimize(th.data());
        benchmark::ClobberMemory();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.counters["ns_per_element"] =
        seconds * 1e9 / static_cast<double>(state.iterations()) / static_cast<double>(kElements);
}

}  // namespace

void register_activation_cases() {
    const int64_t targets = kernels::cpu::simd_fused_targets();
    for (int bit = 0; bit < 63; ++bit) {
        const int64_t target = int64_t{1} << bit;
        if ((targets & target) == 0) continue;
        const std::string name =
            std::string("kernels/activations/") + kernels::cpu::simd_fused_target_name(target);
        register_case(name, [target](benchmark::State& state) {
            time_activations(state, target);
        })->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace lstm::bench
