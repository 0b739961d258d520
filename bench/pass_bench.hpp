#pragma once

// Cases that time one call of a variant on a whole LSTM stack: a training forward, a backward
// part, or both, on synthetic data in the variant's own memory space. DeepBench's kernel sizes
// (deepbench_bench.hpp) and the shapes of --lstm_shape (shape_bench.hpp) both register through
// here, so every shape is timed, counted and reference-checked by the same code. Names:
// <family>/<shape>/<pass>/cpu/<variant>/threads:K, and <family>/<shape>/<pass>/cuda/<variant>
// (once, no thread sweep; skipped with the reason when no GPU is visible).

#include <cstdint>
#include <string>
#include <vector>

#include "flags.hpp"
#include "lstm/config.hpp"

namespace lstm::bench {

enum class Pass {
    fwd,          // training forward (reserve written)
    bwd_data,     // BackwardPart::data: dx, and the reserve for the weights part
    bwd_weights,  // BackwardPart::weights: the weight gradients
    bwd,          // BackwardPart::all: both in one call, which every variant can time
    fwd_bwd,      // a training forward then BackwardPart::all, timed together
};

// The stack and the batch one case runs: every sequence of length seq_len.
struct PassShape {
    std::string name;  // the shape's part of the case name, e.g. "H:512/N:16/T:25"; unique
    Config config;
    int64_t seq_len;  // T
    int64_t batch;    // N
};

// Registers one case per (shape, pass, variant, thread count), device outermost (every cpu case,
// then every cuda case), so that listings and result files keep one order.
void register_pass_cases(const std::string& family, const std::vector<PassShape>& shapes,
                         const std::vector<Pass>& passes, const BenchFlags& flags);

}  // namespace lstm::bench
