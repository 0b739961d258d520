#pragma once

// Connectionist temporal classification (CTC) loss on the CPU with PyTorch's semantics
// (torch.nn.functional.ctc_loss), its gradient, and the workspace query. docs/ctc.md has the full
// mapping to PyTorch and warp-ctc, and the accuracy and speed measurements.
//
// Input: either unnormalized logits (a softmax over classes is applied inside, as warp-ctc does)
// or log-probabilities (as PyTorch's log_probs), time-major (T, N, C), float or double, on the
// host (or on a CUDA device with CtcArgs::context: lstm/loss/ctc_cuda.hpp, docs/ctc.md "On the
// GPU"). The gradient comes back with respect to whichever was given, under the matching name:
//
//   grad_logits    = d loss / d logits    = scale_n * (softmax(logits) - posterior)
//   grad_log_probs = d loss / d log_probs = scale_n * (-posterior)
//
// where posterior[t, n, c] is the probability that an alignment of sample n emits class c at
// frame t, given the labels (it sums to 1 over c on every valid frame), and scale_n is the
// derivative of the returned loss w.r.t. sample n's loss (see CtcArgs::reduction).
//
// PyTorch correspondence: PyTorch's ctc_loss backward returns exp(log_probs) - posterior as the
// gradient w.r.t. log_probs, which is not the derivative of the loss w.r.t. log_probs; it equals
// our grad_logits when log_probs = log_softmax(logits), and after log_softmax's backward both
// conventions give the same logits gradient. Our grad_log_probs is the true partial derivative,
// which is what a caller who feeds log-probs from elsewhere (or checks by finite differences)
// needs. Feeding logits here equals PyTorch's ctc_loss(log_softmax(logits), ...) with the
// gradient taken w.r.t. logits.
//
// Every loss and gradient is computed in double internally (log-space alpha/beta), so float
// results carry only the final rounding, even at T in the thousands.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/ctc.hpp"
#include "lstm/error.hpp"
#include "lstm/loss/ctc_cuda.hpp"
#include "lstm/loss/reduction.hpp"
#include "lstm/memory.hpp"
#include "lstm/tensor.hpp"

