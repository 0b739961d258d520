// kernels/common/bf16.hpp against the definition of round-to-nearest-even, computed in double
// from the two bf16 neighbours of each float: every sign, exponent and upper mantissa with the
// lower halves that decide a rounding (exact, just below, at and just above the tie, the
// largest), a sweep of random bit patterns, and worked values.

#include "kernels/common/bf16.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"

namespace {

float float_of(uint32_t u) {
    float x = 0.0f;
    std::memcpy(&x, &u, sizeof(x));
    return x;
}

uint32_t bits_of(float x) {
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof(u));
    return u;
}

// The value of bf16 `bits` for the distance comparison; the pattern one past the largest finite
// magnitude stands for 2^128, where an unbounded exponent would put the next bf16 (IEEE rounds to
// infinity exactly when that is the nearest).
double neighbour_value(uint32_t bits) {
    const uint32_t magnitude = bits & 0x7fffu;
    const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
    if (magnitude == 0x7f80u) return sign * std::ldexp(1.0, 128);
    return static_cast<double>(lstm::kernels::bf16_to_float(static_cast<uint16_t>(bits)));
}

// The nearest bf16 to the finite or infinite float u, ties to even, from the definition.
uint16_t nearest_by_definition(uint32_t u) {
    const double x = static_cast<double>(float_of(u));
    if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
    const uint32_t toward_zero = u >> 16;    // same sign, magnitude truncated
    const uint32_t away = toward_zero + 1u;  // the next magnitude (may be the 2^128 stand-in)
    if ((u & 0xffffu) == 0) return static_cast<uint16_t>(toward_zero);
    const double d_toward = std::fabs(x - neighbour_value(toward_zero));
    const double d_away = std::fabs(neighbour_value(away) - x);
    if (d_toward < d_away) return static_cast<uint16_t>(toward_zero);
    if (d_away < d_toward) return static_cast<uint16_t>(away);
    return static_cast<uint16_t>((toward_zero & 1u) == 0 ? toward_zero : away);
}

struct Mismatch {
    uint32_t input;
    uint16_t got, want;
};

// Checks one input; NaNs must stay NaN, quiet, with their sign.
void check_input(uint32_t u, std::vector<Mismatch>& misses, int64_t& checked) {
    ++checked;
    const uint16_t got = lstm::kernels::bf16_bits(float_of(u));
    uint16_t want = 0;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        const bool ok = (got & 0x7f80u) == 0x7f80u && (got & 0x007fu) != 0 &&
                        (got & 0x0040u) != 0 && (got & 0x8000u) == ((u >> 16) & 0x8000u);
        if (!ok) misses.push_back({u, got, static_cast<uint16_t>((u >> 16) | 0x0040u)});
        return;
    }
    want = nearest_by_definition(u);
    if (got != want) misses.push_back({u, got, want});
}

std::string describe(const std::vector<Mismatch>& misses) {
    std::ostringstream out;
    out << misses.size() << " inputs round wrongly; the first:";
    for (size_t k = 0; k < misses.size() && k < 10; ++k)
        out << "\n  float bits 0x" << std::hex << misses[k].input << " (" << std::dec
            << float_of(misses[k].input) << ") -> 0x" << std::hex << misses[k].got
            << ", expected 0x" << misses[k].want << std::dec;
    return out.str();
}

}  // namespace

