#pragma once

// The compiled CPU kernels' run-time dispatch (lstm_cpu, built from kernels/cpu/*.cpp with Google
// Highway): each such kernel is compiled once per instruction set Highway targets on this
// architecture (x86-64: SSE4, AVX2, AVX-512; ARM: NEON, SVE) and the widest one the processor
// runs is chosen on the first call, whatever flags the consumer compiles with.

#include <cstdint>

#include "kernels/cpu/cpu_features.hpp"

namespace lstm::kernels::cpu {

// Highway's name of the instruction set the dispatched kernels run on this CPU ("AVX3",
// "AVX2", "SSE4", "EMU128", ...), after any restriction by restrict_simd().
const char* simd_target_name();

// Vector width in floats of that instruction set.
int64_t simd_float_lanes();

// Stops the dispatched kernels from using AVX-512 (they take AVX2 or narrower) when `avx2_max`,
// or lets them use all the CPU has; for standing in for an AVX2-only machine on an AVX-512 one.
// Takes effect for calls that start after it returns.
void restrict_simd_to_avx2(bool avx2_max);

// Caps the dispatched kernels at `cap` (all: whatever the CPU has; avx2: as
// restrict_simd_to_avx2(true); sse4: 128-bit vectors, for testing the narrow code path), or at
// isa_cap() (LSTM_MAX_CPU_ISA) where that is narrower, for calls that start after it returns. A
// CPU without the capped set runs a narrower one, and a build without it (a cap narrower than
// narrowest_simd_cap()) its baseline: check simd_target_name(). No effect on other
// architectures' targets.
void restrict_simd(SimdCap cap);

// Applies isa_cap() to the dispatch once per process; every dispatching entry point of lstm_cpu
// calls it before its first dispatch.
void apply_isa_cap();

// The Highway targets this CPU runs after the caps above (a bit set of HWY_* target bits). Use it
// instead of hwy::SupportedTargets(), which in Highway 1.0 also re-detects the CPU and points the
// dispatch back at the widest target it has, caps or not.
int64_t supported_targets();

// Runs `iterations` rounds of independent fp32 FMA chains on the dispatched instruction set, on
// the calling thread, and returns the floating-point operations done (2 per lane per FMA). Timing
// it gives the core's FMA peak; the loop's accumulators cover the FMA units' latency.
int64_t fma_peak_loop(int64_t iterations);

}  // namespace lstm::kernels::cpu
