#pragma once

// Per-thread bodies of the CUDA CTC kernels (kernels/cuda/ctc.cu). LSTM_HOST_DEVICE and no CUDA
// header, so tests/cuda_loss_host_test.cpp runs the very same code over the same grid on the CPU
// and compares it with lstm/reference/ctc_reference.hpp. Semantics are lstm::loss::ctc_loss's
// (docs/ctc.md); the design is described there under "On the GPU". In short, three kernels:
//
//   1. log-softmax normalizers: one warp per valid frame (t, n), in double; for log-probs only
//      the check for NaN and +inf (such a frame makes its sample's loss and gradient NaN).
//   2. the recursions: grid (N, 2). Block (n, 0) runs alpha of sample n forward in time, block
//      (n, 1) runs beta backward, at the same time. Thread j owns the states s = j, j + threads,
//      ... of the extended label sequence (2 L + 1 states, any L: a thread takes as many states as
//      it needs), one frame per step, a barrier between steps. Each step reads only the previous
//      row, kept in a two-row ring (shared memory when it fits, else global scratch), and writes
//      the new row to the ring and to the sample's full table in global memory.
//   3. the gradient: one block per frame (t, n), from the two tables. Each class's posterior is a
//      sum over the label states of that class, added by one thread in label order (the labels
//      are pre-sorted by class on the host); the blank's is a fixed-tree block sum. No atomics.
//
// Everything is double, as on the CPU (kernels/cpu/ctc.hpp explains why float alpha/beta lose
// the posterior at long T).

#include <cstdint>

#include "kernels/cuda/loss_body.hpp"

