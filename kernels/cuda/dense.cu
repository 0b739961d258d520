// The dense layer's small device kernels: grid-stride loops around kernels/cuda/dense.hpp.

#include <cuda_runtime.h>

#include "kernels/cuda/dense.hpp"
#include "kernels/cuda/grid_stride.cuh"

namespace lstm::kernels::cuda {

namespace {

template <typename T>
__global__ void broadcast_bias_kernel(int64_t total, int64_t out_features, const T* bias, T* y) {
    for (int64_t i = grid::first_index(); i < total; i += grid::stride())
        broadcast_bias_element(i, out_features, bias, y);
}

template <typename T>
__global__ void fill_kernel(int64_t count, T value, T* v) {
    for (int64_t i = grid::first_index(); i < count; i += grid::stride()) fill_element(i, value, v);
}

}  // namespace

template <typename T>
LaunchStatus launch_broadcast_bias(int64_t rows, int64_t out_features, const T* bias, T* y,
                                   void* stream) {
    const int64_t total = rows * out_features;
    if (total == 0) return {};
    broadcast_bias_kernel<T><<<grid::blocks_for(total), grid::kThreads, 0, cudaStream_t(stream)>>>(
        total, out_features, bias, y);
    return {static_cast<int>(cudaGetLastError())};
}

template <typename T>
LaunchStatus launch_fill(int64_t count, T value, T* v, void* stream) {
    if (count == 0) return {};
    fill_kernel<T>
        <<<grid::blocks_for(count), grid::kThreads, 0, cudaStream_t(stream)>>>(count, value, v);
    return {static_cast<int>(cudaGetLastError())};
}

template LaunchStatus launch_broadcast_bias<float>(int64_t, int64_t, const float*, float*, void*);
template LaunchStatus launch_broadcast_bias<double>(int64_t, int64_t, const double*, double*,
                                                    void*);
template LaunchStatus launch_fill<float>(int64_t, float, float*, void*);
template LaunchStatus launch_fill<double>(int64_t, double, double*, void*);

}  // namespace lstm::kernels::cuda
