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

namespace lstm::loss {

namespace detail {

template <typename T>
void check_ce_host(const TensorView<T>& view, const char* function, const char* name) {
    check(view.empty() || view.device() == Device::cpu, function, ": ", name, " is on ",
          to_string(view.device()), ", but only cpu tensors are supported so far");
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
template <typename T>
T cross_entropy(TensorView<const T> logits, Span<const int64_t> targets,
                Reduction reduction = Reduction::mean, TensorView<T> grad = {},
                TensorView<T> losses = {}) {
    constexpr const char* fn = "cross_entropy";
    check(logits.rank() == 2, fn, ": logits must have rank 2 (M, C), got shape ",
          logits.shape_string());
    const int64_t rows = logits.size(0), classes = logits.size(1);
    detail::check_ce_host(logits, fn, "logits");
    detail::check_ce_host(grad, fn, "grad");
    detail::check_ce_host(losses, fn, "losses");
    check(targets.size == rows, fn, ": targets must have M = ", rows, " elements, got ",
          targets.size);
    check(rows == 0 || logits.data() != nullptr, fn, ": logits has no data");
    check(rows == 0 || targets.data != nullptr, fn, ": targets has no data");
    if (!grad.empty()) check_shape(grad, "cross_entropy: grad", {rows, classes});
    if (!losses.empty()) check_shape(losses, "cross_entropy: losses", {rows});
    for (int64_t r = 0; r < rows; ++r) {
        check(targets[r] >= 0 && targets[r] < classes, fn, ": targets[", r, "] = ", targets[r],
              " is out of range for ", classes, " classes (expected 0..", classes - 1, ")");
    }
    const T scale = static_cast<T>(detail::ce_reduction_scale(reduction, rows));
    const double total = kernels::cpu::cross_entropy_rows<T>(
        rows, classes, rows, nullptr, logits.data(), targets.data, scale,
        losses.empty() ? nullptr : losses.data(), grad.empty() ? nullptr : grad.data());
    return detail::ce_reduce_total<T>(reduction, total, rows);
}

// Same for mutable logits, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
T cross_entropy(TensorView<T> logits, Span<const int64_t> targets,
                Reduction reduction = Reduction::mean, TensorView<T> grad = {},
                TensorView<T> losses = {}) {
    return cross_entropy<T>(TensorView<const T>(logits), targets, reduction, grad, losses);
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
template <typename T>
T cross_entropy_frames(TensorView<const T> logits, Span<const int64_t> lengths,
                       Span<const int64_t> targets, Reduction reduction = Reduction::mean,
                       TensorView<T> grad = {}, TensorView<T> losses = {}) {
    constexpr const char* fn = "cross_entropy_frames";
    check(logits.rank() == 3, fn, ": logits must have rank 3 (T, N, C), got shape ",
          logits.shape_string());
    const int64_t steps = logits.size(0), batch = logits.size(1), classes = logits.size(2);
    detail::check_ce_host(logits, fn, "logits");
    detail::check_ce_host(grad, fn, "grad");
    detail::check_ce_host(losses, fn, "losses");
    check(lengths.empty() || lengths.size == batch, fn, ": lengths must have N = ", batch,
          " elements (or none for all T), got ", lengths.size);
    check(targets.size == steps * batch, fn, ": targets must have T * N = ", steps * batch,
          " elements, got ", targets.size);
    check(logits.numel() == 0 || logits.data() != nullptr, fn, ": logits has no data");
    check(targets.size == 0 || targets.data != nullptr, fn, ": targets has no data");
    check(lengths.empty() || lengths.data != nullptr, fn, ": lengths has no data");
    if (!grad.empty()) check_shape(grad, "cross_entropy_frames: grad", {steps, batch, classes});
    if (!losses.empty()) check_shape(losses, "cross_entropy_frames: losses", {steps, batch});

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
                       TensorView<T> grad = {}, TensorView<T> losses = {}) {
    return cross_entropy_frames<T>(TensorView<const T>(logits), lengths, targets, reduction, grad,
                                   losses);
}

}  // namespace lstm::loss
