#pragma once

// The launch shape of every element-wise kernel (.cu files only; the launcher convention is in
// kernels/cuda/launch.hpp): 256 threads per block, a multiple of the warp size that keeps several
// blocks resident per SM and enough loads in flight for these memory-bound passes, and a grid
// capped at 8192 blocks, which fills every SM of an H200 (132 SMs, 8 resident blocks of 256
// each) several times over. Larger tensors are covered by the grid-stride loop (each thread then
// takes several elements, which costs nothing measurable at these sizes) instead of launching
// millions of blocks. The cap is the one the LSTM step kernels (lstm_kernels.cu) were tuned with;
// it does not change what any element computes, only which thread computes it.

#include <algorithm>
#include <cstdint>

namespace lstm::kernels::cuda::grid {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// Blocks for n elements at kThreads each, capped; n > 0.
inline unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// A grid-stride loop: for (i = first_index(); i < n; i += stride()).
__device__ inline int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace lstm::kernels::cuda::grid
