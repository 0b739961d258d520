#pragma once

// Launcher of the CUDA softmax cross-entropy kernels (kernels/cuda/cross_entropy.cu), in the
// convention of kernels/cuda/launch.hpp. Arguments: CeArgs (kernels/cuda/cross_entropy_body.hpp),
// device pointers.

#include <cstdint>

#include "kernels/cuda/cross_entropy_body.hpp"
#include "kernels/cuda/launch.hpp"

namespace lstm::kernels::cuda {

// Threads of the loss-sum kernel (one block; a power of two for the tree).
constexpr int64_t kCeTotalThreads = 256;
// Rows (warps) per block of the row kernel.
constexpr int64_t kCeRowWarps = 8;

// Overwrites a.row_loss, a.losses and a.grad (when given) for every row, then *a.total with the
// fixed-order sum of a.row_loss.
template <typename T>
LaunchStatus launch_cross_entropy(const CeArgs<T>& a, void* stream);

}  // namespace lstm::kernels::cuda
