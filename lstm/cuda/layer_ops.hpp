#pragma once

// lstm::Lstm's element-wise work on CUDA device memory (dropout, time-major <-> batch-first),
// the device half of lstm/detail/layer_ops.hpp. Defined in layer_ops.cpp (lstm_cuda only); the
// kernels run the bodies of kernels/common/layer_ops.hpp. Queued on the context's stream, not
// waited for. No CUDA header.

#include <cstdint>

#include "lstm/cuda/link.hpp"
namespace lstm::cuda {

class Context;  // lstm/cuda/context.hpp

// mask, dst (count) overwritten: mask[k] = scale or 0 from (key, k, p), dst = src * mask.
template <typename T>
LSTM_CUDA_ENTRY void dropout(Context& context, int64_t count, uint64_t key, double p, T scale,
                             const T* src, T* mask, T* dst);
// dst (count) = src * mask, overwritten; dst may alias src.
template <typename T>
LSTM_CUDA_ENTRY void multiply(Context& context, int64_t count, const T* src, const T* mask, T* dst);
// dst (b, a, c) <- src (a, b, c), overwritten.
template <typename T>
LSTM_CUDA_ENTRY void swap_leading_dims(Context& context, int64_t a, int64_t b, int64_t c,
                                       const T* src, T* dst);

}  // namespace lstm::cuda
