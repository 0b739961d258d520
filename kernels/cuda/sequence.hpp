#pragma once

// Per-element bodies of the sequence heads' device kernels (sequence.cu): the last valid step of
// each sequence (Braun's classifiers), the mean over the valid steps (Bahrampour's sentiment
// model), and their adjoints. Plain host/device functions, so the CPU tests run them over the
// same index space and compare with lstm/nn/sequence.hpp. No CUDA header.
//
// Layout everywhere: y / dy (T, N, F) time-major row-major, out / dout (N, F) row-major; lengths
// (N) in 1..T, or null for all T. Every pointer is in the kernel's memory space.

#include <cstdint>

#include "kernels/common/gates.hpp"  // LSTM_HOST_DEVICE
#include "kernels/cuda/launch.hpp"

namespace lstm::kernels {

LSTM_HOST_DEVICE int64_t sequence_length(const int64_t* lengths, int64_t n, int64_t steps) {
    return lengths != nullptr ? lengths[n] : steps;
}

// Element idx of out (N, F): out[n, f] = y[len_n - 1, n, f]. Overwrites out[idx].
template <typename T>
LSTM_HOST_DEVICE void gather_last_step_element(int64_t idx, int64_t steps, int64_t batch,
                                               int64_t features, const int64_t* lengths, const T* y,
                                               T* out) {
    const int64_t n = idx / features, f = idx - n * features;
    const int64_t t = sequence_length(lengths, n, steps) - 1;
    out[idx] = y[(t * batch + n) * features + f];
}

// Element idx of dy (T, N, F): dout[n, f] at t = len_n - 1, zero elsewhere. Overwrites dy[idx].
template <typename T>
LSTM_HOST_DEVICE void scatter_last_step_element(int64_t idx, int64_t steps, int64_t batch,
                                                int64_t features, const int64_t* lengths,
                                                const T* dout, T* dy) {
    const int64_t row = idx / features, f = idx - row * features;
    const int64_t t = row / batch, n = row - t * batch;
    const bool last = t == sequence_length(lengths, n, steps) - 1;
    dy[idx] = last ? dout[n * features + f] : T(0);
}

// Element idx of out (N, F): the mean of y[t, n, f] over t < len_n, summed in T in step order and
// then scaled by 1 / len_n rounded to T, exactly as nn::mean_pool_steps does, so both give the
// same bits. Overwrites out[idx].
template <typename T>
LSTM_HOST_DEVICE void mean_pool_element(int64_t idx, int64_t steps, int64_t batch, int64_t features,
                                        const int64_t* lengths, const T* y, T* out) {
    const int64_t n = idx / features, f = idx - n * features;
    const int64_t len = sequence_length(lengths, n, steps);
    const T scale = static_cast<T>(1.0 / static_cast<double>(len));
    T sum = T(0);
    for (int64_t t = 0; t < len; ++t) sum += y[(t * batch + n) * features + f];
    out[idx] = sum * scale;
}

// Element idx of dy (T, N, F): dout[n, f] / len_n for t < len_n, zero at padded steps (the scale
// rounded to T once, like nn::scatter_mean_pool). Overwrites dy[idx].
template <typename T>
LSTM_HOST_DEVICE void scatter_mean_pool_element(int64_t idx, int64_t steps, int64_t batch,
                                                int64_t features, const int64_t* lengths,
                                                const T* dout, T* dy) {
    const int64_t row = idx / features, f = idx - row * features;
    const int64_t t = row / batch, n = row - t * batch;
    const int64_t len = sequence_length(lengths, n, steps);
    const T scale = static_cast<T>(1.0 / static_cast<double>(len));
    dy[idx] = t < len ? dout[n * features + f] * scale : T(0);
}

namespace cuda {

// Launchers (sequence.cu) in the convention of kernels/cuda/launch.hpp, one thread per element
// written; arguments as in the bodies above (device memory).
template <typename T>
LaunchStatus launch_gather_last_step(int64_t steps, int64_t batch, int64_t features,
                                     const int64_t* lengths, const T* y, T* out, void* stream);
template <typename T>
LaunchStatus launch_scatter_last_step(int64_t steps, int64_t batch, int64_t features,
                                      const int64_t* lengths, const T* dout, T* dy, void* stream);
template <typename T>
LaunchStatus launch_mean_pool(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* y, T* out, void* stream);
template <typename T>
LaunchStatus launch_scatter_mean_pool(int64_t steps, int64_t batch, int64_t features,
                                      const int64_t* lengths, const T* dout, T* dy, void* stream);

}  // namespace cuda

}  // namespace lstm::kernels
