#pragma once

// This machine's fp32 FMA peak, the denominator of the `peak_frac` counter: GFLOP/s alone does not
// say whether a kernel is near the limit or far from it, and the limit differs by a factor of 4
// between an AVX2 laptop core and an AVX-512 server core. Measured, not computed from a clock
// and a port count: turbo, AVX-512 frequency drops, SMT siblings and a shared machine all move it,
// and a loop run the way the cases run (one OpenMP team) sees the same effects.
//
// No Google Benchmark here, so tests/peak_test.cpp compiles this file into lstm_tests.

#include <chrono>
#include <vector>

namespace lstm::bench {

// Rounds of each measurement; the best one counts, since a noisy machine only ever slows a round.
constexpr int kPeakRounds = 5;
// Length of one round: long enough for the clock to ramp up and the timer to be exact, short
// enough that a measurement costs about 0.2 s at start-up.
constexpr double kPeakRoundSeconds = 0.04;
// Measurements more of a multi-thread peak that came out well under the threads times one
// thread's (fma_peak_gflops), and the pause before each: long enough to outlast a host's
// scheduling hiccup, short enough that an SMT machine, whose siblings always measure under,
// pays about a second.
constexpr int kPeakRetries = 3;
constexpr std::chrono::milliseconds kPeakRetryPause{100};

// The fp32 FMA peak of `threads` threads in GFLOP/s: every thread of an OpenMP team of that size
// runs kernels::cpu::fma_peak_loop (independent FMA chains on the instruction set Highway
// dispatched to, kernels/cpu/simd.hpp) for about `round_seconds`, `rounds` times; the best
// round's FLOPs over its wall time. Throws lstm::Error naming the argument when threads or
// rounds is below 1 or round_seconds is not a positive finite number.
double measure_fma_peak_gflops(int threads, int rounds = kPeakRounds,
                               double round_seconds = kPeakRoundSeconds);

// Measures the peak for each thread count (once per distinct count), so fma_peak_gflops() answers
// from memory. lstm_bench calls it at start-up for every count its CPU cases use, before any case
// runs: measured during the cases, the loop would compete with them.
void measure_fma_peaks(const std::vector<int>& thread_counts);

// The peak measured for `threads` by measure_fma_peaks(); measured now (and kept) if it was not.
double fma_peak_gflops(int threads);

// The bf16 dot-product peak, the denominator of a bf16 case's `peak_frac` where the CPU has the
// instruction: the same measurement with kernels::cpu::bf16_dot_peak_loop (independent
// VDPBF16PS chains, AVX512_BF16) in place of the FMA loop. Whether this CPU runs it; the
// measurement and the kept peak throw lstm::Unsupported where it does not, and otherwise as
// their fp32 twins.
bool bf16_peak_runs();
double measure_bf16_peak_gflops(int threads, int rounds = kPeakRounds,
                                double round_seconds = kPeakRoundSeconds);
double bf16_peak_gflops(int threads);

}  // namespace lstm::bench
