#pragma once

// The optimizers' device steps: the kernels of kernels/cuda/optim.cu queued on a context's stream
// with their launch checked. Defined in optim_cuda.cpp (lstm_cuda only, LSTM_WITH_CUDA builds).

#include <cstdint>

#include "kernels/cuda/optim.hpp"
#include "lstm/cuda/link.hpp"

namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::nn::detail {

// One SGD update of n device elements on the context's stream (not waited for): p updated in
// place from g; buf (the momentum buffer, device, n) read and written when c.use_momentum.
template <typename T>
LSTM_CUDA_ENTRY void sgd_step_cuda(cuda::Context& context, int64_t n, T* p, const T* g, T* buf,
                                   const kernels::SgdCoefficients<T>& c);

// One Adam update of n device elements on the context's stream (not waited for): p, m, v updated
// in place from g.
template <typename T>
LSTM_CUDA_ENTRY void adam_step_cuda(cuda::Context& context, int64_t n, T* p, const T* g, T* m, T* v,
                                    const kernels::AdamCoefficients<T>& c);

}  // namespace lstm::nn::detail
