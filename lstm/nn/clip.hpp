#pragma once

// torch.nn.utils.clip_grad_norm_ over flat gradient buffers (host), e.g. a model's
// lstm().gradients() and dense().gradients() between compute_gradients() and
// optimizer().step():
//   total = || all gradients ||_2,  coef = max_norm / (total + 1e-6),
//   every gradient *= min(coef, 1);  returns total.
// The sum of squares is accumulated in double (PyTorch sums each tensor in its own dtype), so the
// norm is at least as accurate as PyTorch's; the scale is applied in T, as PyTorch's mul_.

#include <cmath>
#include <initializer_list>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::nn {

namespace detail {
template <typename T>
struct SpanRange {
    const Span<T>* first;
    const Span<T>* last;
    const Span<T>* begin() const { return first; }
    const Span<T>* end() const { return last; }
};
}  // namespace detail

// Scales the gradients in place so their global L2 norm is at most max_norm (> 0); returns the
// norm before clipping. A non-finite norm (NaN or inf in a gradient) throws lstm::InvalidArgument
// naming it when error_if_nonfinite (PyTorch's flag), else the gradients are scaled as PyTorch
// would (NaN spreads; it is the caller's to notice the returned norm).
// grads: `count` host buffers, each scaled in place.
template <typename T>
double clip_grad_norm(const Span<T>* first, size_t count, double max_norm,
                      bool error_if_nonfinite = false) {
    const detail::SpanRange<T> grads{first, first + count};
    check(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
    int64_t index = 0;
    for (const Span<T>& g : grads) {
        check(g.size >= 0, "clip_grad_norm: grads[", index, "] has ", g.size,
              " elements; sizes must be >= 0");
        check(g.size == 0 || g.data != nullptr, "clip_grad_norm: grads[", index,
              "] has no data for ", g.size, " elements");
        ++index;
    }
    double squares = 0;
    for (const Span<T>& g : grads)
        for (int64_t i = 0; i < g.size; ++i) squares += static_cast<double>(g[i]) * g[i];
    const double total = std::sqrt(squares);
    check(std::isfinite(total) || !error_if_nonfinite, "clip_grad_norm: the total norm is ", total,
          "; the gradients hold NaN or inf, or their squares overflow a double "
          "(error_if_nonfinite)");
    // PyTorch's 1e-6 keeps the coefficient finite for a zero norm.
    const double coef = max_norm / (total + 1e-6);
    // Multiplying by 1 changes nothing. A NaN norm gives a NaN coefficient, which (as PyTorch's
    // clamp keeps NaN) scales every gradient to NaN instead of leaving them as they were.
    if (coef >= 1) return total;
    const T scale = static_cast<T>(coef);
    for (const Span<T>& g : grads)
        for (int64_t i = 0; i < g.size; ++i) g[i] *= scale;
    return total;
}

template <typename T>
double clip_grad_norm(std::initializer_list<Span<T>> grads, double max_norm,
                      bool error_if_nonfinite = false) {
    return clip_grad_norm(grads.begin(), grads.size(), max_norm, error_if_nonfinite);
}

template <typename T>
double clip_grad_norm(const std::vector<Span<T>>& grads, double max_norm,
                      bool error_if_nonfinite = false) {
    return clip_grad_norm(grads.data(), grads.size(), max_norm, error_if_nonfinite);
}

}  // namespace lstm::nn
