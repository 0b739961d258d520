#pragma once

// Run-time CPU feature detection for kernels that are compiled for an instruction set the build
// flags may not enable (function-level target attributes), so one binary runs everywhere and takes
// the fast path where the processor has it.

// LSTM_HAVE_AVX512_KERNELS is 1 when this compiler can build the AVX-512 kernels whatever -march
// says: GCC and Clang on x86-64 accept per-function target attributes. Defining it to 0 leaves
// them out (the portable path then runs everywhere), which is also how that build is tested.
#ifndef LSTM_HAVE_AVX512_KERNELS
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LSTM_HAVE_AVX512_KERNELS 1
#else
#define LSTM_HAVE_AVX512_KERNELS 0
#endif
#endif

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define LSTM_HAVE_MXCSR 1
#else
#define LSTM_HAVE_MXCSR 0
#endif

namespace lstm::kernels::cpu {

// Sets flush-to-zero and denormals-are-zero on the calling thread for its lifetime and restores
// the caller's setting after. Gradients that decay through a long sequence (a loss on the last
// step only) sink into the denormal range, where x86 takes a microcode assist on every
// arithmetic instruction that touches one: on Braun's CE-long backward that is several times
// the whole step. Values below 1.2e-38 (float) become zero, as TensorFlow's CPU kernels do by
// default. No-op where the MXCSR register does not exist.
class ScopedFlushDenormals {
public:
#if LSTM_HAVE_MXCSR
    ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
    ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#endif
    ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
    ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

private:
#if LSTM_HAVE_MXCSR
    static constexpr unsigned kFtz = 1u << 15;  // results that would be denormal become 0
    static constexpr unsigned kDaz = 1u << 6;   // denormal inputs read as 0
    unsigned saved_;
#endif
};

// True when the processor and the operating system support AVX-512F with FMA, what
// kernels/cpu/avx512_gemm.hpp needs. __builtin_cpu_supports also checks that the OS saves the
// AVX-512 registers (XCR0), so a true here means the instructions run, not just that they exist.
inline bool cpu_has_avx512() {
#if LSTM_HAVE_AVX512_KERNELS
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    }();
    return has;
#else
    return false;
#endif
}

// True when the processor and the operating system support AVX2 with FMA, what the fused
// variant's Highway kernels (kernels/cpu/fused_simd.hpp) need for their AVX2 target; checked the
// same way as cpu_has_avx512(). False off x86-64.
inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return has;
#else
    return false;
#endif
}

}  // namespace lstm::kernels::cpu
