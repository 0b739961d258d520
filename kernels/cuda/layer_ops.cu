// lstm::Lstm's device kernels around a variant's calls: grid-stride loops over the bodies of
// kernels/common/layer_ops.hpp.

#include <cuda_runtime.h>

#include "kernels/common/layer_ops.hpp"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/layer_ops.hpp"

namespace lstm::kernels::cuda {

namespace {

template <typename T>
__global__ void dropout_kernel(int64_t count, uint64_t key, double p, T scale, const T* src,
                               T* mask, T* dst) {
    for (int64_t i = grid::first_index(); i < count; i += grid::stride())
        dropout_element(i, key, p, scale, src, mask, dst);
}

template <typename T>
__global__ void multiply_kernel(int64_t count, const T* src, const T* mask, T* dst) {
    for (int64_t i = grid::first_index(); i < count; i += grid::stride()) dst[i] = src[i] * mask[i];
}

template <typename T>
__global__ void swap_leading_kernel(int64_t a, int64_t b, int64_t c, const T* src, T* dst) {
    for (int64_t i = grid::first_index(); i < a * b * c; i += grid::stride())
        swap_leading_element(i, a, b, c, src, dst);
}

}  // namespace

template <typename T>
LaunchStatus launch_dropout_mask(int64_t count, uint64_t key, double p, T scale, const T* src,
                                 T* mask, T* dst, void* stream) {
    if (count == 0) return {};
    dropout_kernel<T><<<grid::blocks_for(count), grid::kThreads, 0, cudaStream_t(stream)>>>(
        count, key, p, scale, src, mask, dst);
    return {static_cast<int>(cudaGetLastError())};
}

template <typename T>
LaunchStatus launch_mask_multiply(int64_t count, const T* src, const T* mask, T* dst,
                                  void* stream) {
    if (count == 0) return {};
    multiply_kernel<T><<<grid::blocks_for(count), grid::kThreads, 0, cudaStream_t(stream)>>>(
        count, src, mask, dst);
    return {static_cast<int>(cudaGetLastError())};
}

template <typename T>
LaunchStatus launch_swap_leading_dims(int64_t a, int64_t b, int64_t c, const T* src, T* dst,
                                      void* stream) {
    if (a * b * c == 0) return {};
    swap_leading_kernel<T>
        <<<grid::blocks_for(a * b * c), grid::kThreads, 0, cudaStream_t(stream)>>>(a, b, c, src,
                                                                                   dst);
    return {static_cast<int>(cudaGetLastError())};
}

#define LSTM_INSTANTIATE_LAYER_OPS(T)                                                            \
    template LaunchStatus launch_dropout_mask<T>(int64_t, uint64_t, double, T, const T*, T*, T*, \
                                                 void*);                                         \
    template LaunchStatus launch_mask_multiply<T>(int64_t, const T*, const T*, T*, void*);       \
    template LaunchStatus launch_swap_leading_dims<T>(int64_t, int64_t, int64_t, const T*, T*,   \
                                                      void*);
LSTM_INSTANTIATE_LAYER_OPS(float)
LSTM_INSTANTIATE_LAYER_OPS(double)
#undef LSTM_INSTANTIATE_LAYER_OPS

}  // namespace lstm::kernels::cuda
