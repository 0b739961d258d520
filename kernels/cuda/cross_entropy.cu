// The CUDA softmax cross-entropy: __global__ wrappers around the bodies in
// kernels/cuda/cross_entropy_body.hpp (which the CPU tests run over the same grid) and the
// launcher. One warp per row; the loss sum is a second, single-block kernel with a fixed
// reduction order, so the result is bit-identical run to run (no atomics).

#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/warp_reduce.cuh"

namespace lstm::kernels::cuda {

namespace {

template <typename T>
__global__ void cross_entropy_rows_kernel(CeArgs<T> a) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kCeRowWarps + threadIdx.x / kWarpLanes;
    // Whole warps leave together, so the shuffles always see all 32 lanes.
    if (row >= a.rows) return;
    T max = T(0), sum = T(1), shifted = T(0);  // unused for rows not counted
    if (ce_row_counted(a, row)) {
        max = warp_max(ce_lane_max(a, row, lane));
        sum = warp_sum(ce_lane_sum(a, row, lane, max));
        if (a.smoothing != T(0)) shifted = warp_sum(ce_lane_shifted(a, row, lane, max));
    }
    ce_lane_finish(a, row, lane, max, sum, shifted);
}

template <typename T>
__global__ void __launch_bounds__(kCeTotalThreads) cross_entropy_total_kernel(CeArgs<T> a) {
    __shared__ double partial[kCeTotalThreads];
    const int64_t thread = threadIdx.x;
    ce_total_partial(a, thread, kCeTotalThreads, partial);
    __syncthreads();
    for (int64_t stride = kCeTotalThreads / 2; stride > 0; stride /= 2) {
        tree_sum_step(partial, thread, stride);
        __syncthreads();
    }
    if (thread == 0) *a.total = partial[0];
}

}  // namespace

// A warp per row (the shuffles of the softmax), kCeRowWarps rows per block; the total is one
// block, so that its sum has one fixed order.
template <typename T>
LaunchStatus launch_cross_entropy(const CeArgs<T>& a, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    if (a.rows > 0) {
        const int64_t blocks = (a.rows + kCeRowWarps - 1) / kCeRowWarps;
        cross_entropy_rows_kernel<T>
            <<<static_cast<unsigned>(blocks), static_cast<unsigned>(kCeRowWarps * kWarpLanes), 0,
               stream>>>(a);
        const cudaError_t status = cudaGetLastError();
        if (status != cudaSuccess) return {static_cast<int>(status)};
    }
    cross_entropy_total_kernel<T><<<1, static_cast<unsigned>(kCeTotalThreads), 0, stream>>>(a);
    return {static_cast<int>(cudaGetLastError())};
}

template LaunchStatus launch_cross_entropy<float>(const CeArgs<float>&, void*);
template LaunchStatus launch_cross_entropy<double>(const CeArgs<double>&, void*);

}  // namespace lstm::kernels::cuda
