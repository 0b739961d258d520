#pragma once

// Softmax cross-entropy on raw host pointers: loss and its gradient with respect to the logits,
// fused so that the exponentials are computed once. Raw math only: nothing from lstm/ is
// included, targets are assumed in range (the caller validates), nothing throws.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lstm::kernels::cpu {

// One row: returns logsumexp(logits) - logits[target]; host, logits (classes) contiguous,
// classes >= 1, 0 <= target < classes. When grad is non-null, overwrites grad (classes) with
// scale * (softmax(logits) - onehot(target)).
// The log-sum-exp is shifted by the row maximum so that logits of +-1e4 neither overflow nor
// underflow to log(0), and the loss is formed as log(sum) - (logit[target] - max) rather than
// (max + log(sum)) - logit[target], which would cancel catastrophically when |max| is large.
template <typename T>
T cross_entropy_row(int64_t classes, const T* logits, int64_t target, T scale, T* grad) {
    T max = logits[0];
    for (int64_t j = 1; j < classes; ++j) max = std::max(max, logits[j]);
    T sum = 0;
    if (grad) {
        // grad doubles as scratch for the shifted exponentials, so nothing is computed twice.
        for (int64_t j = 0; j < classes; ++j) {
            grad[j] = std::exp(logits[j] - max);
            sum += grad[j];
        }
        const T factor = scale / sum;
        for (int64_t j = 0; j < classes; ++j) grad[j] *= factor;
        grad[target] -= scale;
    } else {
        for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits[j] - max);
    }
    return std::log(sum) - (logits[target] - max);
}

// Rows of a time-major frame batch: row r = t * batch + n of logits (rows, classes), host,
// contiguous. A row is valid when lengths is null or t < lengths[n]; valid rows get
// losses[r] = their cross-entropy (when losses is non-null) and
// grad row = scale * (softmax - onehot(targets[r])) (when grad is non-null); invalid rows get
// exactly zero loss and zero gradient and their targets are never read. All outputs are
// overwritten. Returns the sum of the valid rows' losses in double, so that the total of many
// float rows keeps its digits until the caller's reduction. For plain (M, C) logits pass batch =
// rows and lengths = nullptr. Serial on purpose: the result is bit-identical run to run, and the
// LSTM, not this pass, dominates a training step.
template <typename T>
double cross_entropy_rows(int64_t rows, int64_t classes, int64_t batch, const int64_t* lengths,
                          const T* logits, const int64_t* targets, T scale, T* losses, T* grad) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const bool valid = lengths == nullptr || r / batch < lengths[r % batch];
        T* grad_row = grad ? grad + r * classes : nullptr;
        if (!valid) {
            if (losses) losses[r] = T(0);
            if (grad_row) std::fill(grad_row, grad_row + classes, T(0));
            continue;
        }
        const T loss =
            cross_entropy_row(classes, logits + r * classes, targets[r], scale, grad_row);
        if (losses) losses[r] = loss;
        total += static_cast<double>(loss);
    }
    return total;
}

}  // namespace lstm::kernels::cpu
