#pragma once

// Moving between a padded, time-major sequence batch and one vector per sequence: the last valid
// step (Braun's classifiers) or the mean over the valid steps (Bahrampour's IMDB sentiment model)
// feeds a per-sequence head, and each has its adjoint that sends the head's gradient back.

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::nn {

namespace detail {

// Validates lengths (N, each in 1..T, or empty for all T) for a (T, N, F) sequence tensor.
inline void check_sequence_lengths(const char* fn, Span<const int64_t> lengths, int64_t steps,
                                   int64_t batch) {
    check(lengths.empty() || lengths.size == batch, fn, ": lengths must have N = ", batch,
          " elements (or none for all T), got ", lengths.size);
    check(lengths.empty() || lengths.data != nullptr, fn, ": lengths has no data");
    check(!lengths.empty() || batch == 0 || steps >= 1, fn,
          ": T = 0 leaves the sequences without a last step");
    for (int64_t n = 0; n < lengths.size; ++n) {
        check(lengths[n] >= 1, fn, ": lengths[", n, "] = ", lengths[n], " must be >= 1");
        check(lengths[n] <= steps, fn, ": lengths[", n, "] = ", lengths[n], " exceeds T = ", steps);
    }
}

template <typename T>
void check_sequence_host(const TensorView<T>& view, const char* fn, const char* name) {
    check(view.device() == Device::cpu, fn, ": ", name, " is on ", to_string(view.device()),
          ", but only cpu tensors are supported so far");
    if (view.numel() != 0 && view.data() == nullptr)
        fail(fn, ": ", name, " has no data (shape ", view.shape_string(), ")");
}

// The step of sequence n's last valid frame: lengths[n] - 1, or T - 1 when lengths is empty.
inline int64_t last_step(Span<const int64_t> lengths, int64_t n, int64_t steps) {
    return (lengths.empty() ? steps : lengths[n]) - 1;
}

// Validates scatter_last_step's arguments (the name of the caller in fn).
template <typename T>
void check_scatter_last_step(const char* fn, TensorView<const T> dout, Span<const int64_t> lengths,
                             TensorView<T> dy) {
    check(dy.rank() == 3, fn, ": dy must have rank 3 (T, N, F), got shape ", dy.shape_string());
    detail::check_sequence_host(dout, fn, "dout");
    detail::check_sequence_host(dy, fn, "dy");
    check_shape(dout, (std::string(fn) + ": dout").c_str(), {dy.size(1), dy.size(2)});
    detail::check_sequence_lengths(fn, lengths, dy.size(0), dy.size(1));
}

// dy[last_step(n), n, :] = dout[n, :] for every n; nothing else of dy is touched.
template <typename T>
void place_last_steps(TensorView<const T> dout, Span<const int64_t> lengths, TensorView<T> dy) {
    const int64_t steps = dy.size(0), batch = dy.size(1), features = dy.size(2);
    for (int64_t n = 0; n < batch; ++n) {
        const T* src = dout.data() + n * features;
        std::copy(src, src + features,
                  dy.data() + (last_step(lengths, n, steps) * batch + n) * features);
    }
}

}  // namespace detail

// out[n, :] = y[lengths[n] - 1, n, :]; y (T, N, F) time-major, out (N, F) overwritten, both host,
// row-major; lengths (N) each in 1..T, or empty for all T.
template <typename T>
void gather_last_step(TensorView<const T> y, Span<const int64_t> lengths, TensorView<T> out) {
    constexpr const char* fn = "gather_last_step";
    check(y.rank() == 3, fn, ": y must have rank 3 (T, N, F), got shape ", y.shape_string());
    const int64_t steps = y.size(0), batch = y.size(1), features = y.size(2);
    detail::check_sequence_host(y, fn, "y");
    detail::check_sequence_host(out, fn, "out");
    check_shape(out, "gather_last_step: out", {batch, features});
    detail::check_sequence_lengths(fn, lengths, steps, batch);
    for (int64_t n = 0; n < batch; ++n) {
        const T* src = y.data() + (detail::last_step(lengths, n, steps) * batch + n) * features;
        std::copy(src, src + features, out.data() + n * features);
    }
}

// Same for a mutable y, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
void gather_last_step(TensorView<T> y, Span<const int64_t> lengths, TensorView<T> out) {
    gather_last_step<T>(TensorView<const T>(y), lengths, out);
}

// The adjoint of gather_last_step: dy[lengths[n] - 1, n, :] = dout[n, :] and every other element
// of dy is zero; dout (N, F), dy (T, N, F) time-major and overwritten, both host, row-major;
// lengths (N) each in 1..T, or empty for all T.
template <typename T>
void scatter_last_step(TensorView<const T> dout, Span<const int64_t> lengths, TensorView<T> dy) {
    detail::check_scatter_last_step("scatter_last_step", dout, lengths, dy);
    std::fill(dy.data(), dy.data() + dy.numel(), T(0));
    detail::place_last_steps(dout, lengths, dy);
}

// scatter_last_step into a dy that is zero except at the rows an earlier scatter_last_step of
// the same shape wrote: previous (N) holds that call's steps, one per sequence
// (previous[n] = its lengths[n] - 1). Clears those N rows instead of all of dy, whose size grows
// with the whole sequence, then scatters as scatter_last_step. Arguments otherwise as there.
template <typename T>
void rescatter_last_step(TensorView<const T> dout, Span<const int64_t> lengths,
                         Span<const int64_t> previous, TensorView<T> dy) {
    constexpr const char* fn = "rescatter_last_step";
    detail::check_scatter_last_step(fn, dout, lengths, dy);
    const int64_t steps = dy.size(0), batch = dy.size(1), features = dy.size(2);
    check(previous.size == batch, fn, ": previous must have N = ", batch, " elements, got ",
          previous.size);
    for (int64_t n = 0; n < batch; ++n) {
        check(previous[n] >= 0 && previous[n] < steps, fn, ": previous[", n, "] = ", previous[n],
              " is not a step of T = ", steps);
        T* row = dy.data() + (previous[n] * batch + n) * features;
        std::fill(row, row + features, T(0));
    }
    detail::place_last_steps(dout, lengths, dy);
}

// Same for a mutable dout, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
void scatter_last_step(TensorView<T> dout, Span<const int64_t> lengths, TensorView<T> dy) {
    scatter_last_step<T>(TensorView<const T>(dout), lengths, dy);
}

// out[n, :] = (1 / len_n) * sum over t < len_n of y[t, n, :], len_n = lengths[n] (or T when
// lengths is empty); padded steps are never read. y (T, N, F) time-major, out (N, F) overwritten,
// both host, row-major. Sums over t in order, then scales by 1 / len_n.
template <typename T>
void mean_pool_steps(TensorView<const T> y, Span<const int64_t> lengths, TensorView<T> out) {
    constexpr const char* fn = "mean_pool_steps";
    check(y.rank() == 3, fn, ": y must have rank 3 (T, N, F), got shape ", y.shape_string());
    const int64_t steps = y.size(0), batch = y.size(1), features = y.size(2);
    detail::check_sequence_host(y, fn, "y");
    detail::check_sequence_host(out, fn, "out");
    check_shape(out, "mean_pool_steps: out", {batch, features});
    detail::check_sequence_lengths(fn, lengths, steps, batch);
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t len = lengths.empty() ? steps : lengths[n];
        const T scale = static_cast<T>(1.0 / static_cast<double>(len));
        T* dst = out.data() + n * features;
        std::fill(dst, dst + features, T(0));
        // Step-major: every step's row is contiguous.
        for (int64_t t = 0; t < len; ++t) {
            const T* src = y.data() + (t * batch + n) * features;
            for (int64_t f = 0; f < features; ++f) dst[f] += src[f];
        }
        for (int64_t f = 0; f < features; ++f) dst[f] *= scale;
    }
}

