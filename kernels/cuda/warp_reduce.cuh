#pragma once

// Warp-wide butterfly reductions of the loss kernels (.cu files only: CUDA shuffle intrinsics).
// Every lane combines the same two values, in swapped order, which IEEE max and addition do not
// notice, so all 32 lanes end with one bit-identical result whatever the timing. Callers keep
// whole warps together (all 32 lanes take part).

#include "kernels/cuda/loss_body.hpp"

namespace lstm::kernels::cuda {

constexpr unsigned kFullWarpMask = 0xffffffffu;

template <typename T>
__device__ T warp_max(T v) {
    for (int offset = kWarpLanes / 2; offset > 0; offset /= 2)
        v = loss_max(v, __shfl_xor_sync(kFullWarpMask, v, offset));
    return v;
}

template <typename T>
__device__ T warp_sum(T v) {
    for (int offset = kWarpLanes / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(kFullWarpMask, v, offset);
    return v;
}

}  // namespace lstm::kernels::cuda
