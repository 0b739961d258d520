#pragma once

// Launchers of the CUDA softmax cross-entropy kernels (kernels/cuda/cross_entropy.cu). For
// lstm_cuda's sources: includes the CUDA runtime API for cudaStream_t. Each launcher queues work
// on `stream` and returns cudaGetLastError() (launch errors) for the caller to turn into
// lstm::Error; kernels never throw or print. Arguments: CeArgs
// (kernels/cuda/cross_entropy_body.hpp), device pointers.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cross_entropy_body.hpp"

namespace lstm::kernels::cuda {

// Threads of the loss-sum kernel (one block; a power of two for the tree).
constexpr int64_t kCeTotalThreads = 256;
// Rows (warps) per block of the row kernel.
constexpr int64_t kCeRowWarps = 8;

// Overwrites a.row_loss, a.losses and a.grad (when given) for every row, then *a.total with the
// fixed-order sum of a.row_loss.
template <typename T>
cudaError_t launch_cross_entropy(const CeArgs<T>& a, cudaStream_t stream);

}  // namespace lstm::kernels::cuda
