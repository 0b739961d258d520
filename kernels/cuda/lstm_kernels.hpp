#pragma once

// Launchers of the CUDA LSTM kernels (kernels/cuda/lstm_kernels.cu): one grid-stride kernel per
// op of lstm_ops.hpp. Declared without CUDA headers, so host code compiled by the C++ compiler
// calls them; the stream is a cudaStream_t passed as void*.

#include <cstdint>

#include "kernels/cuda/lstm_ops.hpp"

namespace lstm::kernels::cuda {

// Queues op(i) for every i in [0, count) on `stream` (a cudaStream_t); count == 0 queues nothing.
// Every pointer inside `op` is device memory. Returns the launch status as a cudaError_t value
// (0 = success), which the caller turns into an error: kernels never throw.
template <typename Op>
int launch(const Op& op, int64_t count, void* stream);

}  // namespace lstm::kernels::cuda
