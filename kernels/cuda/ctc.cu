// The CUDA CTC kernels: thin __global__ wrappers around the bodies in kernels/cuda/ctc_body.hpp
// (which the CPU tests run over the same grid) and their launchers. Design: docs/ctc.md, "On the
// GPU".

#include "kernels/cuda/ctc.hpp"
#include "kernels/cuda/ctc_layout.hpp"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace lstm::kernels::cuda {

namespace {

template <typename T>
__global__ void ctc_log_norm_kernel(CtcArgs<T> a) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
    const int64_t frame =
        static_cast<int64_t>(blockIdx.x) * kCtcNormWarps + threadIdx.x / kWarpLanes;
    // Whole warps leave together, so the shuffles below always see all 32 lanes.
    if (frame >= a.max_time * a.batch || !ctc_frame_valid(a, frame)) return;
    const double max = warp_max(ctc_norm_lane_max(a, frame, lane));
    // Uniform across the warp: log-probs need only the check in max.
    const double sum = a.logits ? warp_sum(ctc_norm_lane_sum(a, frame, lane, max)) : 0.0;
    ctc_norm_store(a, frame, lane, max, sum);
}

// Block (n, direction): the recursion of sample n, alpha (blockIdx.y 0) or beta (1).
template <typename T>
__global__ void ctc_recursion_kernel(CtcArgs<T> a, bool ring_in_shared) {
    extern __shared__ double shared_ring[];
    const int64_t n = blockIdx.x;
    const bool backward = blockIdx.y == 1;
    const int64_t thread = threadIdx.x, threads = blockDim.x;
    double* ring =
        ring_in_shared ? shared_ring : a.ring + (n * 2 + (backward ? 1 : 0)) * 2 * a.max_states;
    const int64_t frames = a.samples[n].frames;
    double emission = ctc_first_emission(a, n, backward, 0, thread);
    for (int64_t step = 0; step < frames; ++step) {
        ctc_recursion_step(a, n, backward, step, thread, threads, ring, emission);
        // Issued before the barrier, consumed after it.
        emission = ctc_first_emission(a, n, backward, step + 1, thread);
        __syncthreads();
    }
    if (!backward && thread == 0) ctc_alpha_finish(a, n);
}

template <typename T>
__global__ void __launch_bounds__(kCtcGradThreads) ctc_gradient_kernel(CtcArgs<T> a) {
    __shared__ double partial[kCtcGradThreads];
    const int64_t frame = blockIdx.x;
    const int64_t thread = threadIdx.x;
    ctc_grad_base(a, frame, thread, kCtcGradThreads, partial);
    __syncthreads();
    for (int64_t stride = kCtcGradThreads / 2; stride > 0; stride /= 2) {
        tree_sum_step(partial, thread, stride);
        __syncthreads();
    }
    ctc_grad_labels(a, frame, thread, kCtcGradThreads, partial);
}

template <typename T>
__global__ void ctc_cudnn_finish_kernel(CtcArgs<T> a, const float* costs) {
    const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (n < a.batch) ctc_cudnn_finish_sample(a, costs, n);
}

// After ctc_cudnn_finish_kernel (it reads loglik).
template <typename T>
__global__ void ctc_cudnn_grad_kernel(CtcArgs<T> a) {
    const int64_t count = a.max_time * a.batch * a.classes;
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += step)
        ctc_cudnn_scale_grad(a, i);
}

}  // namespace

// A warp per frame (the shuffles of the normalizer), kCtcNormWarps frames per block.
template <typename T>
LaunchStatus launch_ctc_log_norm(const CtcArgs<T>& a, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    const int64_t frames = a.max_time * a.batch;
    if (frames == 0) return {};
    const int64_t blocks = (frames + kCtcNormWarps - 1) / kCtcNormWarps;
    ctc_log_norm_kernel<T><<<static_cast<unsigned>(blocks),
                             static_cast<unsigned>(kCtcNormWarps * kWarpLanes), 0, stream>>>(a);
    return {static_cast<int>(cudaGetLastError())};
}

// A block per (sample, direction): each recursion is sequential in time.
template <typename T>
LaunchStatus launch_ctc_recursions(const CtcArgs<T>& a, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    if (a.batch == 0) return {};
    const bool in_shared = ctc_ring_in_shared(a.max_states);
    const size_t shared = in_shared ? static_cast<size_t>(2 * a.max_states) * sizeof(double) : 0;
    const dim3 grid(static_cast<unsigned>(a.batch), 2);
    const auto threads = static_cast<unsigned>(ctc_recursion_threads(a.max_states));
    ctc_recursion_kernel<T><<<grid, threads, shared, stream>>>(a, in_shared);
    return {static_cast<int>(cudaGetLastError())};
}

// A block per frame: its threads sum the frame's posteriors in shared memory.
template <typename T>
LaunchStatus launch_ctc_gradient(const CtcArgs<T>& a, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    const int64_t frames = a.max_time * a.batch;
    if (a.grad == nullptr || frames == 0) return {};
    ctc_gradient_kernel<T>
        <<<static_cast<unsigned>(frames), static_cast<unsigned>(kCtcGradThreads), 0, stream>>>(a);
    return {static_cast<int>(cudaGetLastError())};
}

// A thread per sample (no grid-stride loop, so the grid is not capped), then an element-wise pass
// over the gradient.
template <typename T>
LaunchStatus launch_ctc_cudnn_finish(const CtcArgs<T>& a, const float* costs, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    if (a.batch == 0) return {};
    const int64_t blocks = (a.batch + grid::kThreads - 1) / grid::kThreads;
    ctc_cudnn_finish_kernel<T>
        <<<static_cast<unsigned>(blocks), grid::kThreads, 0, stream>>>(a, costs);
    const cudaError_t status = cudaGetLastError();
    const int64_t count = a.max_time * a.batch * a.classes;
    if (status != cudaSuccess || a.grad == nullptr || count == 0) return {static_cast<int>(status)};
    ctc_cudnn_grad_kernel<T><<<grid::blocks_for(count), grid::kThreads, 0, stream>>>(a);
    return {static_cast<int>(cudaGetLastError())};
}

template LaunchStatus launch_ctc_log_norm<float>(const CtcArgs<float>&, void*);
template LaunchStatus launch_ctc_log_norm<double>(const CtcArgs<double>&, void*);
template LaunchStatus launch_ctc_recursions<float>(const CtcArgs<float>&, void*);
template LaunchStatus launch_ctc_recursions<double>(const CtcArgs<double>&, void*);
template LaunchStatus launch_ctc_gradient<float>(const CtcArgs<float>&, void*);
template LaunchStatus launch_ctc_gradient<double>(const CtcArgs<double>&, void*);
template LaunchStatus launch_ctc_cudnn_finish<float>(const CtcArgs<float>&, const float*, void*);
template LaunchStatus launch_ctc_cudnn_finish<double>(const CtcArgs<double>&, const float*, void*);

}  // namespace lstm::kernels::cuda
