#pragma once

// Launchers of the CUDA CTC kernels (kernels/cuda/ctc.cu). For lstm_cuda's sources: includes the
// CUDA runtime API for cudaStream_t. Every launcher queues work on `stream` and returns at once
// with cudaGetLastError() (launch errors), which the caller turns into lstm::Error; kernels never
// throw or print. Arguments are CtcArgs (kernels/cuda/ctc_body.hpp), device pointers, filled by
// the host code in lstm/loss/ctc_cuda.cpp with the layout of kernels/cuda/ctc_layout.hpp.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/ctc_body.hpp"

namespace lstm::kernels::cuda {

// Overwrites a.log_norm for every valid frame: the log-softmax normalizer (logits) or the shift
// max(0, frame max) (log-probs), NaN where the frame holds NaN or +inf (ctc_norm_store). Every
// other launch reads it.
template <typename T>
cudaError_t launch_ctc_log_norm(const CtcArgs<T>& a, cudaStream_t stream);

// Overwrites a.alpha, a.beta (and a.ring when the rings do not fit in shared memory), then
// a.loglik, a.losses and a.losses_out (when given). Needs a.log_norm.
template <typename T>
cudaError_t launch_ctc_recursions(const CtcArgs<T>& a, cudaStream_t stream);

// Overwrites a.grad (max_time, batch, classes) from the tables and a.loglik.
template <typename T>
cudaError_t launch_ctc_gradient(const CtcArgs<T>& a, cudaStream_t stream);

// After cuDNN's CTC: costs (batch floats, device) into a.loglik, a.losses, a.losses_out; then,
// when a.grad is set (cuDNN's softmax - posterior), scales it per sample and zeroes it for
// infeasible samples (NaN for poisoned ones). Needs a.log_norm.
template <typename T>
cudaError_t launch_ctc_cudnn_finish(const CtcArgs<T>& a, const float* costs, cudaStream_t stream);

}  // namespace lstm::kernels::cuda