namespace lstm::loss {

// What ctc_loss reads. Exactly one of logits and log_probs is given (the other stays empty).
// The input and the outputs are host memory, or all device memory (Device::cuda, with `context`);
// targets and lengths are always host memory.
template <typename T>
struct CtcArgs {
    // (T, N, C) time-major, contiguous: unnormalized scores, softmax over C applied inside.
    // -inf is allowed (that class then has probability 0). A sample with NaN or +inf on a valid
    // frame, or a frame of all -inf, gets loss NaN and a NaN gradient on its valid frames
    // (PyTorch's behaviour; zero_infinity does not hide it).
    TensorView<const T> logits;
    // (T, N, C) time-major, contiguous: log-probabilities, used as given (-inf allowed; NaN and
    // +inf as for logits, in any class: PyTorch's loss reads only the classes a sample uses, so
    // there a NaN in another class leaves the loss finite and only its gradient entry NaN).
    TensorView<const T> log_probs;
    // Labels, int64: padded (N, S), row n holding sample n's labels in its first
    // target_lengths[n] entries (the rest is never read); or concatenated 1-D
    // (sum of target_lengths), sample after sample. Labels are in [0, C) and differ from blank.
    TensorView<const int64_t> targets;
    Span<const int64_t> input_lengths;   // (N), each in 1..T; frames t >= input_lengths[n] unused
    Span<const int64_t> target_lengths;  // (N), each >= 0 (and <= S when padded)
    int64_t blank = 0;                   // the blank class, in [0, C)
    // none: the returned value is the sum of the per-sample losses (the per-sample losses are in
    //       CtcOutputs::losses), and the gradient is that of the sum: scale_n = 1.
    // sum:  the sum of the per-sample losses, scale_n = 1.
    // mean: PyTorch's mean: the average over the batch of loss_n / max(target_lengths[n], 1),
    //       scale_n = 1 / (N * max(target_lengths[n], 1)); NaN for N = 0.
    Reduction reduction = Reduction::mean;
    // An infeasible sample (no alignment has nonzero probability, e.g. T < L + repeats) has loss
    // +inf and zero gradient; with zero_infinity its loss is 0 instead (gradient still 0).
    bool zero_infinity = false;
    // For cuda tensors: the context whose stream the call is queued on (required; the call waits
    // for it, since the reduced loss comes back to the host). Ignored for cpu tensors.
    cuda::Context* context = nullptr;
    // For cuda tensors: which implementation runs (lstm/loss/ctc_cuda.hpp). Ignored on the cpu.
    CtcBackend backend = CtcBackend::automatic;
};

// What ctc_loss writes; every output is optional (an empty view is not computed) and, when
// given, overwritten.
template <typename T>
struct CtcOutputs {
    TensorView<T> grad_logits;     // (T, N, C): only together with CtcArgs::logits
    TensorView<T> grad_log_probs;  // (T, N, C): only together with CtcArgs::log_probs
    // (N): each sample's unreduced loss (+inf or 0 if infeasible, NaN if its input is NaN/+inf)
    TensorView<T> losses;
};

// Bytes of workspace for any call with T <= max_time, N <= batch, C <= classes and every target
// length <= max_target_length, running up to `threads` samples at once (0: omp_get_max_threads()).
// A workspace sized for fewer threads than are available still works, with fewer threads.
inline size_t ctc_workspace_bytes(int64_t max_time, int64_t batch, int64_t classes,
                                  int64_t max_target_length, int threads = 0) {
    check(max_time >= 0 && batch >= 0 && classes >= 0 && max_target_length >= 0,
          "ctc_workspace_bytes: sizes must be >= 0, got max_time = ", max_time, ", batch = ", batch,
          ", classes = ", classes, ", max_target_length = ", max_target_length);
#ifdef _OPENMP
    if (threads <= 0) threads = omp_get_max_threads();
#endif
    threads = std::max(threads, 1);
    // A bound on the products the kernel's carving computes (per slot, alpha and the emissions
    // take T rows of about 3 L doubles plus slack, beta a few rows more; classes a few rows), so
    // that none of them can overflow.
    const uint64_t bound =
        MemoryRequest::bytes({max_time + 4, max_target_length + 64, 4, threads}, sizeof(double));
    const uint64_t class_bound = MemoryRequest::bytes({classes + 64, 8, threads}, sizeof(double));
    if (bound == kUnknownMemory || class_bound == kUnknownMemory ||
        MemoryRequest::bytes({batch, 8}, sizeof(double)) == kUnknownMemory)
        fail_as<OutOfMemory>("ctc_workspace_bytes: max_time = ", max_time, ", batch = ", batch,
                             ", classes = ", classes, ", max_target_length = ", max_target_length,
                             ": the workspace's size does not fit in 64 bits");
    return kernels::cpu::ctc_workspace_bytes(max_time, batch, classes, max_target_length, threads);
}

namespace ctc_detail {

// Sizes of a validated call.
struct CtcDims {
    int64_t max_time = 0, batch = 0, classes = 0, max_target_length = 0;
    int64_t target_stride = 0;  // S when padded, 0 when concatenated
};

// Outputs live on the input's device.
template <typename V>
void check_device(const V& view, const char* name, Device device, const char* input_name) {
    check(view.empty() || view.device() == device, "ctc_loss: ", name, " is on ",
          to_string(view.device()), ", but ", input_name, " is on ", to_string(device),
          "; outputs must be on the input's device");
}

// Checks everything ctc_loss reads and writes; throws lstm::Error naming the argument.
template <typename T>
CtcDims validate(const CtcArgs<T>& args, const CtcOutputs<T>& out) {
    check(args.logits.empty() != args.log_probs.empty(),
          args.logits.empty()
              ? "ctc_loss: give either logits or log_probs, got neither (a view with a null data "
                "pointer counts as not given, also for zero elements)"
              : "ctc_loss: give either logits or log_probs, got both");
    const bool logits = !args.logits.empty();
    const TensorView<const T>& input = logits ? args.logits : args.log_probs;
    const char* input_name = logits ? "logits" : "log_probs";
    check(input.rank() == 3, "ctc_loss: ", input_name, " must have rank 3 (T, N, C), got shape ",
          input.shape_string());
    const Device device = input.device();
    if (device == Device::cuda) {
#if LSTM_WITH_CUDA
        check(args.context != nullptr, "ctc_loss: ", input_name,
              " is on cuda, so args.context (a lstm::cuda::Context) must be given");
#else
        fail_as<Unsupported>("ctc_loss: ", input_name,
                             " is on cuda, but this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
    }
    CtcDims d;
    d.max_time = input.size(0);
    d.batch = input.size(1);
    d.classes = input.size(2);
    check(d.classes >= 1, "ctc_loss: ", input_name, " must have C >= 1 classes, got shape ",
          input.shape_string());
    check(args.blank >= 0 && args.blank < d.classes, "ctc_loss: blank = ", args.blank,
          " is out of range for C = ", d.classes, " classes (expected 0..", d.classes - 1, ")");

    // Outputs: the gradient's name must match the input's.
    check(logits || out.grad_logits.empty(),
          "ctc_loss: grad_logits was given but the input is log_probs; pass grad_log_probs");
    check(!logits || out.grad_log_probs.empty(),
          "ctc_loss: grad_log_probs was given but the input is logits; pass grad_logits");
    const TensorView<T>& grad = logits ? out.grad_logits : out.grad_log_probs;
    const char* grad_name = logits ? "grad_logits" : "grad_log_probs";
    check_device(grad, grad_name, device, input_name);
    check_device(out.losses, "losses", device, input_name);
    if (!grad.empty()) {
        check_shape(grad, logits ? "ctc_loss: grad_logits" : "ctc_loss: grad_log_probs",
                    {d.max_time, d.batch, d.classes});
        check(!lstm::detail::overlaps(grad, input), "ctc_loss: ", grad_name, " must not overlap ",
              input_name, " (the input is still read while the gradient is written)");
    }
    if (!out.losses.empty()) {
        check_shape(out.losses, "ctc_loss: losses", {d.batch});
        // The losses are written after the gradient, which an overlap would corrupt silently,
        // and on cuda by kernels while other samples may still read the input (on cpu an
        // overlap would overwrite an input passed as const).
        check(!lstm::detail::overlaps(out.losses, input), "ctc_loss: losses must not overlap ",
              input_name, " (the input is read while the losses are written)");
        check(!lstm::detail::overlaps(out.losses, grad), "ctc_loss: losses must not overlap ",
              grad_name, " (both are written)");
    }

    // Lengths.
    check(args.input_lengths.size == d.batch, "ctc_loss: input_lengths must have N = ", d.batch,
          " elements (the batch size of ", input_name, "), got ", args.input_lengths.size);
    check(args.target_lengths.size == d.batch, "ctc_loss: target_lengths must have N = ", d.batch,
          " elements (the batch size of ", input_name, "), got ", args.target_lengths.size);
    check(d.batch == 0 || args.input_lengths.data != nullptr,
          "ctc_loss: input_lengths has no data");
    check(d.batch == 0 || args.target_lengths.data != nullptr,
          "ctc_loss: target_lengths has no data");
    check(input.numel() == 0 || input.data() != nullptr, "ctc_loss: ", input_name, " has no data");
    int64_t total_labels = 0;
    for (int64_t n = 0; n < d.batch; ++n) {
        const int64_t length = args.input_lengths[n];
        check(length >= 1, "ctc_loss: input_lengths[", n, "] = ", length, " must be >= 1");
        check(length <= d.max_time, "ctc_loss: input_lengths[", n, "] = ", length,
              " exceeds T = ", d.max_time);
        const int64_t labels = args.target_lengths[n];
        check(labels >= 0, "ctc_loss: target_lengths[", n, "] = ", labels, " must be >= 0");
        // No sum of lengths may wrap around: a wrapped total could pass the size check below and
        // let the label scan run past the targets.
        check(labels <= std::numeric_limits<int64_t>::max() - total_labels,
              "ctc_loss: target_lengths[", n, "] = ", labels,
              " makes the sum of target_lengths overflow int64 (", total_labels, " before it)");
        d.max_target_length = std::max(d.max_target_length, labels);
        total_labels += labels;
    }

    // Targets: padded (N, S) or concatenated (sum of target_lengths).
    const TensorView<const int64_t>& targets = args.targets;
    check(targets.empty() || targets.device() == Device::cpu,
          "ctc_loss: targets is on cuda, but targets are read on the host; pass a cpu view");
    check(targets.rank() == 1 || targets.rank() == 2,
          "ctc_loss: targets must be padded (N, S) or concatenated 1-D, got shape ",
          targets.shape_string());
    if (targets.rank() == 2) {
        check(targets.size(0) == d.batch, "ctc_loss: targets has ", targets.size(0),
              " rows but the batch has N = ", d.batch, " (", input_name, " is ",
              input.shape_string(), ")");
        d.target_stride = targets.size(1);
        for (int64_t n = 0; n < d.batch; ++n)
            check(args.target_lengths[n] <= d.target_stride, "ctc_loss: target_lengths[", n,
                  "] = ", args.target_lengths[n], " exceeds S = ", d.target_stride,
                  " (targets is padded with shape ", targets.shape_string(), ")");
    } else {
        check(targets.size(0) == total_labels, "ctc_loss: concatenated targets must have ",
              total_labels, " elements (the sum of target_lengths), got ", targets.size(0));
    }
    check(total_labels == 0 || targets.data() != nullptr, "ctc_loss: targets has no data");
    int64_t start = 0;
    for (int64_t n = 0; n < d.batch; ++n) {
        const int64_t first = targets.rank() == 2 ? n * d.target_stride : start;
        for (int64_t i = 0; i < args.target_lengths[n]; ++i) {
            const int64_t label = targets[first + i];
            if (label >= 0 && label < d.classes && label != args.blank) continue;
            std::ostringstream where;
            if (targets.rank() == 2)
                where << "targets[" << n << "][" << i << "]";
            else
                where << "targets[" << first + i << "] (sample " << n << ", label " << i << ")";
            if (label == args.blank)
                fail("ctc_loss: ", where.str(), " = ", label, " equals the blank index");
            fail("ctc_loss: ", where.str(), " = ", label, " is out of range for C = ", d.classes,
                 " classes (expected 0..", d.classes - 1, ")");
        }
        start += args.target_lengths[n];
    }
    return d;
}

// The kernel's view of a validated call.
template <typename T>
kernels::cpu::CtcProblem<T> problem(const CtcArgs<T>& args, const CtcOutputs<T>& out,
                                    const CtcDims& d) {
    const bool logits = !args.logits.empty();
    kernels::cpu::CtcProblem<T> p;
    p.max_time = d.max_time;
    p.batch = d.batch;
    p.classes = d.classes;
    p.input = logits ? args.logits.data() : args.log_probs.data();
    p.logits = logits;
    p.targets = args.targets.data();
    p.target_stride = d.target_stride;
    p.input_lengths = args.input_lengths.data;
    p.target_lengths = args.target_lengths.data;
    p.max_labels = d.max_target_length;
    p.blank = args.blank;
    p.zero_infinity = args.zero_infinity;
    p.grad_scale =
        args.reduction == Reduction::mean && d.batch > 0 ? 1.0 / static_cast<double>(d.batch) : 1.0;
    p.divide_by_target_length = args.reduction == Reduction::mean;
    const TensorView<T>& grad = logits ? out.grad_logits : out.grad_log_probs;
    p.grad = grad.empty() ? nullptr : grad.data();
    return p;
}

}  // namespace ctc_detail

// The workspace this exact call needs when it may run `threads` samples at once (0:
// omp_get_max_threads()). Validates args like ctc_loss.
template <typename T>
size_t ctc_workspace_bytes(const CtcArgs<T>& args, int threads = 0) {
    const ctc_detail::CtcDims d = ctc_detail::validate(args, CtcOutputs<T>{});
    return ctc_workspace_bytes(d.max_time, d.batch, d.classes, d.max_target_length, threads);
}

// CTC loss with a caller-provided host workspace of workspace_bytes bytes, any alignment; at
// least ctc_workspace_bytes(args, 1), more lets more threads run (see ctc_workspace_bytes).
// Nothing is allocated. Returns the reduced loss (see CtcArgs::reduction) and writes the
// requested outputs. Samples run in parallel over OpenMP threads, each sample on one thread, and
// the reduction adds the per-sample losses in batch order, so results are bit-identical for
// every thread count. Throws lstm::Error, before writing anything, when an argument is invalid.
template <typename T>
T ctc_loss(const CtcArgs<T>& args, const CtcOutputs<T>& outputs, void* workspace,
           size_t workspace_bytes) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "ctc_loss supports float and double");
    const ctc_detail::CtcDims d = ctc_detail::validate(args, outputs);
    check((args.logits.empty() ? args.log_probs : args.logits).device() == Device::cpu,
          "ctc_loss: the overload with a host workspace is for cpu tensors; cuda tensors keep "
          "their scratch in args.context: call ctc_loss(args, outputs)");
    const size_t needed =
        ctc_workspace_bytes(d.max_time, d.batch, d.classes, d.max_target_length, 1);
    check(workspace_bytes >= needed, "ctc_loss: workspace has ", workspace_bytes,
          " bytes, needs at least ", needed, " (see ctc_workspace_bytes)");
    check(workspace != nullptr, "ctc_loss: workspace is null");

