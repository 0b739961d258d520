#pragma once

// Run-time CPU feature detection for kernels that are compiled for an instruction set the build
// flags may not enable (Highway's per-target code in lstm_cpu), so one binary runs everywhere and
// takes the fast path where the processor has it.

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define LSTM_HAVE_MXCSR 1
#else
#define LSTM_HAVE_MXCSR 0
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define LSTM_HAVE_FPCR 1
#else
#define LSTM_HAVE_FPCR 0
#endif
// Whether this processor's floating-point control register (x86's MXCSR, AArch64's FPCR) is read
// and set here: where not, ScopedFlushDenormals does nothing.
#define LSTM_HAVE_FP_CONTROL (LSTM_HAVE_MXCSR || LSTM_HAVE_FPCR)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lstm/error.hpp"

namespace lstm::kernels::cpu {

// Ceilings for the instruction sets the CPU kernels use on x86-64, widest first: all (whatever
// the CPU has), avx2 (no AVX-512), sse4 (no AVX2 either: 128-bit vectors).
enum class SimdCap { all, avx2, sse4 };

// The ceiling LSTM_MAX_CPU_ISA names, in any case (DNNL_MAX_CPU_ISA's values are upper case):
// unset, empty or "all" -> all; "avx2"; "sse4". Throws lstm::Error naming the variable for
// anything else.
inline SimdCap parse_isa_cap(const char* value) {
    if (value == nullptr) return SimdCap::all;
    std::string lower(value);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.empty() || lower == "all") return SimdCap::all;
    if (lower == "avx2") return SimdCap::avx2;
    if (lower == "sse4") return SimdCap::sse4;
    fail("LSTM_MAX_CPU_ISA = '", value, "' is not one of all, avx2, sse4");
}

// The value isa_cap() came from: "all", "avx2" or "sse4".
inline const char* isa_cap_name(SimdCap cap) {
    switch (cap) {
        case SimdCap::all:
            return "all";
        case SimdCap::avx2:
            return "avx2";
        case SimdCap::sse4:
            return "sse4";
    }
    return "?";
}

// Whether ceiling a allows less than ceiling b. The enumerators run from widest to narrowest.
inline bool narrower_than(SimdCap a, SimdCap b) {
    return static_cast<int>(a) > static_cast<int>(b);
}

// The narrowest ceiling the compiled kernels (lstm_cpu) can honour, and Highway's name of the
// instruction set their compiler flags made the baseline (kernels/cpu/simd.cpp). Highway compiles
// no target below that baseline. Built with -march=native on a Zen 3 (flags with AVX2, FMA, BMI2,
// F16C, AES and PCLMUL, all of which Highway's AVX2 target needs) lstm_cpu has AVX2 and AVX-512
// kernels but no SSE4 ones, so the narrowest ceiling is avx2.
SimdCap narrowest_simd_cap();
const char* simd_baseline_name();

// parse_isa_cap(value), refused (lstm::Error naming the variable) when it is narrower than
// `narrowest`: a ceiling with nothing compiled under it would leave the kernels above it running
// while the cap claimed otherwise. `baseline` names the instruction set for the message.
inline SimdCap checked_isa_cap(const char* value, SimdCap narrowest, const char* baseline) {
    const SimdCap cap = parse_isa_cap(value);
    if (narrower_than(cap, narrowest)) {
        fail("LSTM_MAX_CPU_ISA = '", value,
             "' is narrower than this build's CPU kernels allow: they were compiled with ",
             baseline, " as their baseline (compiler flags such as -march), so the narrowest ",
             "ceiling is '", isa_cap_name(narrowest),
             "'; set that or a wider one, or build the library without those flags");
    }
    return cap;
}

// The process's ceiling, LSTM_MAX_CPU_ISA read at the first use, as oneDNN reads its
// DNNL_MAX_CPU_ISA. It lets a wider machine run everything a narrower one runs: fused's default
// path and which of its paths exist, the tests that skip what the CPU lacks, and the Highway
// kernels' dispatch (kernels/cpu/simd.hpp: the CTC loss, the FMA peak).
inline SimdCap isa_cap() {
    static const SimdCap cap = checked_isa_cap(std::getenv("LSTM_MAX_CPU_ISA"),
                                               narrowest_simd_cap(), simd_baseline_name());
    return cap;
}

// For messages that say an instruction set is missing: where isa_cap() is what hides it, the
// user should hear so.
inline std::string isa_cap_note() {
    if (isa_cap() == SimdCap::all) return "";
    return std::string(" (LSTM_MAX_CPU_ISA = ") + isa_cap_name(isa_cap()) +
           " caps what it may use)";
}

