// Host side of the CUDA CTC loss: prepares the per-sample facts and label order on the host
// (kernels/cuda/ctc_layout.hpp), uploads them into a scratch plan of the context, runs this
// library's kernels (kernels/cuda/ctc.cu) or cuDNN's CTC, and reduces the per-sample losses on
// the host in batch order, exactly as the CPU path does.

#include "lstm/loss/ctc_cuda.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/ctc.hpp"
#include "kernels/cuda/ctc_layout.hpp"
#include "lstm/buffer.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/cudnn_descriptor.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

namespace {

namespace kc = kernels::cuda;

// Per-context scratch of the CTC loss: device tables and a host staging mirror of the upload
// part. Both only grow, so steady-state calls allocate nothing.
#if LSTM_WITH_CUDNN
struct CudnnCtcPlan;
#endif

using CudnnCtcShape = std::array<int64_t, 5>;  // T, N, C, longest label, gradient or not

struct CtcPlan : Scratch {
    Buffer device{Device::cuda};
    std::vector<unsigned char> staging;  // host: the upload part, then the downloaded losses
#if LSTM_WITH_CUDNN
    // cuDNN's plan per shape, built on first use, and the one of the last call.
    std::vector<std::pair<CudnnCtcShape, std::unique_ptr<CudnnCtcPlan>>> cudnn_plans;
    CudnnCtcPlan* cudnn = nullptr;
    CudnnCtcShape cudnn_shape = {-1, -1, -1, -1, -1};
#endif
};

#if LSTM_WITH_CUDNN
// cuDNN's descriptors and workspace for one shape (T, N, C, longest label, with or without the
// gradient), built on first use.
struct CudnnCtcPlan {
    detail::TensorDescriptor probs;
    detail::TensorDescriptor grads;
    detail::CtcLossDescriptor ctc;
    size_t workspace_bytes = 0;
    Buffer workspace{Device::cuda};

