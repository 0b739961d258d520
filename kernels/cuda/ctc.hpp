#pragma once

// Launchers of the CUDA CTC kernels (kernels/cuda/ctc.cu), in the convention of
// kernels/cuda/launch.hpp. Arguments are CtcArgs (kernels/cuda/ctc_body.hpp), device pointers,
// filled by the host code in lstm/loss/ctc_cuda.cpp with the layout of kernels/cuda/ctc_layout.hpp.

#include <cstdint>

#include "kernels/cuda/ctc_body.hpp"
#include "kernels/cuda/launch.hpp"

namespace lstm::kernels::cuda {

// Overwrites a.log_norm for every valid frame: the log-softmax normalizer (logits) or the shift
// max(0, frame max) (log-probs), NaN where the frame holds NaN or +inf (ctc_norm_store). Every
// other launch reads it.
template <typename T>
LaunchStatus launch_ctc_log_norm(const CtcArgs<T>& a, void* stream);

// Overwrites a.alpha, a.beta (and a.ring when the rings do not fit in shared memory), then
// a.loglik, a.losses and a.losses_out (when given). Needs a.log_norm.
template <typename T>
LaunchStatus launch_ctc_recursions(const CtcArgs<T>& a, void* stream);

// Overwrites a.grad (max_time, batch, classes) from the tables and a.loglik.
template <typename T>
LaunchStatus launch_ctc_gradient(const CtcArgs<T>& a, void* stream);

// After cuDNN's CTC: costs (batch floats, device) into a.loglik, a.losses, a.losses_out; then,
// when a.grad is set (cuDNN's softmax - posterior), scales it per sample and zeroes it for
// infeasible samples (NaN for poisoned ones). Needs a.log_norm.
template <typename T>
LaunchStatus launch_ctc_cudnn_finish(const CtcArgs<T>& a, const float* costs, void* stream);

}  // namespace lstm::kernels::cuda