// The calling thread's floating-point control register and the bits of it that flush denormals
// to zero: on x86 MXCSR's flush-to-zero (results, bit 15) and denormals-are-zero (inputs, bit 6);
// on AArch64 FPCR's FZ (bit 24), which does both. `fp_control_mode_mask` leaves out the register's
// sticky status flags (MXCSR's low six; FPCR has none: they live in FPSR).
#if LSTM_HAVE_MXCSR
using FpControl = unsigned;
inline FpControl read_fp_control() { return _mm_getcsr(); }
inline void write_fp_control(FpControl value) { _mm_setcsr(value); }
constexpr FpControl kFlushDenormalBits = (1u << 15) | (1u << 6);
constexpr FpControl fp_control_mode_mask = ~FpControl{0x3F};
#elif LSTM_HAVE_FPCR
using FpControl = uint64_t;
inline FpControl read_fp_control() {
    FpControl value;
    asm volatile("mrs %0, fpcr" : "=r"(value));
    return value;
}
inline void write_fp_control(FpControl value) { asm volatile("msr fpcr, %0" : : "r"(value)); }
constexpr FpControl kFlushDenormalBits = FpControl{1} << 24;
constexpr FpControl fp_control_mode_mask = ~FpControl{0};
#endif

// Sets flush-to-zero and denormals-are-zero on the calling thread for its lifetime and restores
// the caller's setting after. Gradients that decay through a long sequence (a loss on the last
// step only) sink into the denormal range, where x86 takes a microcode assist on every
// arithmetic instruction that touches one: on Braun's CE-long backward that is several times
// the whole step. Values below 1.2e-38 in float and 2.2e-308 in double (one register rules both)
// become zero, as TensorFlow's CPU kernels do by default; ARM does the same, so the results are
// those of x86. No-op where the control register is not known here.
class ScopedFlushDenormals {
public:
#if LSTM_HAVE_FP_CONTROL
    ScopedFlushDenormals() : saved_(read_fp_control()) {
        write_fp_control(saved_ | kFlushDenormalBits);
    }
    ~ScopedFlushDenormals() { write_fp_control(saved_); }
#else
    ScopedFlushDenormals() = default;
#endif
    ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
    ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

#if LSTM_HAVE_FP_CONTROL
private:
    FpControl saved_;
#endif
};

// True when the processor and the operating system support AVX-512 F, BW, DQ and VL and every
// other set Highway 1.0 compiles its AVX3 target for (the fused variant's avx512 path: AVX2, FMA,
// BMI, BMI2, F16C, AES, PCLMUL, SSE4.2), and isa_cap() allows it. The fused variant picks that
// target's functions itself rather than through Highway's dispatch, so it asks here.
// __builtin_cpu_supports also checks that the OS saves the AVX-512 registers (XCR0), so a true
// here means the instructions run, not just that they exist. False off x86-64.
inline bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool has = [] {
        __builtin_cpu_init();
        // Clang 14's builtin does not know "f16c": that bit comes from CPUID leaf 1 (the OS
        // saving the YMM registers it needs is part of the builtin's "avx2").
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
        return f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
               __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
               __builtin_cpu_supports("sse4.2");
    }();
    return has && isa_cap() == SimdCap::all;
#else
    return false;
#endif
}

// Whether CPUID reports AVX512_BF16 (leaf 7, subleaf 1, EAX bit 5: VDPBF16PS and the bf16
// conversions), whatever the operating system or isa_cap() allow. False off x86-64.
inline bool cpu_reports_avx512_bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // Subleaf 1 exists only when leaf 7's subleaf 0 says so in EAX.
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || eax < 1) return false;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (eax & (1u << 5)) != 0;
#else
    return false;
#endif
}

// True when the bf16 instructions run here: the CPU reports AVX512_BF16 and cpu_has_avx512()
// holds (the operating system saves the AVX-512 registers, isa_cap() allows AVX-512).
inline bool cpu_has_avx512_bf16() { return cpu_reports_avx512_bf16() && cpu_has_avx512(); }

// True when the processor and the operating system support AVX2 with FMA, what the fused
// variant's Highway kernels (kernels/cpu/fused_simd.hpp) need for their AVX2 target, and
// isa_cap() allows it; checked the same way as cpu_has_avx512(). False off x86-64.
inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return has && isa_cap() != SimdCap::sse4;
#else
    return false;
#endif
}

}  // namespace lstm::kernels::cpu
