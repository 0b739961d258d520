#pragma once

// The sequence heads on CUDA device memory: last-step gather / scatter and mean pooling with
// their adjoints, the device counterparts of lstm/nn/sequence.hpp (same results: the kernels run
// the bodies of kernels/cuda/sequence.hpp). Defined in sequence_cuda.cpp (lstm_cuda only); the
// caller validates lengths on the host (nn::detail::check_sequence_lengths) and passes them as a
// device copy.

#include <cstdint>

#include "lstm/cuda/link.hpp"
namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::nn::detail {

// Shapes: y / dy (steps, batch, features) time-major, out / dout (batch, features); lengths
// (batch) in 1..steps, or null for all steps; all device memory, row-major. Queued on the
// context's stream, not waited for.

// out[n, :] = y[len_n - 1, n, :]; out overwritten.
template <typename T>
LSTM_CUDA_ENTRY void gather_last_step_cuda(cuda::Context& context, int64_t steps, int64_t batch,
                                           int64_t features, const int64_t* lengths, const T* y,
                                           T* out);
// dy[len_n - 1, n, :] = dout[n, :], every other element of dy zero; dy overwritten.
template <typename T>
LSTM_CUDA_ENTRY void scatter_last_step_cuda(cuda::Context& context, int64_t steps, int64_t batch,
                                            int64_t features, const int64_t* lengths, const T* dout,
                                            T* dy);
// out[n, :] = mean of y[t, n, :] over t < len_n; out overwritten.
template <typename T>
LSTM_CUDA_ENTRY void mean_pool_steps_cuda(cuda::Context& context, int64_t steps, int64_t batch,
                                          int64_t features, const int64_t* lengths, const T* y,
                                          T* out);
// dy[t, n, :] = dout[n, :] / len_n for t < len_n, zero after; dy overwritten.
template <typename T>
LSTM_CUDA_ENTRY void scatter_mean_pool_cuda(cuda::Context& context, int64_t steps, int64_t batch,
                                            int64_t features, const int64_t* lengths, const T* dout,
                                            T* dy);

}  // namespace lstm::nn::detail
