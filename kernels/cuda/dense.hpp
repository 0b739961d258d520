#pragma once

// Per-element bodies of the dense layer's small device kernels (dense.cu); the GEMMs themselves
// are cuBLAS calls (lstm/nn/dense_cuda.cpp). Plain host/device functions, tested on the CPU
// against nn::Dense. No CUDA header.

#include <cstdint>

#include "kernels/common/gates.hpp"  // LSTM_HOST_DEVICE
#include "kernels/cuda/launch.hpp"

namespace lstm::kernels {

// Element idx of y (M, out) row-major: y[r, j] = bias[j]. Overwrites y[idx]; the forward GEMM
// then adds x W^T onto it, as nn::Dense does on the host.
template <typename T>
LSTM_HOST_DEVICE void broadcast_bias_element(int64_t idx, int64_t out_features, const T* bias,
                                             T* y) {
    y[idx] = bias[idx % out_features];
}

// Element idx of a vector: v[idx] = value. Overwrites.
template <typename T>
LSTM_HOST_DEVICE void fill_element(int64_t idx, T value, T* v) {
    v[idx] = value;
}

namespace cuda {

// Launchers (dense.cu) in the convention of kernels/cuda/launch.hpp; device memory.
// y (rows, out_features) overwritten with bias (out_features) in every row.
template <typename T>
LaunchStatus launch_broadcast_bias(int64_t rows, int64_t out_features, const T* bias, T* y,
                                   void* stream);
// v (count) overwritten with value.
template <typename T>
LaunchStatus launch_fill(int64_t count, T value, T* v, void* stream);

}  // namespace cuda

}  // namespace lstm::kernels
