#pragma once

// The CUDA half of lstm::loss::ctc_loss (lstm/loss/ctc.hpp), which dispatches here when the input
// is tagged Device::cuda: the backend choice (this library's kernel or cuDNN's CTC) and the device
// entry points. No CUDA header: the choice is plain host logic (tested on the CPU), and the entry
// points are defined in lstm/loss/ctc_cuda.cpp, part of the compiled lstm_cuda library (present
// when LSTM_WITH_CUDA is 1). Call lstm::loss::ctc_loss, not these.

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/cpu/ctc.hpp"
#include "lstm/cuda/link.hpp"
#include "lstm/error.hpp"
#include "lstm/loss/reduction.hpp"

namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::loss {

// Which implementation ctc_loss runs for cuda tensors (cpu tensors ignore it).
enum class CtcBackend {
    automatic,  // the library's choice: this library's kernel (see ctc_resolve_backend)
    own,        // this library's kernel: double alpha/beta, any label length, any input
    cudnn,      // cuDNN's CTC; an error where it cannot compute this call
};

inline const char* to_string(CtcBackend backend) {
    switch (backend) {
        case CtcBackend::automatic:
            return "automatic";
        case CtcBackend::own:
            return "own";
        case CtcBackend::cudnn:
            return "cudnn";
    }
    return "unknown";
}

// Why cuDNN's CTC cannot compute this validated call with ctc_loss's semantics, or "" when it
// can. Its restrictions (cuDNN 9's cudnnCTCLoss_v8; the conditions PyTorch also checks before it
// uses it) and ours:
//   - a build with cuDNN (LSTM_WITH_CUDNN), float input (it computes in float);
//   - logits, not log-probs: it applies a softmax inside and returns the gradient w.r.t. its
//     input, softmax - posterior, which is our grad_logits (for log-probs ours is -posterior);
//   - blank 0; at most 256 classes, so every label is below 256;
//   - every target length in 1..255 (cuDNN's label-length limit), and every input length equal
//     to T (PyTorch reports invalid memory accesses in cuDNN with shorter inputs);
//   - every sample feasible (target length + adjacent repeats <= T), so that cuDNN's handling of
//     impossible samples never decides a result;
//   - a batch of at least one sample.
// Host-only logic (no device needed).
template <typename T>
std::string ctc_cudnn_unsupported(const kernels::cpu::CtcProblem<T>& p,
                                  bool built_with_cudnn = LSTM_WITH_CUDNN != 0) {
    std::ostringstream why;
    if (!built_with_cudnn) return "this build has no cuDNN (LSTM_WITH_CUDNN=0)";
    if (!std::is_same_v<T, float>) return "cuDNN's CTC computes in float, the input is float64";
    if (!p.logits)
        return "cuDNN's CTC takes logits (it applies the softmax itself), the input is log_probs";
    if (p.blank != 0) {
        why << "cuDNN's CTC needs blank = 0, got blank = " << p.blank;
        return why.str();
    }
    constexpr int64_t kMaxClasses = 256, kMaxLabels = 255;
    if (p.classes > kMaxClasses) {
        why << "cuDNN's CTC is used for labels below 256 only, C = " << p.classes;
        return why.str();
    }
    if (p.batch == 0) return "the batch is empty";
    // The probabilities and gradients are described with int sizes and strides, the outer one
    // N * C: bounding the element count T * N * C by INT32_MAX keeps every stride and every
    // element's offset within an int.
    constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();
    int64_t elements = 0;
    if (__builtin_mul_overflow(p.max_time, p.batch, &elements) ||
        __builtin_mul_overflow(elements, p.classes, &elements) || elements > kMaxElements) {
        why << "cuDNN's CTC describes (T, N, C) with 32-bit sizes, T * N * C = " << p.max_time
            << " * " << p.batch << " * " << p.classes << " exceeds " << kMaxElements;
        return why.str();
    }
    int64_t start = 0;
    for (int64_t n = 0; n < p.batch; ++n) {
        const int64_t frames = p.input_lengths[n], count = p.target_lengths[n];
        if (frames != p.max_time) {
            why << "cuDNN's CTC is used only when every input length equals T = " << p.max_time
                << ", input_lengths[" << n << "] = " << frames;
            return why.str();
        }
        if (count < 1 || count > kMaxLabels) {
            why << "cuDNN's CTC takes target lengths 1.." << kMaxLabels << ", target_lengths[" << n
                << "] = " << count;
            return why.str();
        }
        const int64_t* labels = p.targets + (p.target_stride > 0 ? n * p.target_stride : start);
        int64_t repeats = 0;
        for (int64_t k = 1; k < count; ++k) repeats += labels[k] == labels[k - 1] ? 1 : 0;
        if (count + repeats > frames) {
            why << "sample " << n << " is infeasible (" << count << " labels with " << repeats
                << " adjacent repeats need more than " << frames << " frames)";
            return why.str();
        }
        start += count;
    }
    return "";
}

// The backend a validated cuda call runs: `requested`, with automatic resolved; throws
// lstm::Error naming the reason when cudnn is requested and cannot compute the call.
// automatic is the own kernel even where cuDNN applies: on an H200 with cuDNN 9.19, on Braun's
// CTC shape with equal lengths (T 1000, N 32, C 59, 100 labels), cuDNN's gradient was up to
// 2.0e-3 of the largest element away from the own kernel's, which is within 2e-6 of the double
// CPU oracle, and the own kernel was not slower (docs/ctc.md, "cuDNN's CTC, on request").
template <typename T>
CtcBackend ctc_resolve_backend(const kernels::cpu::CtcProblem<T>& p, CtcBackend requested,
                               bool built_with_cudnn = LSTM_WITH_CUDNN != 0) {
    if (requested != CtcBackend::cudnn) return CtcBackend::own;
    const std::string why = ctc_cudnn_unsupported(p, built_with_cudnn);
    check(why.empty(), "ctc_loss: backend cudnn cannot compute this call: ", why,
          " (use CtcBackend::own or automatic)");
    return CtcBackend::cudnn;
}

}  // namespace lstm::loss

namespace lstm::cuda {

// Runs a validated ctc_loss call whose input, gradient and losses are device memory (the problem's
// targets and lengths are host memory) on the context's stream with `backend` (already resolved:
// own or cudnn), and waits for it. Overwrites problem.grad and losses (batch, device, optional) as
// ctc_loss specifies and returns the reduced loss: sum, or PyTorch's mean when `reduction` is
// mean (NaN for an empty batch). Per-call scratch lives in plans of the context that only grow,
// so steady-state calls allocate no device memory.
LSTM_CUDA_ENTRY float ctc_loss(Context& context, const kernels::cpu::CtcProblem<float>& problem,
                               loss::Reduction reduction, loss::CtcBackend backend, float* losses);
LSTM_CUDA_ENTRY double ctc_loss(Context& context, const kernels::cpu::CtcProblem<double>& problem,
                                loss::Reduction reduction, loss::CtcBackend backend,
                                double* losses);

}  // namespace lstm::cuda
