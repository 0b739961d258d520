// The host description (lstm/host_info.hpp) that lstm_bench's context and `lstm_tool info` print,
// and the FMA peak measurement behind lstm_bench's peak_frac (bench/peak.cpp, compiled into this
// executable). No timing thresholds: a shared CI machine may run the loop at any speed; only that
// a measurement comes out and the FLOP count it divides are checked.

#include "lstm/host_info.hpp"

#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>

#include "bench/peak.hpp"
#include "kernels/cpu/bf16_native.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/fused.hpp"
#include "test_util.hpp"

using namespace lstm;

TEST_CASE("fma_peak_loop counts 2 FLOPs per lane, chain and iteration", "[peak]") {
    // kChains of kernels/cpu/simd.cpp: the loop's independent accumulators.
    constexpr int64_t kChains = 12;
    const int64_t lanes = kernels::cpu::simd_float_lanes();
    REQUIRE(lanes >= 1);
    for (int64_t iterations : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{12345}})
        CHECK(kernels::cpu::fma_peak_loop(iterations) == iterations * kChains * lanes * 2);
}

TEST_CASE("the measured FMA peak is positive and finite", "[peak]") {
    // Short rounds: the test checks that a number comes out, not how good it is.
    constexpr int kRounds = 2;
    constexpr double kRoundSeconds = 0.005;
    const double one = bench::measure_fma_peak_gflops(1, kRounds, kRoundSeconds);
    CHECK(std::isfinite(one));
    CHECK(one > 0);
    const double all =
        bench::measure_fma_peak_gflops(omp_get_max_threads(), kRounds, kRoundSeconds);
    CHECK(std::isfinite(all));
    CHECK(all > 0);
}

TEST_CASE("the bf16 peak loop counts 64 FLOPs per instruction, or is refused without AVX512_BF16",
          "[peak]") {
    if (!kernels::cpu::cpu_has_avx512_bf16()) {
        // Refused before any instruction runs, by name.
        CHECK_FALSE(bench::bf16_peak_runs());
        CHECK_THROWS_AS(kernels::cpu::bf16_dot_peak_loop(10), Unsupported);
        CHECK_THROWS_AS(bench::measure_bf16_peak_gflops(1, 1, 0.001), Unsupported);
        LSTM_SKIP("this CPU (or build) has no AVX512_BF16: the loop itself cannot run here");
    }
    REQUIRE(kernels::cpu::bf16_native_compiled());
    REQUIRE(bench::bf16_peak_runs());
    // 12 chains of 16 lanes, each instruction two products (two FLOPs each) per lane.
    for (int64_t iterations : {int64_t{0}, int64_t{1}, int64_t{777}})
        CHECK(kernels::cpu::bf16_dot_peak_loop(iterations) == iterations * 12 * 16 * 2 * 2);
    const double peak = bench::measure_bf16_peak_gflops(1, 2, 0.005);
    CHECK(std::isfinite(peak));
    CHECK(peak > 0);
}

TEST_CASE("measure_fma_peak_gflops names a bad argument", "[peak]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(bench::measure_fma_peak_gflops(0), Contains("threads = 0"));
    CHECK_THROWS_WITH(bench::measure_fma_peak_gflops(1, 0), Contains("rounds = 0"));
    CHECK_THROWS_WITH(bench::measure_fma_peak_gflops(1, 1, -1.0), Contains("round_seconds = -1"));
    CHECK_THROWS_WITH(bench::measure_fma_peak_gflops(1, 1, std::nan("")),
                      Contains("round_seconds"));
    CHECK_THROWS_AS(bench::measure_fma_peak_gflops(-3), Error);
}

TEST_CASE("every registered variant says which path it takes on this host", "[host_info]") {
    for (const Variant* v : variants()) {
        INFO("variant " << v->name() << " (" << to_string(v->device()) << ")");
        CHECK_FALSE(variant_path(*v).empty());
    }
    // code_paths(): the registry in order, then the CTC kernel, none unknown.
    const std::vector<CodePath> paths = code_paths();
    REQUIRE(paths.size() == variants().size() + 1);
    for (size_t k = 0; k < variants().size(); ++k) {
        CHECK(paths[k].name == variants()[k]->name());
        CHECK(paths[k].is_variant);
    }
    CHECK(paths.back().name == "ctc");
    CHECK_FALSE(paths.back().is_variant);
    for (const CodePath& p : paths) CHECK(p.path.find("unknown") == std::string::npos);
    // Every variant says what it runs in bf16, or that it has no such path and why.
    for (size_t k = 0; k < variants().size(); ++k) {
        INFO("variant " << paths[k].name << " (" << paths[k].device << ")");
        const bool has =
            !variants()[k]->supports_precision(Config{8, 16, 2, true}, DType::f32, Precision::bf16);
        CHECK(paths[k].bf16 == variant_bf16_path(*variants()[k]));
        CHECK((paths[k].bf16.rfind("none: ", 0) == 0) == !has);
        CHECK(paths[k].bf16.size() > 6);
    }
}

TEST_CASE("the fused variant's path follows its default path", "[host_info]") {
    const Variant& fused = find_variant("fused", Device::cpu);
    const std::string path = variant_path(fused);
    CHECK_THAT(path, Catch::StartsWith(fused.default_path(DType::f32) + " kernels"));
}

TEST_CASE("host_facts names the CPU and its instruction sets", "[host_info]") {
    const std::vector<HostFact> facts = host_facts();
    REQUIRE(facts.size() == 4);
    CHECK(facts[0].key == "cpu_model");
    CHECK_FALSE(facts[0].value.empty());
    CHECK(facts[1].key == "cpu_isa");
#if defined(__x86_64__)
    CHECK_THAT(facts[1].value, Catch::Contains("AVX2") && Catch::Contains("FMA") &&
                                   Catch::Contains("AVX-512F") && Catch::Contains("AVX512_BF16"));
#elif defined(__aarch64__) && defined(__linux__)
    // Every 64-bit ARM core has NEON; SVE2 comes only with SVE, and Highway dispatches to SVE2
    // only where the kernel reports it.
    CHECK_THAT(facts[1].value, Catch::StartsWith("NEON yes, SVE "));
    const std::string target = kernels::cpu::simd_target_name();
    if (target == "SVE2") CHECK_THAT(facts[1].value, Catch::Contains("SVE yes, SVE2 yes"));
    if (target == "NEON") CHECK_THAT(facts[1].value, Catch::Contains("SVE no"));
#endif
    CHECK(facts[2].key == "simd_target");
    CHECK_THAT(facts[2].value, Catch::StartsWith(kernels::cpu::simd_target_name()));
    CHECK(facts[3].key == "eigen_isa");
}
