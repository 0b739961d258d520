#pragma once

// CTC loss and its gradient on raw host pointers: log-space alpha/beta in double, OpenMP over the
// batch. Raw math only: nothing from lstm/ is included, the caller validates every index and
// length, nothing throws or prints.
//
// Why double inside even for float inputs: log alpha grows like T * log C (about 2e4 at
// T = 5000), where a float's spacing is about 2e-3, so a float recursion loses the posterior
// exp(alpha + beta - loglik) to rounding (PyTorch's float CTC is off by percent there). Doing
// alpha, beta, the log-softmax and the posterior sums in double leaves the final rounding to T as
// the only float error.
//
// Why the hand-written exp/log1p below: every state needs an exp and a log1p per frame and pass,
// and std::exp/std::log1p are opaque calls that stop vectorization. The versions here are
// branch-free polynomials accurate to about 4e-16 over the ranges they are used on, and map -inf
// to an exact 0, so the compiler turns each state loop into SIMD code.
//
// Layout: all tensors are host memory; the input and the gradient are time-major
// (max_time, batch, classes), so one sample's frames are batch * classes elements apart.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#ifdef _OPENMP
#include <omp.h>
#endif

// Vectorize the state loops eight doubles wide: one AVX-512 register, or two AVX2 registers
// (GCC's default tuning would pick four lanes even where AVX-512 exists, 20% slower here).
#ifdef _OPENMP
#define LSTM_CTC_SIMD _Pragma("omp simd simdlen(8)")
#else
#define LSTM_CTC_SIMD
#endif

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "kernels/cpu/ctc.hpp represents impossible paths by -inf; do not build with -ffast-math"
#endif

