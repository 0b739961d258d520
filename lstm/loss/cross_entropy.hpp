#pragma once

// Softmax cross-entropy with PyTorch's semantics (torch.nn.functional.cross_entropy with class
// indices, no class weights, no ignore_index, no label smoothing), in two forms: rows (M, C) and
// per-frame labels of a padded, time-major sequence batch (T, N, C).

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cross_entropy.hpp"
#include "lstm/error.hpp"
#include "lstm/loss/reduction.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/loss/cross_entropy_cuda.hpp"
#endif

namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::loss {

namespace detail {

// The call runs where the logits live; every output must live there too, and cuda needs a
// context (and a build with the CUDA back-end).
template <typename T>
void check_ce_devices(const TensorView<const T>& logits, const TensorView<T>& grad,
                      const TensorView<T>& losses, const char* function,
                      const cuda::Context* context) {
    const Device device = logits.device();
    auto on_device = [&](const TensorView<T>& view, const char* name) {
        check(view.empty() || view.device() == device, function, ": ", name, " is on ",
              to_string(view.device()), ", but logits is on ", to_string(device),
              "; outputs must be on the logits' device");
    };
    on_device(grad, "grad");
    on_device(losses, "losses");
    if (device == Device::cpu) return;
#if LSTM_WITH_CUDA
    check(context != nullptr, function,
          ": logits is on cuda, so the context argument (a lstm::cuda::Context) must be given");
#else
    (void)context;
    fail_as<Unsupported>(
        function, ": logits is on cuda, but this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
}

// The kernels use grad as scratch while they still read logits, so an output that shares memory
// with logits (or with the other output) would change the loss without a word.
template <typename T>
void check_ce_outputs_apart(TensorView<const T> logits, TensorView<T> grad, TensorView<T> losses,
                            const char* function) {
    using lstm::detail::overlaps;  // an empty (null) view overlaps nothing
    check(!overlaps(grad, logits), function,
          ": grad must not overlap logits (the gradient cannot be computed in place)");
    check(!overlaps(losses, logits), function, ": losses must not overlap logits");
    check(!overlaps(grad, losses), function, ": grad and losses must not overlap");
}

// Factor that turns d(sum of counted losses) into d(returned loss).
inline double ce_reduction_scale(Reduction reduction, int64_t count) {
    return reduction == Reduction::mean ? 1.0 / static_cast<double>(count) : 1.0;
}

// The returned loss from the double sum of the counted losses; mean over no elements is NaN,
// as in PyTorch.
template <typename T>
T ce_reduce_total(Reduction reduction, double total, int64_t count) {
    if (reduction != Reduction::mean) return static_cast<T>(total);
    if (count == 0) return std::numeric_limits<T>::quiet_NaN();
    return static_cast<T>(total / static_cast<double>(count));
}

}  // namespace detail

// Cross-entropy of logits (M, C) against class indices targets (M), all host, row-major.
// Returns the reduced loss: sum, or sum / M for mean (NaN when M == 0, as in PyTorch); for none
// it returns the sum, and the per-row losses are what `losses` holds.
// grad (M, C), optional (empty view = not wanted): overwritten with d(returned loss)/d(logits),
// i.e. (softmax - onehot) scaled by 1 for none and sum, 1 / M for mean.
// losses (M), optional: overwritten with each row's unreduced loss, whatever the reduction.
// Throws lstm::Error on a shape mismatch or a target outside [0, C), before writing anything.
// Device: logits, grad and losses on the host, or all on cuda (targets stay a host span); cuda
// needs `context`, queues the work on its stream and waits for it (the loss comes back to the
// host), with the same arguments, checks and results (sums in a fixed order, bit-identical run
// to run; rounding differs from the host's in the last bits).
template <typename T>
T cross_entropy(TensorView<const T> logits, Span<const int64_t> targets,
                Reduction reduction = Reduction::mean, TensorView<T> grad = {},
                TensorView<T> losses = {}, cuda::Context* context = nullptr) {
    constexpr const char* fn = "cross_entropy";
    check(logits.rank() == 2, fn, ": logits must have rank 2 (M, C), got shape ",
          logits.shape_string());
    const int64_t rows = logits.size(0), classes = logits.size(1);
    detail::check_ce_devices(logits, grad, losses, fn, context);
    check(targets.size == rows, fn, ": targets must have M = ", rows, " elements, got ",
          targets.size);
    if (rows != 0 && classes < 1)
        fail(fn, ": logits has no classes (shape ", logits.shape_string(),
             "); every row needs at least one");
    check(rows == 0 || logits.data() != nullptr, fn, ": logits has no data");
    check(rows == 0 || targets.data != nullptr, fn, ": targets has no data");
    if (!grad.empty()) check_shape(grad, "cross_entropy: grad", {rows, classes});
    if (!losses.empty()) check_shape(losses, "cross_entropy: losses", {rows});
    detail::check_ce_outputs_apart(logits, grad, losses, fn);
    for (int64_t r = 0; r < rows; ++r) {
        check(targets[r] >= 0 && targets[r] < classes, fn, ": targets[", r, "] = ", targets[r],
              " is out of range for ", classes, " classes (expected 0..", classes - 1, ")");
    }
    const T scale = static_cast<T>(detail::ce_reduction_scale(reduction, rows));
#if LSTM_WITH_CUDA
    if (logits.device() == Device::cuda) {
        const double total = cuda::cross_entropy_rows(
            *context, rows, classes, rows, nullptr, logits.data(), targets.data, scale,
            losses.empty() ? nullptr : losses.data(), grad.empty() ? nullptr : grad.data());
        return detail::ce_reduce_total<T>(reduction, total, rows);
    }
#endif
    const double total = kernels::cpu::cross_entropy_rows<T>(
        rows, classes, rows, nullptr, logits.data(), targets.data, scale,
        losses.empty() ? nullptr : losses.data(), grad.empty() ? nullptr : grad.data());
    return detail::ce_reduce_total<T>(reduction, total, rows);
}

// Same for mutable logits, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
T cross_entropy(TensorView<T> logits, Span<const int64_t> targets,
                Reduction reduction = Reduction::mean, TensorView<T> grad = {},
                TensorView<T> losses = {}, cuda::Context* context = nullptr) {
    return cross_entropy<T>(TensorView<const T>(logits), targets, reduction, grad, losses, context);
}

// Per-frame cross-entropy of a padded, time-major batch: logits (T, N, C), targets (T * N)
// time-major (frame (t, n) at t * N + n), lengths (N) each in 1..T, or empty for all T; all host.
// Frames with t >= lengths[n] are padding: they count for nothing, their targets are never read
// or range-checked, and they get exactly zero gradient and zero loss.
// Returns the reduced loss over the valid frames: sum, or sum / (number of valid frames) for mean
// (PyTorch's mean over the counted elements); for none it returns the sum.
// grad (T, N, C), optional: overwritten with d(returned loss)/d(logits).
// losses (T, N), optional: overwritten with each frame's unreduced loss (zero when padded).
// Throws lstm::Error on a shape mismatch, a length outside 1..T or a valid frame's target
// outside [0, C), before writing anything.
// Device: as cross_entropy (cuda tensors need `context`; lengths and targets stay host spans).
template <typename T>
T cross_entropy_frames(TensorView<const T> logits, Span<const int64_t> lengths,
                       Span<const int64_t> targets, Reduction reduction = Reduction::mean,
                       TensorView<T> grad = {}, TensorView<T> losses = {},
                       cuda::Context* context = nullptr) {
    constexpr const char* fn = "cross_entropy_frames";
    check(logits.rank() == 3, fn, ": logits must have rank 3 (T, N, C), got shape ",
          logits.shape_string());
    const int64_t steps = logits.size(0), batch = logits.size(1), classes = logits.size(2);
    detail::check_ce_devices(logits, grad, losses, fn, context);
    check(lengths.empty() || lengths.size == batch, fn, ": lengths must have N = ", batch,
          " elements (or none for all T), got ", lengths.size);
    check(targets.size == steps * batch, fn, ": targets must have T * N = ", steps * batch,
          " elements, got ", targets.size);
    if (steps * batch != 0 && classes < 1)
        fail(fn, ": logits has no classes (shape ", logits.shape_string(),
             "); every frame needs at least one");
    check(logits.numel() == 0 || logits.data() != nullptr, fn, ": logits has no data");
    check(targets.size == 0 || targets.data != nullptr, fn, ": targets has no data");
    check(lengths.empty() || lengths.data != nullptr, fn, ": lengths has no data");
    if (!grad.empty()) check_shape(grad, "cross_entropy_frames: grad", {steps, batch, classes});
    if (!losses.empty()) check_shape(losses, "cross_entropy_frames: losses", {steps, batch});
    detail::check_ce_outputs_apart(logits, grad, losses, fn);
    check(!lengths.empty() || steps >= 1 || batch == 0, fn, ": logits has T = ", steps,
          " frames, and with no lengths every one of its ", batch, " sequences needs at least one");

    int64_t count = 0;
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t length = lengths.empty() ? steps : lengths[n];
        check(length >= 1, fn, ": lengths[", n, "] = ", length, " must be >= 1");
        check(length <= steps, fn, ": lengths[", n, "] = ", length, " exceeds T = ", steps);
        count += length;
        for (int64_t t = 0; t < length; ++t) {
            const int64_t target = targets[t * batch + n];
            check(target >= 0 && target < classes, fn, ": targets[", t * batch + n, "] = ", target,
                  " is out of range for ", classes, " classes (expected 0..", classes - 1,
                  "; frame t = ", t, ", n = ", n, ")");
        }
    }
    const T scale = static_cast<T>(detail::ce_reduction_scale(reduction, count));
#if LSTM_WITH_CUDA
    if (logits.device() == Device::cuda) {
        const double total = cuda::cross_entropy_rows(
            *context, steps * batch, classes, batch, lengths.empty() ? nullptr : lengths.data,
            logits.data(), targets.data, scale, losses.empty() ? nullptr : losses.data(),
            grad.empty() ? nullptr : grad.data());
        return detail::ce_reduce_total<T>(reduction, total, count);
    }
#endif
    const double total = kernels::cpu::cross_entropy_rows<T>(
        steps * batch, classes, batch, lengths.empty() ? nullptr : lengths.data, logits.data(),
        targets.data, scale, losses.empty() ? nullptr : losses.data(),
        grad.empty() ? nullptr : grad.data());
    return detail::ce_reduce_total<T>(reduction, total, count);
}

// Same for mutable logits, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
T cross_entropy_frames(TensorView<T> logits, Span<const int64_t> lengths,
                       Span<const int64_t> targets, Reduction reduction = Reduction::mean,
                       TensorView<T> grad = {}, TensorView<T> losses = {},
                       cuda::Context* context = nullptr) {
    return cross_entropy_frames<T>(TensorView<const T>(logits), lengths, targets, reduction, grad,
                                   losses, context);
}

}  // namespace lstm::loss
