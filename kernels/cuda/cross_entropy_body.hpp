#pragma once

// Per-lane bodies of the CUDA softmax cross-entropy (kernels/cuda/cross_entropy.cu): one warp per
// row of logits, lane l handling classes l, l + 32, ...; the warp combines lane values with a
// butterfly (every lane ends with the same value, and a + b == b + a exactly, so the result does
// not depend on timing). Raw math on pointers, LSTM_HOST_DEVICE, no CUDA header:
// tests/cuda_loss_host_test.cpp runs these bodies over the same grid on the CPU.
//
// The arithmetic mirrors kernels/cpu/cross_entropy.hpp: a row maximum, sum of e^(x - max) in the
// compute type T, loss = w[t] (1 - s) (log(sum) - (x[t] - max)) plus, with label smoothing s,
// (s / C) (W log(sum) - sum_c w[c] (x[c] - max)); gradient = e^(x - max) * (scale * mass / sum)
// minus scale * w[t] (1 - s) at the target and scale * s w[c] / C everywhere. Only the order of
// the sums differs (per lane, then the butterfly).

#include <cstdint>

#include "kernels/cuda/loss_body.hpp"

namespace lstm::kernels::cuda {

// The target the host uploads for a row whose target is ignore_index: it counts for nothing.
constexpr int32_t kCeIgnored = -1;

// Everything the CE kernels read and write. Device pointers; the host validated every target of a
// valid row to lie in [0, classes) or replaced it by kCeIgnored.
template <typename T>
struct CeArgs {
    int64_t rows = 0, classes = 0;
    // Rows are frames t * batch + n of a time-major batch; row r is valid when lengths is null or
    // r / batch < lengths[r % batch]. Plain (M, C) logits: batch = rows, lengths = null.
    int64_t batch = 1;
    const int32_t* lengths = nullptr;  // (batch) or null
    const T* logits = nullptr;         // (rows, classes) row-major
    const int32_t* targets = nullptr;  // (rows); read for valid rows only, kCeIgnored or in range
    const T* weight = nullptr;         // (classes) or null for every class weighing 1
    T weight_sum = T(0);               // sum of weight (classes when null)
    T smoothing = T(0);                // label smoothing s in [0, 1]
    T scale = T(1);                    // d(returned loss)/d(each counted loss)
    T* losses = nullptr;               // (rows) optional: overwritten, 0 for rows not counted
    T* grad = nullptr;           // (rows, classes) optional: overwritten, 0 for rows not counted
    double* row_loss = nullptr;  // (rows) scratch: each row's loss in double, 0 when not counted
    double* total = nullptr;     // (1) scratch: the sum of row_loss in a fixed order
};

// A row counts when it is valid and its target is not ignored.
template <typename T>
LSTM_HOST_DEVICE bool ce_row_counted(const CeArgs<T>& a, int64_t row) {
    const bool valid = a.lengths == nullptr || row / a.batch < a.lengths[row % a.batch];
    return valid && a.targets[row] != kCeIgnored;
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

// This lane's sum of w[c] (x[c] - max) over its classes (w = 1 without weights), in class order:
// the label-smoothing term's part (its kernel computes it only when smoothing != 0).
template <typename T>
LSTM_HOST_DEVICE T ce_lane_shifted(const CeArgs<T>& a, int64_t row, int lane, T max) {
    const T* x = a.logits + row * a.classes;
    T sum = T(0);
    for (int64_t c = lane; c < a.classes; c += kWarpLanes)
        sum += (a.weight ? a.weight[c] : T(1)) * (x[c] - max);
    return sum;
}

// With the warp's max, sum and (with smoothing) shifted sum: lane 0 writes the row's loss
// (losses, row_loss), every lane its classes' gradient. Rows not counted (max, sum and shifted
// unused) get exact zeros.
template <typename T>
LSTM_HOST_DEVICE void ce_lane_finish(const CeArgs<T>& a, int64_t row, int lane, T max, T sum,
                                     T shifted) {
    T* g = a.grad ? a.grad + row * a.classes : nullptr;
    if (!ce_row_counted(a, row)) {
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
    const T target_weight = (T(1) - a.smoothing) * (a.weight ? a.weight[target] : T(1));
    const T spread = a.smoothing / static_cast<T>(a.classes);  // s / C
    if (lane == 0) {
        // log(sum) - (x[target] - max), not (max + log(sum)) - x[target], which cancels
        // catastrophically for logits of large magnitude (as on the CPU).
        const T log_sum = loss_log(sum);
        T loss = target_weight * (log_sum - (x[target] - max));
        if (a.smoothing != T(0)) loss += spread * (a.weight_sum * log_sum - shifted);
        a.row_loss[row] = static_cast<double>(loss);
        if (a.losses) a.losses[row] = loss;
    }
    if (!g) return;
    const T mass = a.smoothing != T(0) ? target_weight + spread * a.weight_sum : target_weight;
    const T factor = a.scale * mass / sum;
    for (int64_t c = lane; c < a.classes; c += kWarpLanes) {
        T v = loss_exp(x[c] - max) * factor;
        if (c == target) v -= a.scale * target_weight;
        if (a.smoothing != T(0)) v -= a.scale * spread * (a.weight ? a.weight[c] : T(1));
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