    const kernels::cpu::CtcProblem<T> p = ctc_detail::problem(args, outputs, d);
    const double* losses = kernels::cpu::ctc_loss(p, workspace, workspace_bytes);
    double total = 0;
    for (int64_t n = 0; n < d.batch; ++n) {
        if (!outputs.losses.empty()) outputs.losses[n] = static_cast<T>(losses[n]);
        total += args.reduction == Reduction::mean
                     ? losses[n] / static_cast<double>(std::max<int64_t>(args.target_lengths[n], 1))
                     : losses[n];
    }
    if (args.reduction == Reduction::mean) {
        if (d.batch == 0) return std::numeric_limits<T>::quiet_NaN();
        total /= static_cast<double>(d.batch);
    }
    return static_cast<T>(total);
}

// Same, allocating its own workspace for omp_get_max_threads() threads on every call. Training
// loops that call it repeatedly should keep a buffer and use the overload above.
// cuda tensors (with args.context) run on the device instead, with args.backend: the same checks
// and semantics, the gradient and per-sample losses written on the device, the reduced loss
// returned after waiting on the context's stream; their scratch lives in the context (it only
// grows), so steady-state calls allocate no device memory. Deterministic: no atomics, every sum
// in a fixed order. docs/ctc.md, "On the GPU".
template <typename T>
T ctc_loss(const CtcArgs<T>& args, const CtcOutputs<T>& outputs = {}) {
#if LSTM_WITH_CUDA
    if ((args.logits.empty() ? args.log_probs : args.logits).device() == Device::cuda) {
        const ctc_detail::CtcDims d = ctc_detail::validate(args, outputs);
        const kernels::cpu::CtcProblem<T> p = ctc_detail::problem(args, outputs, d);
        return cuda::ctc_loss(*args.context, p, args.reduction,
                              ctc_resolve_backend(p, args.backend),
                              outputs.losses.empty() ? nullptr : outputs.losses.data());
    }
#endif
    const size_t bytes = ctc_workspace_bytes(args);
    MemoryRequest().add("workspace", bytes).check("ctc_loss");
    const std::unique_ptr<unsigned char[]> workspace(new unsigned char[bytes]);
    return ctc_loss(args, outputs, workspace.get(), bytes);
}

}  // namespace lstm::loss