    CudnnCtcPlan(cudnnHandle_t handle, int64_t max_time, int64_t batch, int64_t classes,
                 int64_t max_labels, bool with_grad) {
        // ctc_cudnn_unsupported bounds T * N * C by INT32_MAX: every size and stride fits an int.
        const int dims[3] = {static_cast<int>(max_time), static_cast<int>(batch),
                             static_cast<int>(classes)};
        const int strides[3] = {static_cast<int>(batch * classes), static_cast<int>(classes), 1};
        LSTM_CUDNN_CHECK(
            cudnnSetTensorNdDescriptor(probs.desc, CUDNN_DATA_FLOAT, 3, dims, strides));
        LSTM_CUDNN_CHECK(
            cudnnSetTensorNdDescriptor(grads.desc, CUDNN_DATA_FLOAT, 3, dims, strides));
        // Softmax inside (our input is logits); infeasible samples get a zero gradient.
        LSTM_CUDNN_CHECK(cudnnSetCTCLossDescriptor_v9(
            ctc.desc, CUDNN_DATA_FLOAT, CUDNN_LOSS_NORMALIZATION_SOFTMAX,
            CUDNN_CTC_ZERO_OOB_GRADIENTS, static_cast<int>(max_labels)));
        LSTM_CUDNN_CHECK(cudnnGetCTCLossWorkspaceSize_v8(
            handle, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, ctc.desc, probs.desc,
            with_grad ? grads.desc : nullptr, &workspace_bytes));
        workspace.reserve(std::max<size_t>(workspace_bytes, 1));
    }
};
#endif

template <typename T>
T run(Context& context, const kernels::cpu::CtcProblem<T>& p, loss::Reduction reduction,
      loss::CtcBackend backend, T* losses_out) {
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    check(p.classes <= kInt32Max && p.max_time <= kInt32Max, "ctc_loss: T = ", p.max_time,
          " frames and C = ", p.classes, " classes must stay below 2^31 for the cuda kernels");
    check(p.max_time * p.batch <= kInt32Max, "ctc_loss: T * N = ", p.max_time * p.batch,
          " frames exceed the cuda kernels' grid (2^31 - 1 blocks)");
    // Each sample's labels and its 2L + 1 states are counted in int32 (CtcSample): the longest
    // target must keep 2L + 1 within it.
    constexpr int64_t kMaxLabels = (kInt32Max - 1) / 2;
    check(p.max_labels <= kMaxLabels, "ctc_loss: the longest target has ", p.max_labels,
          " labels, more than the cuda kernels count (", kMaxLabels, ": 2L + 1 states in int32)");
    check(backend != loss::CtcBackend::automatic, "ctc_loss: the backend must be resolved");
    if (p.batch == 0)
        return reduction == loss::Reduction::mean ? std::numeric_limits<T>::quiet_NaN() : T(0);

    Context::Impl& impl = context.impl();
    const detail::DeviceGuard on_device(impl.device);
    auto& plan = impl.scratch<CtcPlan>(ScratchSlot::ctc);
    const kc::CtcSizes sizes = kc::ctc_sizes(p.batch, p.input_lengths, p.target_lengths);
    const kc::CtcLayout layout = kc::ctc_layout(p.max_time, p.batch, sizes);
    const size_t download = static_cast<size_t>(p.batch) * sizeof(double);
    plan.device.reserve(layout.bytes);
    // The staging buffer holds the upload part and, after it, the downloaded losses; doubles for
    // alignment (CtcSample holds int64 and double fields).
    const size_t losses_at =
        (layout.upload_bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    if (plan.staging.size() < losses_at + download) plan.staging.resize(losses_at + download);
    unsigned char* host = plan.staging.data();
    check(reinterpret_cast<std::uintptr_t>(host) % alignof(kc::CtcSample) == 0,
          "ctc_loss: host staging is misaligned");

    kc::CtcHostInputs in;
    in.batch = p.batch;
    in.targets = p.targets;
    in.target_stride = p.target_stride;
    in.input_lengths = p.input_lengths;
    in.target_lengths = p.target_lengths;
    in.grad_scale = p.grad_scale;
    in.divide_by_target_length = p.divide_by_target_length;
    kc::ctc_fill_upload(in, layout, host);

    auto* base = static_cast<unsigned char*>(plan.device.data());
    LSTM_CUDA_CHECK(
        cudaMemcpyAsync(base, host, layout.upload_bytes, cudaMemcpyHostToDevice, impl.stream));
    kc::CtcArgs<T> a;
    a.max_time = p.max_time;
    a.batch = p.batch;
    a.classes = p.classes;
    a.input = p.input;
    a.logits = p.logits;
    a.blank = p.blank;
    a.zero_infinity = p.zero_infinity;
    a.samples = reinterpret_cast<const kc::CtcSample*>(base + layout.samples);
    a.labels = reinterpret_cast<const int32_t*>(base + layout.labels);
    a.order = reinterpret_cast<const int32_t*>(base + layout.order);
    a.log_norm = reinterpret_cast<double*>(base + layout.log_norm);
    a.alpha = reinterpret_cast<double*>(base + layout.alpha);
    a.beta = reinterpret_cast<double*>(base + layout.beta);
    a.ring = reinterpret_cast<double*>(base + layout.ring);
    a.max_states = sizes.max_states;
    a.loglik = reinterpret_cast<double*>(base + layout.loglik);
    a.losses = reinterpret_cast<double*>(base + layout.losses);
    a.losses_out = losses_out;
    a.grad = p.grad;

    if (backend == loss::CtcBackend::own) {
        LSTM_CUDA_CHECK_LAUNCH(kc::launch_ctc_log_norm(a, impl.stream));
        LSTM_CUDA_CHECK_LAUNCH(kc::launch_ctc_recursions(a, impl.stream));
        LSTM_CUDA_CHECK_LAUNCH(kc::launch_ctc_gradient(a, impl.stream));
    } else {
#if LSTM_WITH_CUDNN
        if constexpr (std::is_same_v<T, float>) {
            const int64_t max_labels = sizes.max_states / 2;
            const CudnnCtcShape shape = {p.max_time, p.batch, p.classes, max_labels,
                                         p.grad != nullptr ? 1 : 0};
            if (shape != plan.cudnn_shape) {
                plan.cudnn = nullptr;
                for (const auto& [known, built] : plan.cudnn_plans)
                    if (known == shape) plan.cudnn = built.get();
                if (plan.cudnn == nullptr) {
                    plan.cudnn_plans.emplace_back(
                        shape,
                        std::make_unique<CudnnCtcPlan>(impl.cudnn, p.max_time, p.batch, p.classes,
                                                       max_labels, p.grad != nullptr));
                    plan.cudnn = plan.cudnn_plans.back().second.get();
                }
                plan.cudnn_shape = shape;
            }
            const CudnnCtcPlan& cudnn = *plan.cudnn;
            // cuDNN's costs cannot tell NaN input from an infeasible sample; the normalizer
            // kernel's check can.
            LSTM_CUDA_CHECK_LAUNCH(kc::launch_ctc_log_norm(a, impl.stream));
            const auto* lengths32 = reinterpret_cast<const int*>(base + layout.lengths32);
            auto* costs = reinterpret_cast<float*>(base + layout.costs);
            LSTM_CUDNN_CHECK(cudnnCTCLoss_v8(
                impl.cudnn, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, cudnn.ctc.desc, cudnn.probs.desc,
                p.input, reinterpret_cast<const int*>(a.labels), lengths32, lengths32 + p.batch,
                costs, cudnn.grads.desc, p.grad, cudnn.workspace_bytes, cudnn.workspace.data()));
            LSTM_CUDA_CHECK_LAUNCH(kc::launch_ctc_cudnn_finish(a, costs, impl.stream));
        } else {
            fail_as<Unsupported>("ctc_loss: backend cudnn needs float input");
        }
#else
        fail_as<Unsupported>(
            "ctc_loss: backend cudnn: this build has no cuDNN (LSTM_WITH_CUDNN=0)");
#endif
    }

    auto* losses = reinterpret_cast<double*>(host + losses_at);
    LSTM_CUDA_CHECK(
        cudaMemcpyAsync(losses, a.losses, download, cudaMemcpyDeviceToHost, impl.stream));
    LSTM_CUDA_CHECK(cudaStreamSynchronize(impl.stream));
    // The CPU path's reduction, term by term in batch order.
    double total = 0;
    for (int64_t n = 0; n < p.batch; ++n)
        total += reduction == loss::Reduction::mean
                     ? losses[n] / static_cast<double>(std::max<int64_t>(p.target_lengths[n], 1))
                     : losses[n];
    if (reduction == loss::Reduction::mean) total /= static_cast<double>(p.batch);
    return static_cast<T>(total);
}

}  // namespace

float ctc_loss(Context& context, const kernels::cpu::CtcProblem<float>& problem,
               loss::Reduction reduction, loss::CtcBackend backend, float* losses) {
    return run(context, problem, reduction, backend, losses);
}

double ctc_loss(Context& context, const kernels::cpu::CtcProblem<double>& problem,
                loss::Reduction reduction, loss::CtcBackend backend, double* losses) {
    return run(context, problem, reduction, backend, losses);
}

}  // namespace lstm::cuda
