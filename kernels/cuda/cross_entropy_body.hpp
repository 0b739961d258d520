#pragma once

// Per-lane bodies of the CUDA softmax cross-entropy (kernels/cuda/cross_entropy.cu): one warp per
// row of logits, lane l handling classes l, l + 32, ...; the warp combines lane values with a
// butterfly (every lane ends with the same value, and a + b == b + a exactly, so the result does
// not depend on timing). Raw math on pointers, LSTM_HOST_DEVICE, no CUDA header:
// tests/cuda_loss_host_test.cpp runs these bodies over the same grid on the CPU.
//
// The arithmetic mirrors kernels/cpu/cross_entropy.hpp: a row maximum, sum of e^(x - max) in the
// compute type T, loss = log(sum) - (x[target] - max), gradient = e^(x - max) * (scale / sum) minus
// scale at the target. Only the order of the sum differs (per lane, then the butterfly).

#include <cstdint>

#include "kernels/cuda/loss_body.hpp"

namespace lstm::kernels::cuda {

// Everything the CE kernels read and write. Device pointers; the host validated every target of a
// valid row to lie in [0, classes).
template <typename T>
struct CeArgs {
    int64_t rows = 0, classes = 0;
    // Rows are frames t * batch + n of a time-major batch; row r is valid when lengths is null or
    // r / batch < lengths[r % batch]. Plain (M, C) logits: batch = rows, lengths = null.
    int64_t batch = 1;
    const int32_t* lengths = nullptr;  // (batch) or null
    const T* logits = nullptr;         // (rows, classes) row-major
    const int32_t* targets = nullptr;  // (rows); read for valid rows only
    T scale = T(1);                    // d(returned loss)/d(each counted loss)
    T* losses = nullptr;               // (rows) optional: overwritten, 0 for invalid rows
    T* grad = nullptr;                 // (rows, classes) optional: overwritten, 0 for invalid rows
    double* row_loss = nullptr;        // (rows) scratch: each row's loss in double, 0 when invalid
    double* total = nullptr;           // (1) scratch: the sum of row_loss in a fixed order
};

template <typename T>
LSTM_HOST_DEVICE bool ce_row_valid(const CeArgs<T>& a, int64_t row) {
    return a.lengths == nullptr || row / a.batch < a.lengths[row % a.batch];
}

// This lane's maximum over its classes (the row's first logit when it has none: classes < 32).
template <typename T>
LSTM_HOST_DEVICE T ce_lane_max(const CeArgs<T>& a, int64_t row, int lane) {
    const T* x = a.logits + row * a.classes;
    T max = x[0];
    for (int64_t c = lane; c < a.classes; c += kWarpLanes) max = loss_max(max, x[c]);
    return max;
}

// This lane's sum of e^(x - max) over its classes, in class order.
template <typename T>
LSTM_HOST_DEVICE T ce_lane_sum(const CeArgs<T>& a, int64_t row, int lane, T max) {
    const T* x = a.logits + row * a.classes;
    T sum = T(0);
    for (int64_t c = lane; c < a.classes; c += kWarpLanes) sum += loss_exp(x[c] - max);
    return sum;
}

// With the warp's max and sum: lane 0 writes the row's loss (losses, row_loss), every lane its
// classes' gradient. Invalid rows (max and sum unused) get exact zeros.
template <typename T>
LSTM_HOST_DEVICE void ce_lane_finish(const CeArgs<T>& a, int64_t row, int lane, T max, T sum) {
    const bool valid = ce_row_valid(a, row);
    T* g = a.grad ? a.grad + row * a.classes : nullptr;
    if (!valid) {
        if (lane == 0) {
            a.row_loss[row] = 0.0;
            if (a.losses) a.losses[row] = T(0);
        }
        if (g)
            for (int64_t c = lane; c < a.classes; c += kWarpLanes) g[c] = T(0);
        return;
    }
    const T* x = a.logits + row * a.classes;
    const int64_t target = a.targets[row];
    if (lane == 0) {
        // log(sum) - (x[target] - max), not (max + log(sum)) - x[target], which cancels
        // catastrophically for logits of large magnitude (as on the CPU).
        const T loss = loss_log(sum) - (x[target] - max);
        a.row_loss[row] = static_cast<double>(loss);
        if (a.losses) a.losses[row] = loss;
    }
    if (!g) return;
    const T factor = a.scale / sum;
    for (int64_t c = lane; c < a.classes; c += kWarpLanes) {
        T v = loss_exp(x[c] - max) * factor;
        if (c == target) v -= a.scale;
        g[c] = v;
    }
}

// The loss sum: thread j of `threads` (a power of two) sums row_loss[j], row_loss[j + threads],
// ... in index order into partial[j]; tree_sum_step then combines the partials.
template <typename T>
LSTM_HOST_DEVICE void ce_total_partial(const CeArgs<T>& a, int64_t thread, int64_t threads,
                                       double* partial) {
    double sum = 0.0;
    for (int64_t r = thread; r < a.rows; r += threads) sum += a.row_loss[r];
    partial[thread] = sum;
}

}  // namespace lstm::kernels::cuda
