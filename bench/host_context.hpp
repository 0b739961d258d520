#pragma once

// What lstm_bench reports about the machine beside its numbers: the host and the path each
// variant takes on it (lstm/host_info.hpp), the measured FMA peak (peak.hpp), and the `peak_frac`
// counter that relates a CPU case's GFLOP/s to that peak.

#include <benchmark/benchmark.h>

#include <vector>

#include "lstm/tensor.hpp"

namespace lstm::bench {

// Measures the FMA peak for each of `cpu_thread_counts` and adds to Google Benchmark's context
// (printed before the first case, and under "context" in the JSON): cpu_model, cpu_isa,
// simd_target, eigen_isa, fma_peak/threads:K and bf16_peak/threads:K for every K (the bf16 one
// "none" and why where the CPU has no AVX512_BF16), and path:<variant>/<device> (and .../bf16)
// for every registered variant plus path:ctc/cpu. Call before the context is reported (lstm_bench:
// just before the first case runs).
void add_host_context(const std::vector<int>& cpu_thread_counts);

// A CPU case's `peak_frac` counter: `iterations` of `flops` each in `seconds` (the case's own
// timed span: its wall-clock loop, or the sum of its manual iteration times), over the peak of
// `threads` threads; 0..1. The peak is the fp32 FMA one, or for a bf16 case the bf16 dot-product
// one where the CPU has it (the ceiling a bf16 product can reach there). A plain value: as a
// Google Benchmark rate it would print as "/s".
benchmark::Counter peak_fraction(double flops, benchmark::IterationCount iterations, double seconds,
                                 int threads, Precision precision = Precision::full);

}  // namespace lstm::bench
