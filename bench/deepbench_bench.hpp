#pragma once

// Registers the DeepBench LSTM kernel cases (docs/benchmarks.md, "DeepBench kernel sizes") for
// every variant, through the per-pass fixture of pass_bench.hpp (one for both devices):
// deepbench/H:<H>/N:<N>/T:<T>/<fwd|bwd_data|bwd_weights|bwd>/cpu/<variant>/ threads:K, and
// .../cuda/<variant> (once, no thread sweep; skipped with the reason when no GPU is visible).

#include <cstdint>
#include <string>
#include <vector>

#include "flags.hpp"

namespace lstm::bench {

// DeepBench's LSTM training sizes used here (docs/benchmarks.md, "DeepBench kernel sizes"): one
// layer, unidirectional, input size = H, every sequence of length T, on either device.
struct DeepBenchShape {
    int64_t hidden, batch, seq_len;
};
const std::vector<DeepBenchShape>& deepbench_shapes();
// "H:512/N:16/T:25", the shape's part of a case name.
std::string deepbench_shape_name(const DeepBenchShape& s);

void register_deepbench_cases(const BenchFlags& flags);

}  // namespace lstm::bench
