// LSTM_MAX_CPU_ISA (kernels/cpu/cpu_features.hpp): the ceiling under which a wider machine runs
// what a narrower one runs. The checks hold in every process, capped or not; ctest runs this
// executable again under LSTM_MAX_CPU_ISA=avx2 and =sse4 (tests/CMakeLists.txt), where they check
// that the cap reaches every path, and every other case checks what such a machine computes.

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/host_info.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/fused.hpp"
#include "simd_levels.hpp"

using namespace lstm;
using Catch::Contains;
using kernels::cpu::SimdCap;

namespace {

[[maybe_unused]] bool starts_with(const std::string& s, const char* prefix) {
    return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// The message with which a fused plan on path `isa` is refused (empty where it is made).
[[maybe_unused]] std::string refusal(cpu::FusedIsa isa) {
    try {
        PlanRequest request{Config{3, 5, 1, false}, DType::f32, 2, 2, cpu::fused_isa_name(isa)};
        (void)find_variant("fused", Device::cpu).make_plan(request);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("LSTM_MAX_CPU_ISA takes all, avx2 and sse4, and names itself otherwise", "[isa_cap]") {
    using kernels::cpu::parse_isa_cap;
    CHECK(parse_isa_cap(nullptr) == SimdCap::all);
    CHECK(parse_isa_cap("") == SimdCap::all);
    CHECK(parse_isa_cap("all") == SimdCap::all);
    CHECK(parse_isa_cap("avx2") == SimdCap::avx2);
    CHECK(parse_isa_cap("sse4") == SimdCap::sse4);
    // Upper case too, as DNNL_MAX_CPU_ISA is written.
    CHECK(parse_isa_cap("ALL") == SimdCap::all);
    CHECK(parse_isa_cap("AVX2") == SimdCap::avx2);
    CHECK(parse_isa_cap("Sse4") == SimdCap::sse4);
    for (const char* bad : {"avx512", "AVX512_CORE", "avx2 ", "sse41", "SSE41"}) {
        INFO("value '" << bad << "'");
        CHECK_THROWS_AS(parse_isa_cap(bad), InvalidArgument);
        CHECK_THROWS_WITH(parse_isa_cap(bad), Contains("LSTM_MAX_CPU_ISA = '" + std::string(bad) +
                                                       "' is not one of all, avx2, sse4"));
    }
}

TEST_CASE("LSTM_MAX_CPU_ISA narrower than the compiled baseline is refused, naming both",
          "[isa_cap]") {
    using kernels::cpu::checked_isa_cap;
    // Built with SSE4 kernels (no -march beyond the default): every ceiling is honoured.
    CHECK(checked_isa_cap("sse4", SimdCap::sse4, "SSE4") == SimdCap::sse4);
    CHECK(checked_isa_cap("avx2", SimdCap::sse4, "SSE4") == SimdCap::avx2);
    // Built for AVX2 (-march=znver3): avx2 and all stand, sse4 has nothing to run.
    CHECK(checked_isa_cap("AVX2", SimdCap::avx2, "AVX2") == SimdCap::avx2);
    CHECK(checked_isa_cap(nullptr, SimdCap::avx2, "AVX2") == SimdCap::all);
    CHECK_THROWS_AS(checked_isa_cap("sse4", SimdCap::avx2, "AVX2"), InvalidArgument);
    CHECK_THROWS_WITH(checked_isa_cap("sse4", SimdCap::avx2, "AVX2"),
                      Contains("LSTM_MAX_CPU_ISA = 'sse4' is narrower than this build's CPU "
                               "kernels allow: they were compiled with AVX2 as their baseline") &&
                          Contains("the narrowest ceiling is 'avx2'"));
    // Built for AVX-512 (-march=native there): only all stands.
    CHECK(checked_isa_cap("all", SimdCap::all, "AVX3") == SimdCap::all);
    CHECK_THROWS_WITH(checked_isa_cap("avx2", SimdCap::all, "AVX3"),
                      Contains("compiled with AVX3 as their baseline") &&
                          Contains("the narrowest ceiling is 'all'"));
    // A malformed value is still named as such, whatever the baseline.
    CHECK_THROWS_WITH(checked_isa_cap("avx512", SimdCap::all, "AVX3"),
                      Contains("is not one of all, avx2, sse4"));
}

TEST_CASE("the narrowest ceiling follows the Highway targets this build compiled", "[isa_cap]") {
    // simd_baseline_name() is the target lstm_cpu's flags made static: on x86-64 Highway 1.0 says
    // "SCALAR" or "EMU128" without -march, then "SSSE3", "SSE4", "AVX2", "AVX3"... Every set from
    // the baseline up is compiled, so the narrowest ceiling is the cap at or above that baseline.
    const std::string baseline = kernels::cpu::simd_baseline_name();
    const SimdCap narrowest = kernels::cpu::narrowest_simd_cap();
    INFO("baseline " << baseline << ", narrowest ceiling "
                     << kernels::cpu::isa_cap_name(narrowest));
#if defined(__x86_64__)
    if (starts_with(baseline, "AVX3"))
        CHECK(narrowest == SimdCap::all);
    else if (baseline == "AVX2")
        CHECK(narrowest == SimdCap::avx2);
    else
        CHECK(narrowest == SimdCap::sse4);
#else
    CHECK(narrowest == SimdCap::all);  // the caps name x86 instruction sets only
#endif
}

TEST_CASE("this process's LSTM_MAX_CPU_ISA reaches every path", "[isa_cap]") {
#if !defined(__x86_64__) || !(defined(__GNUC__) || defined(__clang__))
    LSTM_SKIP("not x86-64 with GCC or Clang: the cap applies to x86 instruction sets only");
#else
    const SimdCap cap = kernels::cpu::isa_cap();
    const std::string target = kernels::cpu::simd_target_name();
    const std::string cpu_isa = host_facts()[1].value;
    INFO("LSTM_MAX_CPU_ISA = " << kernels::cpu::isa_cap_name(cap) << ", dispatched " << target
                               << ", cpu_isa '" << cpu_isa << "'");
    // What the processor itself reports, which the cap must hide and nothing else may.
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("fma");
    const bool avx2 = __builtin_cpu_supports("avx2") && fma;
    // What Highway 1.0's AVX3 target is compiled for (its AVX2 set, then AVX-512 F, BW, DQ, VL),
    // but F16C, which Clang 14's builtin cannot ask for and every AVX-512 CPU has.
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi") &&
                        __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("aes") &&
                        __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
    // The CTC kernel runs whatever the dispatch runs.
    CHECK(ctc_kernel_path() == "Highway " + target);
    switch (cap) {
        case SimdCap::all:
            CHECK(kernels::cpu::cpu_has_avx512() == avx512);
            CHECK(kernels::cpu::cpu_has_avx2_fma() == avx2);
            CHECK(cpu_isa.find("LSTM_MAX_CPU_ISA") == std::string::npos);
            break;
        case SimdCap::avx2:
            CHECK_FALSE(kernels::cpu::cpu_has_avx512());
            CHECK(kernels::cpu::cpu_has_avx2_fma() == avx2);
            CHECK_FALSE(starts_with(target, "AVX3"));
            CHECK(cpu::default_fused_isa() != cpu::FusedIsa::avx512);
            CHECK_THAT(refusal(cpu::FusedIsa::avx512), Contains("LSTM_MAX_CPU_ISA = avx2"));
            CHECK_THAT(cpu_isa, Contains("LSTM_MAX_CPU_ISA = avx2: AVX-512 left unused"));
            break;
        case SimdCap::sse4:
            CHECK_FALSE(kernels::cpu::cpu_has_avx512());
            CHECK_FALSE(kernels::cpu::cpu_has_avx2_fma());
            CHECK_FALSE(starts_with(target, "AVX"));  // neither AVX2 nor AVX3*
            CHECK(cpu::default_fused_isa() == cpu::FusedIsa::eigen);
            CHECK_THAT(refusal(cpu::FusedIsa::avx2), Contains("LSTM_MAX_CPU_ISA = sse4"));
            CHECK_THAT(cpu_isa, Contains("LSTM_MAX_CPU_ISA = sse4: AVX2 and AVX-512 left unused"));
            break;
    }
#endif
}

TEST_CASE("a capped dispatch stays capped after the fused kernels list the CPU's targets",
          "[isa_cap]") {
    // Highway 1.0's SupportedTargets() points the dispatch back at the widest target the CPU has;
    // kernels::cpu::supported_targets(), which the fused kernels call, points it back at the cap.
    const test::SimdCapScope scope(SimdCap::avx2);
    if (!scope.runs_cap()) LSTM_SKIP(scope.why_not());
    CHECK(kernels::cpu::simd_fused_targets() != 0);
    CHECK(std::string(kernels::cpu::simd_target_name()) == "AVX2");
    CHECK(kernels::cpu::supported_targets() != 0);
    CHECK(std::string(kernels::cpu::simd_target_name()) == "AVX2");
}
