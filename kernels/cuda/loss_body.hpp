#pragma once

// Pieces shared by the per-thread bodies of the CUDA loss kernels (kernels/cuda/cross_entropy.cu,
// kernels/cuda/ctc.cu): fixed-order reductions and overloads that pick the float or double math
// function. LSTM_HOST_DEVICE and no CUDA header, so the CPU tests run the very same code.
//
// Determinism: every reduction here has a shape that depends only on sizes (strided partial sums
// in index order, then a binary tree over the threads), never on timing, and no atomics are used
// anywhere in the loss kernels; results are bit-identical run to run.

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/gates.hpp"  // LSTM_HOST_DEVICE

namespace lstm::kernels::cuda {

// Double -inf: impossible CTC states. Device code reads it as a compile-time constant.
constexpr double kLossNegInf = -std::numeric_limits<double>::infinity();
// NaN: a CTC sample whose input has no defined distribution (NaN or +inf).
constexpr double kLossNaN = std::numeric_limits<double>::quiet_NaN();

// Lanes of a warp: the CE row kernel and the CTC normalizer work one warp per row.
constexpr int kWarpLanes = 32;

// Precision-matched math for the cross-entropy's compute type (the CPU path uses std::exp(T)).
LSTM_HOST_DEVICE float loss_exp(float x) { return expf(x); }
LSTM_HOST_DEVICE double loss_exp(double x) { return exp(x); }
LSTM_HOST_DEVICE float loss_log(float x) { return logf(x); }
LSTM_HOST_DEVICE double loss_log(double x) { return log(x); }
template <typename T>
LSTM_HOST_DEVICE T loss_max(T a, T b) {
    return a > b ? a : b;
}

// One level of the fixed binary tree that sums `threads` (a power of two) partials: thread j
// adds partial[j + stride] into partial[j] for j < stride. Run with stride = threads / 2, ..., 1
// and a barrier after each level; partial[0] is then the sum, always in the same order.
LSTM_HOST_DEVICE void tree_sum_step(double* partial, int64_t thread, int64_t stride) {
    if (thread < stride) partial[thread] += partial[thread + stride];
}

}  // namespace lstm::kernels::cuda
