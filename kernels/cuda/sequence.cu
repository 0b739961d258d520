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

// One element body of kernels/cuda/sequence.hpp: element `idx` of (src -> dst).
template <typename T>
using ElementBody = void (*)(int64_t idx, int64_t steps, int64_t batch, int64_t features,
                             const int64_t* lengths, const T* src, T* dst);

template <typename T, ElementBody<T> Body>
__global__ void sequence_kernel(int64_t total, int64_t steps, int64_t batch, int64_t features,
                                const int64_t* lengths, const T* src, T* dst) {
    for (int64_t i = first_index(); i < total; i += grid_stride())
        Body(i, steps, batch, features, lengths, src, dst);
}

// Runs Body over indices [0, total) on `stream`; total is dst's element count for the gathers and
// pools, the (T, N, F) gradient's for the scatters, which write every element of it.
template <typename T, ElementBody<T> Body>
void launch(int64_t total, int64_t steps, int64_t batch, int64_t features, const int64_t* lengths,
            const T* src, T* dst, void* stream) {
    if (total == 0) return;
    sequence_kernel<T, Body><<<blocks_for(total), kThreads, 0, cudaStream_t(stream)>>>(
        total, steps, batch, features, lengths, src, dst);
}

}  // namespace

template <typename T>
void launch_gather_last_step(int64_t steps, int64_t batch, int64_t features, const int64_t* lengths,
                             const T* y, T* out, void* stream) {
    launch<T, gather_last_step_element<T>>(batch * features, steps, batch, features, lengths, y,
                                           out, stream);
}

template <typename T>
void launch_scatter_last_step(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* dout, T* dy, void* stream) {
    launch<T, scatter_last_step_element<T>>(steps * batch * features, steps, batch, features,
                                            lengths, dout, dy, stream);
}

template <typename T>
void launch_mean_pool(int64_t steps, int64_t batch, int64_t features, const int64_t* lengths,
                      const T* y, T* out, void* stream) {
    launch<T, mean_pool_element<T>>(batch * features, steps, batch, features, lengths, y, out,
                                    stream);
}

template <typename T>
void launch_scatter_mean_pool(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* dout, T* dy, void* stream) {
    launch<T, scatter_mean_pool_element<T>>(steps * batch * features, steps, batch, features,
                                            lengths, dout, dy, stream);
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