TEST_CASE("bf16 rounding is round-to-nearest-even on every exponent and tie", "[bf16]") {
    std::vector<Mismatch> misses;
    int64_t checked = 0;
    // Every upper half (sign, exponent, 7 mantissa bits) with the lower halves that decide.
    const uint32_t lower[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
    for (uint32_t upper = 0; upper <= 0xffffu; ++upper)
        for (uint32_t low : lower) check_input((upper << 16) | low, misses, checked);
    // And a sweep of whole bit patterns.
    std::mt19937 rng(20261207u);
    for (int k = 0; k < 1 << 20; ++k) check_input(static_cast<uint32_t>(rng()), misses, checked);
    INFO(describe(misses));
    CHECK(checked == 65536 * 6 + (1 << 20));
    CHECK(misses.empty());
}

TEST_CASE("bf16 rounding: worked ties, overflow, signed zeros and NaN", "[bf16]") {
    using lstm::kernels::round_to_bf16;
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one, 1. 1 + 3 * 2^-8 lies
    // halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
    CHECK(round_to_bf16(1.00390625f) == 1.0f);
    CHECK(round_to_bf16(1.01171875f) == 1.015625f);
    CHECK(round_to_bf16(-1.01171875f) == -1.015625f);
    // Just above the tie rounds up; 0.1 becomes 0.10009765625 (0x3dcd).
    CHECK(round_to_bf16(1.00390636f) == 1.0078125f);
    CHECK(lstm::kernels::bf16_bits(0.1f) == 0x3dcdu);
    CHECK(round_to_bf16(0.1f) == 0.10009765625f);
    // The largest float rounds past the largest finite bf16 (0x7f7f): infinity.
    CHECK(std::isinf(round_to_bf16(3.4028234663852886e38f)));
    CHECK(round_to_bf16(3.3895313892515355e38f) == 3.3895313892515355e38f);
    // Zeros keep their sign; exact bf16 values are unchanged.
    CHECK(bits_of(round_to_bf16(-0.0f)) == 0x80000000u);
    CHECK(round_to_bf16(-2.5f) == -2.5f);
    CHECK(std::isnan(round_to_bf16(std::nanf(""))));
}

TEST_CASE("AVX512_BF16 is detected as the kernel's cpuinfo reports it", "[bf16]") {
    // The kernel's flag list comes from the same CPUID bit; it is the independent reading.
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string flags;
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("flags", 0) == 0) {
            flags = " " + line.substr(line.find(':') + 1) + " ";
            break;
        }
#if defined(__x86_64__)
    if (flags.empty()) {
        WARN("no flags line in /proc/cpuinfo: nothing to compare AVX512_BF16 detection with");
        return;
    }
    const bool listed = flags.find(" avx512_bf16 ") != std::string::npos;
    INFO("cpuinfo lists avx512_bf16: " << listed);
    CHECK(lstm::kernels::cpu::cpu_reports_avx512_bf16() == listed);
    // Runnable only where AVX-512 runs (and LSTM_MAX_CPU_ISA allows it).
    CHECK(lstm::kernels::cpu::cpu_has_avx512_bf16() ==
          (listed && lstm::kernels::cpu::cpu_has_avx512()));
#else
    CHECK_FALSE(lstm::kernels::cpu::cpu_reports_avx512_bf16());
    CHECK_FALSE(lstm::kernels::cpu::cpu_has_avx512_bf16());
#endif
}

TEST_CASE("bf16 rounding from double is the float rounding, in one step", "[bf16]") {
    using lstm::kernels::round_to_bf16;
    // On every float of the edge sweep the double overload (the oracle's) gives the float one's.
    int64_t misses = 0;
    const uint32_t lower[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
    for (uint32_t upper = 0; upper <= 0xffffu; ++upper) {
        for (uint32_t low : lower) {
            const float x = float_of((upper << 16) | low);
            if (std::isnan(x)) {
                misses += std::isnan(round_to_bf16(static_cast<double>(x))) ? 0 : 1;
                continue;
            }
            const double got = round_to_bf16(static_cast<double>(x));
            if (!(got == static_cast<double>(round_to_bf16(x)))) ++misses;
        }
    }
    CHECK(misses == 0);
    // One step, not through float: 1 + 2^-8 + 2^-30 lies above the tie between 1 and 1 + 2^-7,
    // though as a float it would be the tie itself (and go to 1).
    CHECK(round_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)) == 1.0078125);
    CHECK(round_to_bf16(1.00390625f + 0.0f) == 1.0f);
    // Below bf16's smallest normal the spacing is 2^-133: 1.5 spacings ties to 2 (even).
    CHECK(round_to_bf16(std::ldexp(1.5, -133)) == std::ldexp(1.0, -132));
    CHECK(round_to_bf16(std::ldexp(1.25, -133)) == std::ldexp(1.0, -133));
    // Past the largest finite bf16, (2 - 2^-7) 2^127, after rounding: infinity of its sign.
    CHECK(round_to_bf16(-std::ldexp(2.0 - std::ldexp(1.0, -8), 127)) == -HUGE_VAL);
    CHECK(round_to_bf16(std::ldexp(2.0 - std::ldexp(1.0, -7), 127)) ==
          std::ldexp(2.0 - std::ldexp(1.0, -7), 127));
}
