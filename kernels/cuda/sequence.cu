// The sequence heads' device kernels: grid-stride loops around the bodies of
// kernels/cuda/sequence.hpp.

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/sequence.hpp"

namespace lstm::kernels::cuda {

namespace {

// Memory-bound copies: 256 threads per block, a grid capped so huge tensors loop instead of
// launching millions of blocks.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void gather_last_step_kernel(int64_t steps, int64_t batch, int64_t features,
                                        const int64_t* lengths, const T* y, T* out) {
    const int64_t total = batch * features;
    for (int64_t i = first_index(); i < total; i += grid_stride())
        gather_last_step_element(i, steps, batch, features, lengths, y, out);
}

template <typename T>
__global__ void scatter_last_step_kernel(int64_t steps, int64_t batch, int64_t features,
                                         const int64_t* lengths, const T* dout, T* dy) {
    const int64_t total = steps * batch * features;
    for (int64_t i = first_index(); i < total; i += grid_stride())
        scatter_last_step_element(i, steps, batch, features, lengths, dout, dy);
}

template <typename T>
__global__ void mean_pool_kernel(int64_t steps, int64_t batch, int64_t features,
                                 const int64_t* lengths, const T* y, T* out) {
    const int64_t total = batch * features;
    for (int64_t i = first_index(); i < total; i += grid_stride())
        mean_pool_element(i, steps, batch, features, lengths, y, out);
}

template <typename T>
__global__ void scatter_mean_pool_kernel(int64_t steps, int64_t batch, int64_t features,
                                         const int64_t* lengths, const T* dout, T* dy) {
    const int64_t total = steps * batch * features;
    for (int64_t i = first_index(); i < total; i += grid_stride())
        scatter_mean_pool_element(i, steps, batch, features, lengths, dout, dy);
}

}  // namespace

template <typename T>
void launch_gather_last_step(int64_t steps, int64_t batch, int64_t features, const int64_t* lengths,
                             const T* y, T* out, void* stream) {
    const int64_t total = batch * features;
    if (total == 0) return;
    gather_last_step_kernel<T><<<blocks_for(total), kThreads, 0, cudaStream_t(stream)>>>(
        steps, batch, features, lengths, y, out);
}

template <typename T>
void launch_scatter_last_step(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* dout, T* dy, void* stream) {
    const int64_t total = steps * batch * features;
    if (total == 0) return;
    scatter_last_step_kernel<T><<<blocks_for(total), kThreads, 0, cudaStream_t(stream)>>>(
        steps, batch, features, lengths, dout, dy);
}

template <typename T>
void launch_mean_pool(int64_t steps, int64_t batch, int64_t features, const int64_t* lengths,
                      const T* y, T* out, void* stream) {
    const int64_t total = batch * features;
    if (total == 0) return;
    mean_pool_kernel<T><<<blocks_for(total), kThreads, 0, cudaStream_t(stream)>>>(
        steps, batch, features, lengths, y, out);
}

template <typename T>
void launch_scatter_mean_pool(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* dout, T* dy, void* stream) {
    const int64_t total = steps * batch * features;
    if (total == 0) return;
    scatter_mean_pool_kernel<T><<<blocks_for(total), kThreads, 0, cudaStream_t(stream)>>>(
        steps, batch, features, lengths, dout, dy);
}

#define LSTM_INSTANTIATE_SEQUENCE(T)                                                               \
    template void launch_gather_last_step<T>(int64_t, int64_t, int64_t, const int64_t*, const T*,  \
                                             T*, void*);                                           \
    template void launch_scatter_last_step<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, \
                                              T*, void*);                                          \
    template void launch_mean_pool<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, T*,     \
                                      void*);                                                      \
    template void launch_scatter_mean_pool<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, \
                                              T*, void*);
LSTM_INSTANTIATE_SEQUENCE(float)
LSTM_INSTANTIATE_SEQUENCE(double)
#undef LSTM_INSTANTIATE_SEQUENCE

}  // namespace lstm::kernels::cuda
