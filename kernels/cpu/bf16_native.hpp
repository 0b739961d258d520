#pragma once

// Code that executes the AVX512_BF16 instructions (VDPBF16PS: 16 lanes, each adding the products
// of two bf16 pairs to an fp32 sum), compiled in kernels/cpu/bf16_native.cpp with those
// instructions enabled for its functions alone, so the rest of lstm_cpu stays baseline x86-64.
// Every entry point checks cpu_has_avx512_bf16() (kernels/cpu/cpu_features.hpp: the CPU reports
// the instructions, runs AVX-512 and LSTM_MAX_CPU_ISA allows it) and throws lstm::Unsupported
// where it is false, so the instructions never run on a CPU without them.

#include <cstdint>

namespace lstm::kernels::cpu {

// Whether this build has the native bf16 code (an x86-64 build with a compiler that has the
// AVX512_BF16 intrinsics); false elsewhere, where the entry points below always throw.
bool bf16_native_compiled();

// The bf16 dot-product peak loop: `iterations` rounds of 12 independent VDPBF16PS chains on one
// thread. Returns the FLOPs done (each instruction: 16 lanes x 2 products x 2 FLOPs).
int64_t bf16_dot_peak_loop(int64_t iterations);

}  // namespace lstm::kernels::cpu