namespace lstm::kernels::cpu {

namespace ctc_detail {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

inline double from_bits(uint64_t bits) {
    double out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

inline uint64_t to_bits(double value) {
    uint64_t out;
    std::memcpy(&out, &value, sizeof out);
    return out;
}

// a * b + c, fused when the target has FMA (std::fma without hardware support is a slow libm
// call, and ISO mode does not contract a * b + c by itself).
inline double madd(double a, double b, double c) {
#ifdef __FMA__
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

// Frames of one sample are batch * classes elements apart, further than the hardware prefetcher
// follows (it stops at page boundaries), so every frame would be a demand miss: touch the lines
// of a frame a few frames ahead. `write` asks for the line in a writable state (gradient rows).
template <typename T>
inline void prefetch_row(const T* row, int64_t count, bool write) {
#if defined(__GNUC__) || defined(__clang__)
    const char* begin = reinterpret_cast<const char*>(row);
    const char* end = reinterpret_cast<const char*>(row + count);
    for (const char* line = begin; line < end; line += 64) {
        if (write)
            __builtin_prefetch(line, 1, 3);
        else
            __builtin_prefetch(line, 0, 3);
    }
#else
    (void)row, (void)count, (void)write;
#endif
}

// e^x for x <= 1 with relative error below 5e-16; exactly 0 for x <= -700 (also for -inf),
// which flushes only values below 1e-304. Callers pass differences to a maximum, so x <= ~0.
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 split so that n * ln2_hi is exact), n read from the low
// mantissa bits of x * log2(e) + 1.5 * 2^52 and added straight into the exponent field, e^r by a
// degree-10 polynomial: the Chebyshev fit of e^r on [-ln2/2, ln2/2] (mpmath.chebyfit, fit error
// 2.2e-16).
inline double exp_nonpositive(double x) {
    // Clamp at -700 and flag the flushed inputs on the bit pattern: as unsigned integers, every
    // positive double lies below bits(-700) and every negative one below it is larger, so
    // min(bits(x), bits(-700)) clamps, -inf included. Integer selects are what compilers
    // if-convert on any SIMD level; a floating-point `x > -700 ? x : -700` followed by the
    // multiplications below gets them distributed into its arms, which keeps SSE code scalar.
    const uint64_t low = to_bits(-700.0), bits = to_bits(x);
    const bool in_range = bits < low;
    const double clamped = from_bits(in_range ? bits : low);
    const double shifter = 6755399441055744.0;  // 1.5 * 2^52
    const double shifted = madd(clamped, 1.4426950408889634, shifter);
    const double n = shifted - shifter;
    const double r = madd(n, -1.42860682030941723212e-6, madd(n, -0.693145751953125, clamped));
    double p = 2.7626357241447223e-07;
    p = madd(p, r, 2.764018079620985e-06);
    p = madd(p, r, 2.4801504346997686e-05);
    p = madd(p, r, 0.00019841170270440067);
    p = madd(p, r, 0.0013888888932488599);
    p = madd(p, r, 0.008333333385667782);
    p = madd(p, r, 0.04166666666657314);
    p = madd(p, r, 0.16666666666554406);
    p = madd(p, r, 0.5000000000000006);
    p = madd(p, r, 1.0000000000000067);
    p = madd(p, r, 1.0);
    // n >= -1010 here: the biased exponent of p (1022 or 1023) plus n stays normal, and the
    // unsigned add wraps n's two's complement into the exponent field.
    const uint64_t scaled = to_bits(p) + (to_bits(shifted) << 52);
    // Zero below -700 by masking bits, not by `cond ? scaled : 0.0`: GCC does not if-convert a
    // select whose arm holds floating-point math (it might trap) unless AVX-512 masks it.
    return from_bits(scaled & (uint64_t{0} - static_cast<uint64_t>(in_range)));
}

// log(1 + u) for u in [0, 1], absolute error below 4e-16 and relative error below 1e-15 near 0.
// No range reduction and no division (a vector divide costs as much as ~16 FMAs): u * g(u) with g
// the degree-18 Chebyshev fit of log1p(u) / u on [0, 1] (mpmath.chebyfit, fit error 3.9e-16).
inline double log1p_unit(double u) {
    double p = 5.7257071651592704e-05;
    p = madd(p, u, -0.0006056331381238628);
    p = madd(p, u, 0.003032665275883164);
    p = madd(p, u, -0.009629407360351236);
    p = madd(p, u, 0.0219941389705604);
    p = madd(p, u, -0.03907726951573114);
    p = madd(p, u, 0.05742104178532733);
    p = madd(p, u, -0.07375189663045013);
    p = madd(p, u, 0.08713666158405099);
    p = madd(p, u, -0.0988285620764629);
    p = madd(p, u, 0.11082925631397271);
    p = madd(p, u, -0.12494859138938634);
    p = madd(p, u, 0.14285023617558082);
    p = madd(p, u, -0.16666600961412256);
    p = madd(p, u, 0.19999995817342595);
    p = madd(p, u, -0.24999999836556086);
    p = madd(p, u, 0.33333333329940107);
    p = madd(p, u, -0.49999999999971906);
    p = madd(p, u, 0.9999999999999996);
    return u * p;
}

// log(e^a + e^b) for a, b in [-inf, +inf): max + log(1 + e^(min - max)), one exp and one log.
// Never -inf - -inf: the exp's argument uses max(max, lowest), so both -inf gives -inf + 0. The
// result is >= max(a, b), which the label recursions rely on.
inline double log_add(double a, double b) {
    const double x = a > b ? a : b;
    const double y = a > b ? b : a;
    const double lowest = std::numeric_limits<double>::lowest();
    const double x_safe = x > lowest ? x : lowest;
    return x + log1p_unit(exp_nonpositive(y - x_safe));
}

// Doubles per row, padded to 8 (a cache line) so that every row starts aligned.
inline int64_t padded(int64_t count) { return (count + 7) / 8 * 8; }

// State rows (alpha, beta) keep blank states and label states apart: blank state 2k at [k]
// (k <= labels), then a -inf sentinel, then label state 2k + 1 at [label_offset + k] (k < labels),
// then room for one more entry at [label_offset + labels] used as an end sentinel. Separate arrays
// give the recursions contiguous, branch-free loops; the front sentinel is "label k - 1" for k = 0.
inline int64_t label_offset(int64_t labels) { return padded(labels + 1) + 1; }
inline int64_t state_row(int64_t labels) { return padded(labels + 1) + padded(labels + 2); }
// Emission rows: [0] the blank's log-prob, [1 + k] label k's, so both blank and label loops read
// contiguous memory.
inline int64_t emit_row(int64_t labels) { return padded(labels + 1); }

// The scratch of one sample in flight, sized for max_time frames, max_labels labels.
struct CtcSlot {
    double* alpha;      // (max_time, state_row) log alpha
    double* emit;       // (max_time, emit_row) log-probs of blank and labels per frame
    double* log_norm;   // (max_time) per frame log-sum-exp of the logits (0 for log-probs)
    double* beta;       // (2, state_row) log beta of frames t and t + 1, ping-pong
    double* next;       // (state_row) emission + beta of frame t + 1
    double* skip;       // (max_labels + 1) 0 where label k may follow label k - 1 directly, -inf
    double* frame;      // (classes) one frame of the input in double
    double* work;       // (max(classes, max_labels + 1)) exps of one frame
    double* posterior;  // (classes) occupation probability per class of one frame
};

// Hands out 64-byte aligned pieces of one buffer; with a null base it only counts, so sizing and
// carving are the same code.
class Carver {
public:
    explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
    template <typename T>
    T* take(int64_t count) {
        offset_ = (offset_ + 63) / 64 * 64;
        T* out = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
        offset_ += static_cast<size_t>(count) * sizeof(T);
        return out;
    }
    size_t bytes() const { return (offset_ + 63) / 64 * 64; }

private:
    char* base_;
    size_t offset_ = 0;
};

inline CtcSlot carve_slot(Carver& carver, int64_t max_time, int64_t classes, int64_t max_labels) {
    CtcSlot slot;
    slot.alpha = carver.take<double>(max_time * state_row(max_labels));
    slot.emit = carver.take<double>(max_time * emit_row(max_labels));
    slot.log_norm = carver.take<double>(max_time);
    slot.beta = carver.take<double>(2 * state_row(max_labels));
    slot.next = carver.take<double>(state_row(max_labels));
    slot.skip = carver.take<double>(max_labels + 1);
    slot.frame = carver.take<double>(classes);
    slot.work = carver.take<double>(std::max(classes, max_labels + 1));
    slot.posterior = carver.take<double>(classes);
    return slot;
}

// The part shared by all threads: per sample the losses, where its labels start, and the order
// in which samples are handed out.
struct CtcShared {
    double* losses;
    int64_t* label_start;
    int64_t* order;
};

inline CtcShared carve_shared(Carver& carver, int64_t batch) {
    CtcShared shared;
    shared.losses = carver.take<double>(batch);
    shared.label_start = carver.take<int64_t>(batch);
    shared.order = carver.take<int64_t>(batch);
    return shared;
}

inline size_t shared_bytes(int64_t batch) {
    Carver carver(nullptr);
    carve_shared(carver, batch);
    return carver.bytes();
}

inline size_t slot_bytes(int64_t max_time, int64_t classes, int64_t max_labels) {
    Carver carver(nullptr);
    carve_slot(carver, max_time, classes, max_labels);
    return carver.bytes();
}

}  // namespace ctc_detail

// Everything the kernel reads and writes. All pointers are host memory; the caller has checked
// that 1 <= input_lengths[n] <= max_time, target_lengths[n] >= 0, and that every label used is in
// [0, classes) and differs from blank.
template <typename T>
struct CtcProblem {
    int64_t max_time = 0, batch = 0, classes = 0;
    // (max_time, batch, classes) time-major, contiguous. Logits (softmax applied inside) when
    // `logits` is true, else log-probabilities used as given (-inf allowed, NaN/+inf not).
    const T* input = nullptr;
    bool logits = true;
    // Labels of sample n: targets[n * target_stride + i] (padded (batch, target_stride)), or with
    // target_stride 0 concatenated: targets[target_lengths[0] + ... + target_lengths[n-1] + i];
    // i < target_lengths[n] <= max_labels.
    const int64_t* targets = nullptr;
    int64_t target_stride = 0;
    const int64_t* input_lengths = nullptr;   // (batch)
    const int64_t* target_lengths = nullptr;  // (batch)
    int64_t max_labels = 0;
    int64_t blank = 0;
    bool zero_infinity = false;
    // d(returned loss)/d(loss_n) = grad_scale, divided by max(target_lengths[n], 1) when
    // divide_by_target_length (PyTorch's mean).
    double grad_scale = 1.0;
    bool divide_by_target_length = false;
    // (max_time, batch, classes), optional: overwritten; w.r.t. the input as given.
    T* grad = nullptr;
};

// Workspace for up to `slots` samples in flight at once (one per thread), each with up to
// max_time frames and max_labels labels; includes 64 bytes to align an arbitrary pointer.
inline size_t ctc_workspace_bytes(int64_t max_time, int64_t batch, int64_t classes,
                                  int64_t max_labels, int slots) {
    return 64 + ctc_detail::shared_bytes(batch) +
           static_cast<size_t>(std::max(slots, 1)) *
               ctc_detail::slot_bytes(max_time, classes, max_labels);
}

namespace ctc_detail {

// Sum of v[0..count) in a fixed order that does not depend on the thread or the vector width:
// eight interleaved partial sums (so the adds pipeline and vectorize instead of forming one long
// dependency chain), combined pairwise at the end.
inline double fixed_order_sum(const double* v, int64_t count) {
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        for (int j = 0; j < 8; ++j) lanes[j] += v[i + j];
    for (int j = 0; i < count; ++i, ++j) lanes[j] += v[i];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Converts one frame x (classes) to double into frame (classes, overwritten) and returns the
// log-softmax normalizer max + log(sum e^(x - max)) when `logits`, else 0 (log-probs are used as
// given). work (classes) is scratch.
template <typename T>
double load_frame(const T* x, int64_t classes, bool logits, double* __restrict frame,
                  double* __restrict work) {
    LSTM_CTC_SIMD
    for (int64_t c = 0; c < classes; ++c) frame[c] = static_cast<double>(x[c]);
    if (!logits) return 0.0;
    // Eight running maxima, so the reduction vectorizes without reassociation flags.
    double lanes[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    int64_t c = 0;
    for (; c + 8 <= classes; c += 8)
        for (int j = 0; j < 8; ++j) lanes[j] = lanes[j] > frame[c + j] ? lanes[j] : frame[c + j];
    for (; c < classes; ++c) lanes[0] = lanes[0] > frame[c] ? lanes[0] : frame[c];
    double max = lanes[0];
    for (int j = 1; j < 8; ++j) max = max > lanes[j] ? max : lanes[j];
    LSTM_CTC_SIMD
    for (int64_t k = 0; k < classes; ++k) work[k] = exp_nonpositive(frame[k] - max);
    return max + std::log(fixed_order_sum(work, classes));
}

// The states of frame t that lie on some complete alignment: s in [lo, hi] of the extended label
// sequence (length 2 * labels + 1), as index ranges of the blank and label arrays. States outside
// are unreachable from the start (s > 2t + 1) or cannot reach the end in the frames left
// (s < S' - 2 (frames - t)); their alpha or beta is -inf or irrelevant, so they are skipped.
struct Window {
    int64_t blank_lo, blank_hi, label_lo, label_hi;  // half-open [lo, hi)
};

inline Window window(int64_t t, int64_t frames, int64_t labels) {
    const int64_t states = 2 * labels + 1;
    const int64_t lo = std::max<int64_t>(0, states - 2 * (frames - t));
    const int64_t hi = std::min<int64_t>(states - 1, 2 * t + 1);  // inclusive
    Window w;
    w.blank_lo = (lo + 1) / 2;
    w.blank_hi = std::max(w.blank_lo, hi / 2 + 1);
    w.label_lo = lo / 2;
    w.label_hi = labels == 0 ? w.label_lo : std::max(w.label_lo, (hi + 1) / 2);
    if (lo > hi) w.blank_hi = w.blank_lo, w.label_hi = w.label_lo;
    return w;
}

// Sets a state row (state_row(labels) doubles) to -inf outside the window, including the front
// label sentinel; the window itself is left for the recursion to overwrite.
inline void clear_outside(double* row, int64_t labels, const Window& w) {
    double* lab = row + label_offset(labels);
    std::fill(row, row + w.blank_lo, kNegInf);
    std::fill(row + w.blank_hi, row + labels + 1, kNegInf);
    std::fill(lab - 1, lab + w.label_lo, kNegInf);
    std::fill(lab + w.label_hi, lab + labels, kNegInf);
}

// One sample n with its labels (target_lengths[n] of them): returns its loss -log p(labels |
// input) in double (+inf when no alignment has nonzero probability), and when p.grad is set
// overwrites the sample's gradient slice grad[t, n, :] for every t < max_time: scale times the
// derivative on valid frames, exact zeros on padded frames t >= input_lengths[n] and everywhere
// for an infinite loss. ws is this thread's scratch, sized for the call's max_time/max_labels.
template <typename T>
double ctc_sample(const CtcProblem<T>& p, int64_t n, const int64_t* labels, const CtcSlot& ws,
                  double scale) {
    const int64_t frames = p.input_lengths[n], count = p.target_lengths[n];
    const int64_t classes = p.classes, stride = p.batch * p.classes;
    const T* input = p.input + n * classes;  // frame t at input + t * stride
    const int64_t row = state_row(count), lab = label_offset(count), erow = emit_row(count);

    for (int64_t k = 0; k <= count; ++k)
        ws.skip[k] = k >= 1 && k < count && labels[k] != labels[k - 1] ? 0.0 : kNegInf;

    // Emissions: log-probs of the blank and of each label, per frame, in double.
    constexpr int64_t kAhead = 8;  // frames; the loop body is short, so look further ahead
    for (int64_t t = 0; t < std::min(kAhead, frames); ++t)
        prefetch_row(input + t * stride, classes, false);
    for (int64_t t = 0; t < frames; ++t) {
        if (t + kAhead < frames) prefetch_row(input + (t + kAhead) * stride, classes, false);
        const double norm = load_frame(input + t * stride, classes, p.logits, ws.frame, ws.work);
        double* e = ws.emit + t * erow;
        ws.log_norm[t] = norm;
        e[0] = ws.frame[p.blank] - norm;
        for (int64_t k = 0; k < count; ++k) e[1 + k] = ws.frame[labels[k]] - norm;
    }

    // alpha_t(s): log probability of all prefixes of frames 0..t that end in state s.
    {
        const Window w = window(0, frames, count);
        double* a = ws.alpha;
        clear_outside(a, count, w);
        if (w.blank_lo == 0 && w.blank_hi > 0) a[0] = ws.emit[0];
        if (w.label_lo == 0 && w.label_hi > 0) a[lab] = ws.emit[1];
    }
    for (int64_t t = 1; t < frames; ++t) {
        const Window w = window(t, frames, count);
        const double* __restrict prev_b = ws.alpha + (t - 1) * row;
        const double* __restrict prev_l = prev_b + lab;
        double* __restrict cur_b = ws.alpha + t * row;
        double* __restrict cur_l = cur_b + lab;
        const double* __restrict e = ws.emit + t * erow;
        const double* __restrict skip = ws.skip;
        const double blank_lp = e[0];
        clear_outside(cur_b, count, w);
        // Blank 2k comes from itself or from label k - 1 (the sentinel for k = 0): their log-sum
        // u. Label k comes from itself, from blank k or, when the labels differ, from label
        // k - 1; the sum of the last two is u again, so one log_add of (label k, u) does it, and
        // u >= blank k lets max() pick between u and blank k without a branch.
        auto blank_sum = [&](int64_t k) { return log_add(prev_b[k], prev_l[k - 1]); };
        LSTM_CTC_SIMD
        for (int64_t k = w.label_lo; k < w.label_hi; ++k) {
            const double u = blank_sum(k);
            const double from_below = u + skip[k] > prev_b[k] ? u + skip[k] : prev_b[k];
            cur_b[k] = blank_lp + u;
            cur_l[k] = e[1 + k] + log_add(prev_l[k], from_below);
        }
        // The window may hold one more blank than labels at its top (and the loop above may
        // have written one blank just below the window, which nothing on a complete alignment
        // reads).
        if (w.blank_hi > w.label_hi) cur_b[w.blank_hi - 1] = blank_lp + blank_sum(w.blank_hi - 1);
    }
    const double* last = ws.alpha + (frames - 1) * row;
    const double loglik = count == 0 ? last[0] : log_add(last[count], last[lab + count - 1]);
    const double loss = -loglik;
    if (!p.grad) return loss;

    T* grad = p.grad + n * classes;
    const bool dead = !(loglik > kNegInf);  // no alignment: zero gradient, never NaN
    for (int64_t t = dead ? 0 : frames; t < p.max_time; ++t)
        std::fill(grad + t * stride, grad + t * stride + classes, T(0));
    if (dead) return loss;

    // beta_t(s): log probability of all suffixes over frames t+1.. given state s at frame t (the
    // emission at t excluded, so alpha + beta - loglik is the log occupation probability and no
    // -inf log-prob is ever subtracted).
    double* beta_next = ws.beta;
    double* beta_cur = ws.beta + row;
    clear_outside(beta_cur, count, window(frames - 1, frames, count));
    beta_cur[count] = 0.0;
    if (count > 0) beta_cur[lab + count - 1] = 0.0;
    ws.next[lab + count] = kNegInf;  // "label count" past the end
    std::fill(ws.posterior, ws.posterior + classes, 0.0);

    for (int64_t t = frames - 1; t >= 0; --t) {
        const Window w = window(t, frames, count);
        if (t < frames - 1) {
            std::swap(beta_next, beta_cur);
            const double* __restrict e = ws.emit + (t + 1) * erow;
            const double* __restrict nb = beta_next;
            const double* __restrict nl = beta_next + lab;
            double* __restrict xb = ws.next;
            double* __restrict xl = ws.next + lab;
            double* __restrict cb = beta_cur;
            double* __restrict cl = beta_cur + lab;
            const double* __restrict skip = ws.skip;
            const double blank_lp = e[0];
            LSTM_CTC_SIMD
            for (int64_t k = 0; k <= count; ++k) xb[k] = blank_lp + nb[k];
            LSTM_CTC_SIMD
            for (int64_t k = 0; k < count; ++k) xl[k] = e[1 + k] + nl[k];
            clear_outside(cb, count, w);
            // Blank 2k goes to itself or to label k (label count is the -inf end sentinel).
            // Label k goes to itself, to blank k + 1 or, when the labels differ, to label k + 1;
            // the sum of the last two is blank k + 1's own result, reused as in alpha. The
            // blank loop may compute one blank above the window, which the labels need and
            // nothing else reads.
            const int64_t blank_end = std::max(w.blank_hi, w.label_hi + 1);
            LSTM_CTC_SIMD
            for (int64_t k = w.blank_lo; k < blank_end; ++k) cb[k] = log_add(xb[k], xl[k]);
            LSTM_CTC_SIMD
            for (int64_t k = w.label_lo; k < w.label_hi; ++k) {
                const double v = cb[k + 1] + skip[k + 1];
                cl[k] = log_add(xl[k], v > xb[k + 1] ? v : xb[k + 1]);
            }
        }
        if (t >= 2) {
            prefetch_row(grad + (t - 2) * stride, classes, true);
            if (p.logits) prefetch_row(input + (t - 2) * stride, classes, false);
        }
        // Occupation probabilities of frame t, summed per class in a fixed order.
        const double* __restrict ab = ws.alpha + t * row;
        const double* __restrict al = ab + lab;
        const double* __restrict bb = beta_cur;
        const double* __restrict bl = beta_cur + lab;
        double* __restrict g = ws.work;
        LSTM_CTC_SIMD
        for (int64_t k = w.blank_lo; k < w.blank_hi; ++k)
            g[k] = exp_nonpositive(ab[k] + bb[k] - loglik);
        const double blank_post = fixed_order_sum(g + w.blank_lo, w.blank_hi - w.blank_lo);
        LSTM_CTC_SIMD
        for (int64_t k = w.label_lo; k < w.label_hi; ++k)
            g[k] = exp_nonpositive(al[k] + bl[k] - loglik);
        double* post = ws.posterior;
        for (int64_t k = w.label_lo; k < w.label_hi; ++k) post[labels[k]] += g[k];
        post[p.blank] += blank_post;

        T* __restrict out = grad + t * stride;
        if (p.logits) {
            // d/dlogits = softmax - posterior.
            load_frame(input + t * stride, classes, false, ws.frame, ws.work);
            const double* __restrict x = ws.frame;
            const double norm = ws.log_norm[t];
            LSTM_CTC_SIMD
            for (int64_t c = 0; c < classes; ++c)
                out[c] = static_cast<T>(scale * (exp_nonpositive(x[c] - norm) - post[c]));
        } else {
            // d/dlog_probs = -posterior (the log-probs are independent inputs here).
            LSTM_CTC_SIMD
            for (int64_t c = 0; c < classes; ++c) out[c] = static_cast<T>(-scale * post[c]);
        }
        post[p.blank] = 0.0;
        for (int64_t k = w.label_lo; k < w.label_hi; ++k) post[labels[k]] = 0.0;
    }
    return loss;
}

}  // namespace ctc_detail

// Computes every sample's loss -log p(labels | input) in double: +inf when no alignment has
// nonzero probability, 0 instead of +inf under zero_infinity. Returns them as an array of
// p.batch doubles inside the workspace, valid until the workspace is reused. When p.grad is set,
// overwrites it with the gradient of sum_n scale_n * loss_n w.r.t. the input as given (scale_n as
// described in CtcProblem); padded frames and samples with an infinite loss get exact zeros.
// workspace: host, at least ctc_workspace_bytes(max_time, batch, classes, max_labels, 1) bytes,
// any alignment. Runs min(omp_get_max_threads(), batch, slots that fit) threads; each sample is
// computed start to end by one thread with the same code, so results are bit-identical for every
// thread count.
template <typename T>
const double* ctc_loss(const CtcProblem<T>& p, void* workspace, size_t workspace_bytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(workspace);
    const size_t skew = (64 - address % 64) % 64;
    char* base = static_cast<char*>(workspace) + skew;
    ctc_detail::Carver carver(base);
    const ctc_detail::CtcShared shared = ctc_detail::carve_shared(carver, p.batch);
    if (p.batch == 0) return shared.losses;

    const size_t shared_size = ctc_detail::shared_bytes(p.batch);
    const size_t slot_size = ctc_detail::slot_bytes(p.max_time, p.classes, p.max_labels);
#ifdef _OPENMP
    // As many threads as there are slots in the workspace, samples, and OpenMP threads.
    const size_t fit = (workspace_bytes - skew - shared_size) / slot_size;
    const size_t most = std::min(fit, static_cast<size_t>(p.batch));
    const int threads = static_cast<int>(
        std::max<size_t>(1, std::min(most, static_cast<size_t>(omp_get_max_threads()))));
#else
    (void)workspace_bytes;
#endif

    int64_t start = 0;
    for (int64_t n = 0; n < p.batch; ++n) {
        shared.label_start[n] = p.target_stride > 0 ? n * p.target_stride : start;
        start += p.target_lengths[n];
    }
    // Longest work first, so that dynamic scheduling ends with short samples and balances.
    for (int64_t n = 0; n < p.batch; ++n) shared.order[n] = n;
    auto work = [&](int64_t n) { return p.input_lengths[n] * (2 * p.target_lengths[n] + 1); };
    std::stable_sort(shared.order, shared.order + p.batch,
                     [&](int64_t a, int64_t b) { return work(a) > work(b); });

#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
#ifdef _OPENMP
        const size_t slot_index = static_cast<size_t>(omp_get_thread_num());
#else
        const size_t slot_index = 0;
#endif
        ctc_detail::Carver slot_carver(base + shared_size + slot_index * slot_size);
        const ctc_detail::CtcSlot slot =
            ctc_detail::carve_slot(slot_carver, p.max_time, p.classes, p.max_labels);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t i = 0; i < p.batch; ++i) {
            const int64_t n = shared.order[i];
            double scale = p.grad_scale;
            if (p.divide_by_target_length)
                scale /= static_cast<double>(std::max<int64_t>(p.target_lengths[n], 1));
            const double loss =
                ctc_detail::ctc_sample(p, n, p.targets + shared.label_start[n], slot, scale);
            // An infinite loss already got a zero gradient, which is what zero_infinity wants.
            shared.losses[n] = std::isinf(loss) && p.zero_infinity ? 0.0 : loss;
        }
    }
    return shared.losses;
}

}  // namespace lstm::kernels::cpu

#undef LSTM_CTC_SIMD
