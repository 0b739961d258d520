#pragma once

// Softmax cross-entropy with PyTorch's semantics (torch.nn.functional.cross_entropy with class
// indices: reduction, weight, ignore_index and label_smoothing as PyTorch takes them; targets as
// class probabilities are not taken), in two forms: rows (M, C) and per-frame labels of a padded,
// time-major sequence batch (T, N, C).

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

// PyTorch's default ignore_index: a target equal to it counts for nothing.
inline constexpr int64_t kDefaultIgnoreIndex = -100;

// PyTorch's keyword arguments of F.cross_entropy, with its defaults. A Reduction converts to
// options with the other arguments at their defaults, so cross_entropy(logits, targets,
// Reduction::sum, grad) keeps working.
template <typename T>
struct CrossEntropyOptions {
    CrossEntropyOptions(Reduction r = Reduction::mean) : reduction(r) {}  // NOLINT: implicit

    Reduction reduction;
    // Rows (frames) whose target equals it count for nothing: zero loss and gradient, left out of
    // mean's denominator and never range-checked. PyTorch's default; any value may be chosen,
    // a class index too.
    int64_t ignore_index = kDefaultIgnoreIndex;
    // s in [0, 1]: the loss is taken against (1 - s) onehot(target) + s / C instead of the
    // onehot, as PyTorch's label_smoothing.
    double label_smoothing = 0.0;
    // Class weights (C), host, or empty for every class weighing 1: a row's loss against class c
    // is scaled by weight[c], and mean divides by the sum of the counted rows' target weights
    // (PyTorch's weighted mean; the smoothing term too). Weights are taken as given (negative,
    // zero: PyTorch checks neither).
    Span<const T> weight;
};

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

// Checks the options against C classes and turns them into the kernels' form (weight_sum in T, in
// class order, as PyTorch's weight.sum()).
template <typename T>
kernels::cpu::CeOptions<T> ce_kernel_options(const CrossEntropyOptions<T>& options, int64_t classes,
                                             const char* function) {
    check(options.weight.empty() || options.weight.size == classes, function,
          ": weight must have C = ", classes,
          " elements (or none for every class weighing 1), got ", options.weight.size);
    check(options.weight.empty() || options.weight.data != nullptr, function, ": weight has ",
          options.weight.size, " elements but no data");
    // Written so that NaN fails too.
    check(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, function,
          ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
    kernels::cpu::CeOptions<T> k;
    k.weight = options.weight.empty() ? nullptr : options.weight.data;
    k.smoothing = static_cast<T>(options.label_smoothing);
    k.ignore_index = options.ignore_index;
    k.weight_sum = static_cast<T>(classes);
    if (k.weight) {
        k.weight_sum = T(0);
        for (int64_t c = 0; c < classes; ++c) k.weight_sum += k.weight[c];
    }
    return k;
}

// The rows a reduction counts: how many, and the sum of their targets' weights (mean's
// denominator, PyTorch's; the count itself without weights).
struct CeCount {
    int64_t rows = 0;
    double weight = 0.0;
};

// Adds one counted row with target `target` to the count.
template <typename T>
void ce_count_row(CeCount& count, const kernels::cpu::CeOptions<T>& k, int64_t target) {
    ++count.rows;
    count.weight += k.weight ? static_cast<double>(k.weight[target]) : 1.0;
}

// Factor that turns d(sum of counted losses) into d(returned loss).
inline double ce_reduction_scale(Reduction reduction, const CeCount& count) {
    return reduction == Reduction::mean ? 1.0 / count.weight : 1.0;
}

// The returned loss from the double sum of the counted losses; mean over no counted rows is
// NaN, as in PyTorch (and so is a mean whose counted rows all weigh 0).
template <typename T>
T ce_reduce_total(Reduction reduction, double total, const CeCount& count) {
    if (reduction != Reduction::mean) return static_cast<T>(total);
    if (count.rows == 0) return std::numeric_limits<T>::quiet_NaN();
    return static_cast<T>(total / count.weight);
}

}  // namespace detail

// The argument after targets takes a Reduction or a CrossEntropyOptions<T>; this keeps T deduced
// from the logits alone.
template <typename T>
using CrossEntropyOptionsOf = typename std::common_type<CrossEntropyOptions<T>>::type;

