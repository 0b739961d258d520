#pragma once

// The launch shape of the memory-bound element-wise kernels (.cu files only): 256 threads per
// block keep enough loads in flight, and a grid capped at 4096 blocks loops over larger tensors
// (each thread then takes several elements, which costs nothing measurable at these sizes)
// instead of launching millions of blocks.

#include <algorithm>
#include <cstdint>

namespace lstm::kernels::cuda::grid {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// Blocks for n elements at kThreads each, capped.
inline unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// A grid-stride loop: for (i = first_index(); i < n; i += stride()).
__device__ inline int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace lstm::kernels::cuda::grid
