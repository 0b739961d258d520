#pragma once

// The FLOP convention of docs/benchmarks.md ("FLOP convention"), so GFLOP/s compares across
// variants and with published numbers: only the LSTM's GEMMs count, and only at valid (unpadded)
// steps.
//
//   forward  = sum over layers l and directions d of
//                (2 * 4H * (in_l + S) + 2 * P * H) * sum_n lengths[n]
//   backward = 2 * forward   (the data gradient and the weight gradient are one GEMM each)
//   training step = forward + backward = 3 * forward
//
// in_l is the input width of layer l (I for the first, D*S above it), S the width of h (P with a
// projection of P features, else H); the 2 * P * H term is the projection's GEMM (none when P is
// 0, where S = H and this is 2 * 4H * (in_l + H)). Element-wise gate math,
// biases, the dense head, the loss and the optimizer are not counted: they are small next to the
// GEMMs, and every published LSTM FLOP count leaves them out too.

#include <cstdint>
#include <vector>

#include "lstm/config.hpp"

namespace lstm::bench {

inline double lstm_forward_flops(const Config& config, const std::vector<int64_t>& lengths) {
    double valid_steps = 0;
    for (int64_t len : lengths) valid_steps += static_cast<double>(len);
    const double gates = 4.0 * static_cast<double>(config.hidden_size);
    const double projection =
        2.0 * static_cast<double>(config.proj_size) * static_cast<double>(config.hidden_size);
    double per_step = 0;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const double width = static_cast<double>(config.layer_input_size(l) + config.state_size());
        per_step +=
            static_cast<double>(config.num_directions()) * (2.0 * gates * width + projection);
    }
    return per_step * valid_steps;
}

inline double lstm_training_step_flops(const Config& config, const std::vector<int64_t>& lengths) {
    constexpr double kForwardPlusBackward = 3.0;  // backward costs two forwards (see above)
    return kForwardPlusBackward * lstm_forward_flops(config, lengths);
}

}  // namespace lstm::bench
