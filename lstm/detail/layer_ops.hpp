#pragma once

// The element-wise work lstm::Lstm does around a variant's calls, on whichever device the layer
// lives: inter-layer dropout and the batch-first <-> time-major transposes. Host memory runs the
// bodies of kernels/common/layer_ops.hpp in loops; device memory runs them as CUDA kernels
// (lstm/cuda/layer_ops.hpp) queued on the layer's context.

#include <cstdint>

#include "kernels/common/layer_ops.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/layer_ops.hpp"
#endif

// The signatures below name the context in every build, so that callers need no #if of their
// own; without CUDA it is never defined and the pointer is never used.
namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::detail {

// Host loops only pay for an OpenMP team above this many elements.
constexpr int64_t kLayerOpsParallelMin = 1 << 15;

[[noreturn]] inline void no_cuda_layer_ops() {
    fail_as<Unsupported>("Lstm on device cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
}

// mask, dst (count) in `device` memory, overwritten: inverted dropout of src with drop
// probability p, the mask drawn from (key, element index) (see kernels::dropout_keeps).
template <typename T>
void dropout(Device device, cuda::Context* context, int64_t count, uint64_t key, double p,
             const T* src, T* mask, T* dst) {
    // p = 1 drops everything, and PyTorch gives zeros there rather than 0 * inf.
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    if (device == Device::cuda) {
#if LSTM_WITH_CUDA
        return cuda::dropout<T>(*context, count, key, p, scale, src, mask, dst);
#else
        (void)context;
        no_cuda_layer_ops();
#endif
    }
#pragma omp parallel for if (count > kLayerOpsParallelMin)
    for (int64_t i = 0; i < count; ++i) kernels::dropout_element(i, key, p, scale, src, mask, dst);
}

// dst (count) = src * mask in `device` memory, overwritten; dst may alias src.
template <typename T>
void multiply(Device device, cuda::Context* context, int64_t count, const T* src, const T* mask,
              T* dst) {
    if (device == Device::cuda) {
#if LSTM_WITH_CUDA
        return cuda::multiply<T>(*context, count, src, mask, dst);
#else
        (void)context;
        no_cuda_layer_ops();
#endif
    }
#pragma omp parallel for if (count > kLayerOpsParallelMin)
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i] * mask[i];
}

// dst (b, a, c) <- src (a, b, c) in `device` memory, overwritten.
template <typename T>
void swap_leading_dims(Device device, cuda::Context* context, int64_t a, int64_t b, int64_t c,
                       const T* src, T* dst) {
    if (device == Device::cuda) {
#if LSTM_WITH_CUDA
        return cuda::swap_leading_dims<T>(*context, a, b, c, src, dst);
#else
        (void)context;
        no_cuda_layer_ops();
#endif
    }
    const int64_t count = a * b * c;
#pragma omp parallel for if (count > kLayerOpsParallelMin)
    for (int64_t i = 0; i < count; ++i) kernels::swap_leading_element(i, a, b, c, src, dst);
}

}  // namespace lstm::detail