// Same for a mutable y, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
void mean_pool_steps(TensorView<T> y, Span<const int64_t> lengths, TensorView<T> out) {
    mean_pool_steps<T>(TensorView<const T>(y), lengths, out);
}

// The adjoint of mean_pool_steps: dy[t, n, :] = dout[n, :] / len_n for t < len_n, zero at padded
// steps. dout (N, F), dy (T, N, F) time-major and overwritten, both host, row-major; lengths (N)
// each in 1..T, or empty for all T.
template <typename T>
void scatter_mean_pool(TensorView<const T> dout, Span<const int64_t> lengths, TensorView<T> dy) {
    constexpr const char* fn = "scatter_mean_pool";
    check(dy.rank() == 3, fn, ": dy must have rank 3 (T, N, F), got shape ", dy.shape_string());
    const int64_t steps = dy.size(0), batch = dy.size(1), features = dy.size(2);
    detail::check_sequence_host(dout, fn, "dout");
    detail::check_sequence_host(dy, fn, "dy");
    check_shape(dout, "scatter_mean_pool: dout", {batch, features});
    detail::check_sequence_lengths(fn, lengths, steps, batch);
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t len = lengths.empty() ? steps : lengths[n];
        const T scale = static_cast<T>(1.0 / static_cast<double>(len));
        const T* src = dout.data() + n * features;
        for (int64_t t = 0; t < steps; ++t) {
            T* dst = dy.data() + (t * batch + n) * features;
            for (int64_t f = 0; f < features; ++f) dst[f] = t < len ? src[f] * scale : T(0);
        }
    }
}

// Same for a mutable dout, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
void scatter_mean_pool(TensorView<T> dout, Span<const int64_t> lengths, TensorView<T> dy) {
    scatter_mean_pool<T>(TensorView<const T>(dout), lengths, dy);
}

}  // namespace lstm::nn
