#pragma once

// Softmax cross-entropy on raw host pointers: loss and its gradient with respect to the logits,
// fused so that the exponentials are computed once. Raw math only: nothing from lstm/ is
// included, targets are assumed in range (the caller validates), nothing throws.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lstm::kernels::cpu {

// PyTorch's optional arguments of F.cross_entropy with class indices, validated by the caller.
// With the defaults every result is bit for bit the plain softmax cross-entropy's (the factors
// they add are exactly 1 and 0).
template <typename T>
struct CeOptions {
    const T* weight = nullptr;    // host (classes), or null for every class weighing 1
    T weight_sum = 0;             // the sum of weight (classes when null); smoothing needs it
    T smoothing = 0;              // label_smoothing s in [0, 1]
    int64_t ignore_index = -100;  // rows whose target equals it count for nothing
};

// One row: returns w[t] (1 - s) (lse - x[t]) + (s / C) sum_c w[c] (lse - x[c]), lse the row's
// log-sum-exp, t = target (PyTorch's loss against the smoothed target (1 - s) onehot + s / C);
// host, logits (classes) contiguous, classes >= 1, 0 <= target < classes. When grad is non-null,
// overwrites grad (classes) with scale * d(loss)/d(logits) =
// scale * (softmax * (w[t] (1 - s) + s W / C) - w[t] (1 - s) onehot(t) - s w / C), W = sum w.
// The log-sum-exp is shifted by the row maximum so that logits of +-1e4 neither overflow nor
// underflow to log(0), and lse - x[t] is formed as log(sum) - (x[t] - max) rather than
// (max + log(sum)) - x[t], which would cancel catastrophically when |max| is large.
template <typename T>
T cross_entropy_row(int64_t classes, const T* logits, int64_t target, const CeOptions<T>& o,
                    T scale, T* grad) {
    T max = logits[0];
    for (int64_t j = 1; j < classes; ++j) max = std::max(max, logits[j]);
    T sum = 0;
    if (grad) {
        // grad doubles as scratch for the shifted exponentials, so nothing is computed twice.
        for (int64_t j = 0; j < classes; ++j) {
            grad[j] = std::exp(logits[j] - max);
            sum += grad[j];
        }
    } else {
        for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits[j] - max);
    }
    const T log_sum = std::log(sum);
    const T target_weight = (T(1) - o.smoothing) * (o.weight ? o.weight[target] : T(1));
    T loss = target_weight * (log_sum - (logits[target] - max));
    const T spread = o.smoothing / static_cast<T>(classes);  // s / C
    if (o.smoothing != T(0)) {
        // sum_c w[c] (lse - x[c]) = W log(sum) - sum_c w[c] (x[c] - max): both terms >= 0.
        T shifted = 0;
        for (int64_t j = 0; j < classes; ++j)
            shifted += (o.weight ? o.weight[j] : T(1)) * (logits[j] - max);
        loss += spread * (o.weight_sum * log_sum - shifted);
    }
    if (grad) {
        const T mass = o.smoothing != T(0) ? target_weight + spread * o.weight_sum : target_weight;
        const T factor = scale * mass / sum;
        for (int64_t j = 0; j < classes; ++j) grad[j] *= factor;
        grad[target] -= scale * target_weight;
        if (o.smoothing != T(0)) {
            for (int64_t j = 0; j < classes; ++j)
                grad[j] -= scale * spread * (o.weight ? o.weight[j] : T(1));
        }
    }
    return loss;
}

// Rows of a time-major frame batch: row r = t * batch + n of logits (rows, classes), host,
// contiguous. A row counts when it is valid (lengths null or t < lengths[n]) and its target is
// not o.ignore_index; counted rows get losses[r] = their cross-entropy (when losses is non-null)
// and grad row = scale * its gradient (when grad is non-null); the other rows get exactly zero
// loss and zero gradient (the targets of invalid rows are never read). All outputs are
// overwritten. Returns the sum of the counted rows' losses in double, so that the total of many
// float rows keeps its digits until the caller's reduction. For plain (M, C) logits pass batch =
// rows and lengths = nullptr. Serial on purpose: the result is bit-identical run to run, and the
// LSTM, not this pass, dominates a training step.
template <typename T>
double cross_entropy_rows(int64_t rows, int64_t classes, int64_t batch, const int64_t* lengths,
                          const T* logits, const int64_t* targets, const CeOptions<T>& o, T scale,
                          T* losses, T* grad) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const bool counted =
            (lengths == nullptr || r / batch < lengths[r % batch]) && targets[r] != o.ignore_index;
        T* grad_row = grad ? grad + r * classes : nullptr;
        if (!counted) {
            if (losses) losses[r] = T(0);
            if (grad_row) std::fill(grad_row, grad_row + classes, T(0));
            continue;
        }
        const T loss =
            cross_entropy_row(classes, logits + r * classes, targets[r], o, scale, grad_row);
        if (losses) losses[r] = loss;
        total += static_cast<double>(loss);
    }
    return total;
}

}  // namespace lstm::kernels::cpu
