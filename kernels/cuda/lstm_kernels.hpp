#pragma once

// Launchers of the CUDA LSTM kernels (kernels/cuda/lstm_kernels.cu): one grid-stride kernel per
// op of lstm_ops.hpp, in the convention of kernels/cuda/launch.hpp.

#include <cstdint>

#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/lstm_ops.hpp"

namespace lstm::kernels::cuda {

// Queues op(i) for every i in [0, count) on `stream` (a cudaStream_t); count == 0 queues nothing.
// Every pointer inside `op` is device memory.
template <typename Op>
LaunchStatus launch(const Op& op, int64_t count, void* stream);

}  // namespace lstm::kernels::cuda