namespace lstm::kernels::cuda {

// What the kernels know of sample n, computed on the host (kernels/cuda/ctc_layout.hpp).
struct CtcSample {
    int64_t state_offset;  // first element of the sample's (frames, states) rows in alpha and beta
    int64_t label_start;   // first label of the sample in the concatenated labels and order
    int32_t frames;        // input_lengths[n], 1..max_time
    int32_t labels;        // target_lengths[n], >= 0; the sample has 2 * labels + 1 states
    double scale;          // d(returned loss)/d(loss_n): 1, or PyTorch's mean factor
};

// Everything the kernels read and write; pointers are device memory (host memory in the CPU
// emulation). The host validated every label to lie in [0, classes) and differ from blank.
template <typename T>
struct CtcArgs {
    int64_t max_time = 0, batch = 0, classes = 0;
    const T* input = nullptr;  // (max_time, batch, classes) logits or log-probs
    bool logits = true;        // softmax over classes applied inside when true
    int64_t blank = 0;
    bool zero_infinity = false;
    const CtcSample* samples = nullptr;  // (batch)
    const int32_t* labels = nullptr;     // every sample's labels, concatenated
    // Per sample, its label indices 0..labels-1 sorted by (class, index): consecutive entries of
    // one class form the run whose occupations make up that class's posterior.
    const int32_t* order = nullptr;
    // (max_time, batch, 2): per frame the logits' max and log(sum e^(x - max)), the log-softmax
    // being (x - max) - log_sum (kept apart: max + log_sum rounds to max near |max| ~ 1e38); for
    // log-probs max(0, the frame's max) and 0: log-probs above 0 are shifted down to 0 so that a
    // run of huge ones cannot overflow alpha to +inf (which a -inf would turn into NaN), and
    // ctc_alpha_finish adds the shifts back. NaN first where the frame has no distribution.
    double* log_norm = nullptr;
    double* alpha = nullptr;  // per sample (frames, states) at state_offset: log alpha
    double* beta = nullptr;   // same layout: log beta without the frame's own emission
    // (batch, 2 directions, 2 rows, max_states): the rings of the recursion when they do not fit
    // in shared memory (see ctc_ring_in_shared).
    double* ring = nullptr;
    int64_t max_states = 0;  // 2 * (largest target length) + 1
    // (batch) log p(labels | input) less the sample's log-prob shifts (what the occupations
    // need), -inf when the loss is infinite, NaN when the input is poisoned.
    double* loglik = nullptr;
    double* losses = nullptr;  // (batch) per-sample losses as returned (zero_infinity applied)
    T* losses_out = nullptr;   // (batch) optional: the caller's per-sample losses
    T* grad = nullptr;         // (max_time, batch, classes) optional: overwritten
};

// ---------------------------------------------------------------------------------------------
// 1. Log-softmax normalizers: one warp per frame, lane l over classes l, l + 32, ...
// ---------------------------------------------------------------------------------------------

// Whether frame (t, n) = frame index t * batch + n is read by anything (t < input_lengths[n]).
template <typename T>
LSTM_HOST_DEVICE bool ctc_frame_valid(const CtcArgs<T>& a, int64_t frame) {
    return frame / a.batch < a.samples[frame % a.batch].frames;
}

// This lane's maximum input of the frame in double (-inf when it has no class), or +inf when one
// of its inputs is NaN or +inf (a maximum would drop a NaN: the comparison is false).
template <typename T>
LSTM_HOST_DEVICE double ctc_norm_lane_max(const CtcArgs<T>& a, int64_t frame, int lane) {
    const T* x = a.input + frame * a.classes;
    double max = kLossNegInf;
    for (int64_t c = lane; c < a.classes; c += kWarpLanes) {
        const double v = static_cast<double>(x[c]);
        max = v < -kLossNegInf ? loss_max(max, v) : -kLossNegInf;
        if (!(max < -kLossNegInf)) break;
    }
    return max;
}

// This lane's sum of e^(x - max) in class order, in double.
template <typename T>
LSTM_HOST_DEVICE double ctc_norm_lane_sum(const CtcArgs<T>& a, int64_t frame, int lane,
                                          double max) {
    const T* x = a.input + frame * a.classes;
    double sum = 0.0;
    for (int64_t c = lane; c < a.classes; c += kWarpLanes)
        sum += exp(static_cast<double>(x[c]) - max);
    return sum;
}

// Lane 0 stores the frame's max and log(sum) (the warp's) for logits, zeros for log-probs, and
// NaN first for a frame without a defined distribution: an input NaN or +inf, or logits all
// -inf. ctc_sample_poisoned reads the NaN.
template <typename T>
LSTM_HOST_DEVICE void ctc_norm_store(const CtcArgs<T>& a, int64_t frame, int lane, double max,
                                     double sum) {
    if (lane != 0) return;
    const bool defined = max < -kLossNegInf && (!a.logits || max > kLossNegInf);
    a.log_norm[2 * frame] = !defined ? kLossNaN : a.logits ? max : max > 0.0 ? max : 0.0;
    a.log_norm[2 * frame + 1] = defined && a.logits ? log(sum) : 0.0;
}

// The log-softmax of input x of frame `frame` (logits; see CtcArgs::log_norm).
template <typename T>
LSTM_HOST_DEVICE double ctc_log_softmax(const CtcArgs<T>& a, int64_t frame, double x) {
    return (x - a.log_norm[2 * frame]) - a.log_norm[2 * frame + 1];
}

// Whether a valid frame of sample n has no defined distribution (log_norm holds NaN there).
template <typename T>
LSTM_HOST_DEVICE bool ctc_sample_poisoned(const CtcArgs<T>& a, int64_t n) {
    const int64_t frames = a.samples[n].frames;
    for (int64_t t = 0; t < frames; ++t) {
        const double norm = a.log_norm[2 * (t * a.batch + n)];
        if (!(norm == norm)) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// 2. Recursions
// ---------------------------------------------------------------------------------------------

// log(e^a + e^b + e^c) with -inf meaning probability 0; -inf when all three are (never
// -inf - -inf). The two exps are independent, so they overlap, and the serial chain per step is
// one exp and one log.
LSTM_HOST_DEVICE double log_sum_exp3(double a, double b, double c) {
    const double m = loss_max(a, loss_max(b, c));
    if (m == kLossNegInf) return kLossNegInf;
    return m + log(exp(a - m) + exp(b - m) + exp(c - m));
}

// The class that state s of the extended label sequence (blank, l1, blank, ..., lL, blank) emits.
template <typename T>
LSTM_HOST_DEVICE int64_t ctc_state_class(const CtcArgs<T>& a, const CtcSample& sample, int64_t s) {
    return (s & 1) ? a.labels[sample.label_start + (s >> 1)] : a.blank;
}

// Whether label state s may be entered from state s - 2 (the blank between two different labels
// may be skipped).
template <typename T>
LSTM_HOST_DEVICE bool ctc_can_skip(const CtcArgs<T>& a, const CtcSample& sample, int64_t s) {
    if (!(s & 1) || s < 3) return false;
    const int32_t* l = a.labels + sample.label_start;
    return l[s >> 1] != l[(s >> 1) - 1];
}

// log p(class of state s at frame t) of sample n in double: the log-softmax for logits, the
// input as given for log-probs (-inf allowed) less the frame's shift (see CtcArgs::log_norm).
template <typename T>
LSTM_HOST_DEVICE double ctc_emission(const CtcArgs<T>& a, const CtcSample& sample, int64_t n,
                                     int64_t t, int64_t s) {
    const int64_t frame = t * a.batch + n;
    const double x =
        static_cast<double>(a.input[frame * a.classes + ctc_state_class(a, sample, s)]);
    return a.logits ? ctc_log_softmax(a, frame, x) : x - a.log_norm[2 * frame];
}

// The frame a direction's step works on: alpha goes 0, 1, ..., beta frames - 1, ..., 0.
LSTM_HOST_DEVICE int64_t ctc_step_frame(int64_t frames, bool backward, int64_t step) {
    return backward ? frames - 1 - step : step;
}

// The emission the thread's first state (s = thread) needs at `step`, or 0 when there is no such
// state or step. The kernel loads it one step ahead and carries it across the barrier, so the
// load's latency does not add to the serial chain of steps.
template <typename T>
LSTM_HOST_DEVICE double ctc_first_emission(const CtcArgs<T>& a, int64_t n, bool backward,
                                           int64_t step, int64_t thread) {
    const CtcSample sample = a.samples[n];
    if (step >= sample.frames || thread >= 2 * int64_t{sample.labels} + 1) return 0.0;
    return ctc_emission(a, sample, n, ctc_step_frame(sample.frames, backward, step), thread);
}

// One thread's share of one step of one direction for sample n: states s = thread,
// thread + threads, ... . ring (2, states) holds the previous step's row in row (step + 1) & 1,
// this step's goes to row step & 1.
//   alpha (forward): alpha_t(s) = e_t(s) + lse(alpha_{t-1}(s), alpha_{t-1}(s-1),
//                    alpha_{t-1}(s-2) if skippable); ring and table hold alpha.
//   beta (backward): b_t(s) = lse(B_{t+1}(s), B_{t+1}(s+1), B_{t+1}(s+2) if skippable), without
//                    frame t's emission (so alpha + b - loglik is the log occupation and no -inf
//                    emission is ever subtracted); the table holds b, the ring B_t = e_t + b_t.
// first_emission is ctc_first_emission(a, n, backward, step, thread). Steps run 0..frames-1.
template <typename T>
LSTM_HOST_DEVICE void ctc_recursion_step(const CtcArgs<T>& a, int64_t n, bool backward,
                                         int64_t step, int64_t thread, int64_t threads,
                                         double* ring, double first_emission) {
    const CtcSample sample = a.samples[n];
    const int64_t states = 2 * int64_t{sample.labels} + 1;
    const int64_t t = ctc_step_frame(sample.frames, backward, step);
    double* cur = ring + (step & 1) * states;
    const double* prev = ring + ((step + 1) & 1) * states;
    double* table = (backward ? a.beta : a.alpha) + sample.state_offset + t * states;
    for (int64_t s = thread; s < states; s += threads) {
        const double e = s == thread ? first_emission : ctc_emission(a, sample, n, t, s);
        if (!backward) {
            double v;
            if (step == 0) {
                v = s <= 1 ? e : kLossNegInf;
            } else {
                const double from_skip = ctc_can_skip(a, sample, s) ? prev[s - 2] : kLossNegInf;
                // -inf + e stays -inf for any e in [-inf, +inf).
                v = log_sum_exp3(prev[s], s >= 1 ? prev[s - 1] : kLossNegInf, from_skip) + e;
            }
            cur[s] = v;
            table[s] = v;
        } else {
            double b;
            if (step == 0) {
                b = s >= states - 2 ? 0.0 : kLossNegInf;
            } else {
                const double next = s + 1 < states ? prev[s + 1] : kLossNegInf;
                const double skip =
                    s + 2 < states && ctc_can_skip(a, sample, s + 2) ? prev[s + 2] : kLossNegInf;
                b = log_sum_exp3(prev[s], next, skip);
            }
            table[s] = b;
            cur[s] = b + e;
        }
    }
}

// After the last alpha step (and a barrier), thread 0 of the alpha block: the log-likelihood
// from the last row, the per-sample loss (+inf when infeasible, -inf when log-probs far above 0
// give a likelihood beyond the double range, 0 instead of either under zero_infinity; NaN, never
// hidden, when the sample's input is poisoned).
template <typename T>
LSTM_HOST_DEVICE void ctc_alpha_finish(const CtcArgs<T>& a, int64_t n) {
    const CtcSample sample = a.samples[n];
    const int64_t states = 2 * int64_t{sample.labels} + 1;
    const double* last = a.alpha + sample.state_offset + (sample.frames - 1) * states;
    const double shifted = ctc_sample_poisoned(a, n) ? kLossNaN
                           : states == 1
                               ? last[0]
                               : log_sum_exp3(last[states - 1], last[states - 2], kLossNegInf);
    double shift = 0.0;
    if (!a.logits)
        for (int64_t t = 0; t < sample.frames; ++t) shift += a.log_norm[2 * (t * a.batch + n)];
    // A zero probability stays -inf whatever the shifts.
    const double loglik = shifted == kLossNegInf ? kLossNegInf : shifted + shift;
    const bool infinite = loglik == kLossNegInf || loglik == -kLossNegInf;
    const double loss = infinite && a.zero_infinity ? 0.0 : -loglik;
    // An infinite loss gets a zero gradient: -inf marks the sample dead for phase 3.
    a.loglik[n] = infinite ? kLossNegInf : shifted;
    a.losses[n] = loss;
    if (a.losses_out) a.losses_out[n] = static_cast<T>(loss);
}

// ---------------------------------------------------------------------------------------------
// 3. Gradient: one block of `threads` (a power of two) threads per frame (t, n)
// ---------------------------------------------------------------------------------------------

template <typename T>
LSTM_HOST_DEVICE bool ctc_grad_live(const CtcArgs<T>& a, int64_t frame) {
    return ctc_frame_valid(a, frame) && a.loglik[frame % a.batch] > kLossNegInf;
}

// The gradient of a frame that is not live: NaN on the valid frames of a poisoned sample (its
// loglik is NaN), exact zero on padded frames and for infeasible samples.
template <typename T>
LSTM_HOST_DEVICE T ctc_grad_dead_value(const CtcArgs<T>& a, int64_t frame) {
    const double loglik = a.loglik[frame % a.batch];
    return ctc_frame_valid(a, frame) && !(loglik == loglik) ? static_cast<T>(kLossNaN) : T(0);
}

// Occupation probability of state s at frame t: e^(alpha + b - loglik), at most 1. The exponent
// is <= 0 but for rounding, which for inputs near 1e30 (double) cancels to large positive values
// (inf, or entries like -4.5e57 in the CPU kernel before it clamped too); NaN passes through.
template <typename T>
LSTM_HOST_DEVICE double ctc_occupation(const CtcArgs<T>& a, const CtcSample& sample, int64_t t,
                                       int64_t s, double loglik) {
    const int64_t at = sample.state_offset + t * (2 * int64_t{sample.labels} + 1) + s;
    const double log_occupation = a.alpha[at] + a.beta[at] - loglik;
    return exp(log_occupation > 0.0 ? 0.0 : log_occupation);
}

// Gradient element of class c given its posterior: scale * (softmax - posterior) for logits,
// scale * (-posterior) for log-probs.
template <typename T>
LSTM_HOST_DEVICE T ctc_grad_value(const CtcArgs<T>& a, int64_t frame, double scale, int64_t c,
                                  double posterior) {
    if (!a.logits) return static_cast<T>(-scale * posterior);
    const double x = static_cast<double>(a.input[frame * a.classes + c]);
    return static_cast<T>(scale * (exp(ctc_log_softmax(a, frame, x)) - posterior));
}

// Phase 1, thread j: writes every class's gradient as if its posterior were 0 (the label classes
// and the blank are overwritten in phase 3, after a barrier), ctc_grad_dead_value on frames that
// are not live; leaves the thread's share of the blank posterior (blank states j, j +
// threads, ... in order) in partial[j].
template <typename T>
LSTM_HOST_DEVICE void ctc_grad_base(const CtcArgs<T>& a, int64_t frame, int64_t thread,
                                    int64_t threads, double* partial) {
    T* g = a.grad + frame * a.classes;
    partial[thread] = 0.0;
    if (!ctc_grad_live(a, frame)) {
        const T dead = ctc_grad_dead_value(a, frame);
        for (int64_t c = thread; c < a.classes; c += threads) g[c] = dead;
        return;
    }
    const int64_t n = frame % a.batch, t = frame / a.batch;
    const CtcSample sample = a.samples[n];
    const double loglik = a.loglik[n];
    for (int64_t c = thread; c < a.classes; c += threads)
        g[c] = ctc_grad_value(a, frame, sample.scale, c, 0.0);
    double sum = 0.0;
    for (int64_t k = thread; k <= sample.labels; k += threads)
        sum += ctc_occupation(a, sample, t, 2 * k, loglik);
    partial[thread] = sum;
}

// Phase 3 (after the tree sum of partial), thread j: thread 0 writes the blank's gradient; the
// thread at the start of each run of equal classes in the sorted label order sums the run's
// occupations in label order and writes that class's gradient. Each class is written by exactly
// one thread, and no sum depends on timing.
template <typename T>
LSTM_HOST_DEVICE void ctc_grad_labels(const CtcArgs<T>& a, int64_t frame, int64_t thread,
                                      int64_t threads, const double* partial) {
    if (!ctc_grad_live(a, frame)) return;
    const int64_t n = frame % a.batch, t = frame / a.batch;
    const CtcSample sample = a.samples[n];
    const double loglik = a.loglik[n];
    T* g = a.grad + frame * a.classes;
    if (thread == 0) g[a.blank] = ctc_grad_value(a, frame, sample.scale, a.blank, partial[0]);
    const int32_t* labels = a.labels + sample.label_start;
    const int32_t* order = a.order + sample.label_start;
    for (int64_t i = thread; i < sample.labels; i += threads) {
        const int32_t c = labels[order[i]];
        if (i > 0 && labels[order[i - 1]] == c) continue;  // not the first of its run
        double posterior = 0.0;
        for (int64_t j = i; j < sample.labels && labels[order[j]] == c; ++j)
            posterior += ctc_occupation(a, sample, t, 2 * int64_t{order[j]} + 1, loglik);
        g[c] = ctc_grad_value(a, frame, sample.scale, c, posterior);
    }
}

// ---------------------------------------------------------------------------------------------
// cuDNN fast path: turning cuDNN's results into ctc_loss's
// ---------------------------------------------------------------------------------------------

// Sample n after cuDNN (float, logits) and the normalizer kernel's check: NaN for a poisoned
// sample, else its cost as the per-sample loss (+inf when not finite, then 0 under
// zero_infinity), in losses, losses_out and loglik.
template <typename T>
LSTM_HOST_DEVICE void ctc_cudnn_finish_sample(const CtcArgs<T>& a, const float* costs, int64_t n) {
    const double cost = static_cast<double>(costs[n]);
    if (ctc_sample_poisoned(a, n)) {
        a.loglik[n] = a.losses[n] = kLossNaN;
        if (a.losses_out) a.losses_out[n] = static_cast<T>(kLossNaN);
        return;
    }
    // Clean input: a cost that is not finite (NaN compares false) means infeasible.
    const bool finite = cost < -kLossNegInf && cost > kLossNegInf;
    a.loglik[n] = finite ? -cost : kLossNegInf;
    const double loss = finite ? cost : (a.zero_infinity ? 0.0 : -kLossNegInf);
    a.losses[n] = loss;
    if (a.losses_out) a.losses_out[n] = static_cast<T>(loss);
}

// Gradient element `index` of (max_time, batch, classes) after cuDNN wrote softmax - posterior:
// times the sample's scale, ctc_grad_dead_value on frames that are not live.
template <typename T>
LSTM_HOST_DEVICE void ctc_cudnn_scale_grad(const CtcArgs<T>& a, int64_t index) {
    const int64_t frame = index / a.classes;
    a.grad[index] =
        ctc_grad_live(a, frame)
            ? static_cast<T>(a.samples[frame % a.batch].scale * static_cast<double>(a.grad[index]))
            : ctc_grad_dead_value(a, frame);
}

}  // namespace lstm::kernels::cuda