// Cross-entropy of logits (M, C) against class indices targets (M), all host, row-major.
// Returns the reduced loss: sum, or the weighted mean over the counted rows (sum / M without
// weights or ignored rows; NaN when nothing counts, as in PyTorch); for none it returns the sum,
// and the per-row losses are what `losses` holds. A row counts unless its target equals
// options.ignore_index.
// grad (M, C), optional (empty view = not wanted): overwritten with d(returned loss)/d(logits)
// (softmax - onehot, scaled by 1 for none and sum, 1 / M for mean, without options); ignored
// rows get zeros.
// losses (M), optional: overwritten with each row's unreduced loss, whatever the reduction (0 for
// an ignored row).
// Throws lstm::Error on a shape mismatch, bad options or a counted row's target outside [0, C),
// before writing anything.
// Device: logits, grad and losses on the host, or all on cuda (targets and options.weight stay
// host spans); cuda needs `context`, queues the work on its stream and waits for it (the loss
// comes back to the host), with the same arguments, checks and results (sums in a fixed order,
// bit-identical run to run; rounding differs from the host's in the last bits).
template <typename T>
T cross_entropy(TensorView<const T> logits, Span<const int64_t> targets,
                const CrossEntropyOptionsOf<T>& options = {}, TensorView<T> grad = {},
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
    const kernels::cpu::CeOptions<T> k = detail::ce_kernel_options(options, classes, fn);
    detail::CeCount count;
    for (int64_t r = 0; r < rows; ++r) {
        if (targets[r] == options.ignore_index) continue;
        check(targets[r] >= 0 && targets[r] < classes, fn, ": targets[", r, "] = ", targets[r],
              " is out of range for ", classes, " classes (expected 0..", classes - 1,
              ", or ignore_index = ", options.ignore_index, ")");
        detail::ce_count_row(count, k, targets[r]);
    }
    const T scale = static_cast<T>(detail::ce_reduction_scale(options.reduction, count));
#if LSTM_WITH_CUDA
    if (logits.device() == Device::cuda) {
        const double total = cuda::cross_entropy_rows(
            *context, rows, classes, rows, nullptr, logits.data(), targets.data, k, scale,
            losses.empty() ? nullptr : losses.data(), grad.empty() ? nullptr : grad.data());
        return detail::ce_reduce_total<T>(options.reduction, total, count);
    }
#endif
    const double total = kernels::cpu::cross_entropy_rows<T>(
        rows, classes, rows, nullptr, logits.data(), targets.data, k, scale,
        losses.empty() ? nullptr : losses.data(), grad.empty() ? nullptr : grad.data());
    return detail::ce_reduce_total<T>(options.reduction, total, count);
}

// Same for mutable logits, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
T cross_entropy(TensorView<T> logits, Span<const int64_t> targets,
                const CrossEntropyOptionsOf<T>& options = {}, TensorView<T> grad = {},
                TensorView<T> losses = {}, cuda::Context* context = nullptr) {
    return cross_entropy<T>(TensorView<const T>(logits), targets, options, grad, losses, context);
}

// Per-frame cross-entropy of a padded, time-major batch: logits (T, N, C), targets (T * N)
// time-major (frame (t, n) at t * N + n), lengths (N) each in 1..T, or empty for all T; all host.
// Frames with t >= lengths[n] are padding: they count for nothing, their targets are never read
// or range-checked, and they get exactly zero gradient and zero loss; so do valid frames whose
// target is options.ignore_index.
// Returns the reduced loss over the counted frames: sum, or the weighted mean (sum / (number of
// counted frames) without weights: PyTorch's mean over the counted elements); for none it returns
// the sum.
// grad (T, N, C), optional: overwritten with d(returned loss)/d(logits).
// losses (T, N), optional: overwritten with each frame's unreduced loss (zero when not counted).
// Throws lstm::Error on a shape mismatch, bad options, a length outside 1..T or a counted frame's
// target outside [0, C), before writing anything.
// Device: as cross_entropy (cuda tensors need `context`; lengths, targets and options.weight
// stay host spans).
template <typename T>
T cross_entropy_frames(TensorView<const T> logits, Span<const int64_t> lengths,
                       Span<const int64_t> targets, const CrossEntropyOptionsOf<T>& options = {},
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
    const kernels::cpu::CeOptions<T> k = detail::ce_kernel_options(options, classes, fn);

    detail::CeCount count;
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t length = lengths.empty() ? steps : lengths[n];
        check(length >= 1, fn, ": lengths[", n, "] = ", length, " must be >= 1");
        check(length <= steps, fn, ": lengths[", n, "] = ", length, " exceeds T = ", steps);
        for (int64_t t = 0; t < length; ++t) {
            const int64_t target = targets[t * batch + n];
            if (target == options.ignore_index) continue;
            check(target >= 0 && target < classes, fn, ": targets[", t * batch + n, "] = ", target,
                  " is out of range for ", classes, " classes (expected 0..", classes - 1,
                  ", or ignore_index = ", options.ignore_index, "; frame t = ", t, ", n = ", n,
                  ")");
            detail::ce_count_row(count, k, target);
        }
    }
    const T scale = static_cast<T>(detail::ce_reduction_scale(options.reduction, count));
#if LSTM_WITH_CUDA
    if (logits.device() == Device::cuda) {
        const double total = cuda::cross_entropy_rows(
            *context, steps * batch, classes, batch, lengths.empty() ? nullptr : lengths.data,
            logits.data(), targets.data, k, scale, losses.empty() ? nullptr : losses.data(),
            grad.empty() ? nullptr : grad.data());
        return detail::ce_reduce_total<T>(options.reduction, total, count);
    }
#endif
    const double total = kernels::cpu::cross_entropy_rows<T>(
        steps * batch, classes, batch, lengths.empty() ? nullptr : lengths.data, logits.data(),
        targets.data, k, scale, losses.empty() ? nullptr : losses.data(),
        grad.empty() ? nullptr : grad.data());
    return detail::ce_reduce_total<T>(options.reduction, total, count);
}

// Same for mutable logits, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
T cross_entropy_frames(TensorView<T> logits, Span<const int64_t> lengths,
                       Span<const int64_t> targets, const CrossEntropyOptionsOf<T>& options = {},
                       TensorView<T> grad = {}, TensorView<T> losses = {},
                       cuda::Context* context = nullptr) {
    return cross_entropy_frames<T>(TensorView<const T>(logits), lengths, targets, options, grad,
                                   losses, context);
}

}  // namespace lstm::loss
