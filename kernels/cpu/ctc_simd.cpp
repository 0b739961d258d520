// One CTC sample (kernels/cpu/ctc_simd.hpp) written once with Highway ops and compiled per
// instruction set: hwy/foreach_target.h includes this file once per target, and the HWY_ONCE
// part dispatches. Everything is double whatever the input type; kernels/cpu/ctc.hpp says why.
//
// Why hand-written exp and log1p instead of hwy/contrib/math: the recursions need e^x only for
// x <= 0 with -inf mapped to an exact 0, and log(1 + u) only for u in [0, 1]; restricted to
// those ranges both are branch-free polynomials without a division, and the same polynomials on
// every target. They are evaluated in Estrin's scheme (powers of the argument, pairs combined
// level by level) rather than Horner's: the state loops are long dependency chains (a label's
// log-add-exp waits for its blank's), and a chain of 4 or 5 FMA latencies instead of 10 or 18
// lets the out-of-order core keep both FMA ports busy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/ctc_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/ctc_simd.hpp"
#include "kernels/cpu/simd.hpp"

#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "kernels/cpu/ctc_simd.cpp represents impossible paths by -inf; do not build with -ffast-math"
#endif

// Target-independent layout and helpers, compiled once (this file is included once per target).
#ifndef LSTM_KERNELS_CPU_CTC_SIMD_LAYOUT
#define LSTM_KERNELS_CPU_CTC_SIMD_LAYOUT
namespace lstm::kernels::cpu::ctc_layout {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Doubles of slack after every scratch row: one vector of the widest target (AVX-512: 8
// doubles; the kernels cap their vectors at this width), so a vector starting inside a row never
// leaves the row's memory and no loop over scratch needs a scalar remainder.
constexpr int64_t kSlack = 8;

// Rounded up to 8 doubles (a cache line), so that rows start aligned.
inline int64_t padded(int64_t count) { return (count + 7) / 8 * 8; }

// State rows (alpha, beta) keep blank states and label states apart: blank state 2k at [k]
// (k <= labels) and slack, then a -inf sentinel, then label state 2k + 1 at [label_offset + k]
// (k < labels), one more entry at [label_offset + labels] used as an end sentinel, and slack.
// Separate arrays give the recursions contiguous, branch-free loops; the front sentinel is
// "label k - 1" for k = 0.
inline int64_t blank_capacity(int64_t labels) { return padded(labels + 1) + kSlack; }
inline int64_t label_offset(int64_t labels) { return blank_capacity(labels) + 1; }
inline int64_t label_capacity(int64_t labels) { return padded(labels + 1) + kSlack; }
inline int64_t state_row(int64_t labels) {
    return padded(label_offset(labels) + label_capacity(labels));
}
// Emission rows: [0] the blank's log-prob, [1 + k] label k's, then slack.
inline int64_t emit_row(int64_t labels) { return padded(labels + 1) + kSlack; }

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

// Sets a state row to `none` (-inf for log values, 0 for the scaled linear ones) outside the
// window, sentinels and slack included; the window itself is left for the recursion to
// overwrite. Slack holds `none` too, so that the lanes a vector reads past the window are
// defined (never NaN, never denormal) even though their results are dropped.
inline void clear_outside(double* row, int64_t labels, const Window& w, double none = kNegInf) {
    double* lab = row + label_offset(labels);
    std::fill(row, row + w.blank_lo, none);
    std::fill(row + w.blank_hi, row + blank_capacity(labels), none);
    std::fill(lab - 1, lab + w.label_lo, none);
    std::fill(lab + w.label_hi, lab + label_capacity(labels), none);
}

// Sum of v[0..count) in a fixed order that does not depend on the thread or the target: eight
// interleaved partial sums, combined pairwise at the end.
inline double fixed_order_sum(const double* v, int64_t count) {
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        for (int j = 0; j < 8; ++j) lanes[j] += v[i + j];
    for (int j = 0; i < count; ++i, ++j) lanes[j] += v[i];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Frames of one sample are batch * classes elements apart, further than the hardware prefetcher
// follows (it stops at page boundaries), so every frame would be a demand miss: touch the lines
// of a frame a few frames ahead. `write` asks for the lines in a writable state (gradient rows).
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

}  // namespace lstm::kernels::cpu::ctc_layout
#endif  // LSTM_KERNELS_CPU_CTC_SIMD_LAYOUT

HWY_BEFORE_NAMESPACE();
namespace lstm::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace layout = ctc_layout;

// Vectors of at most kSlack doubles, so the rows' slack covers every vector; single lanes for
// the remainders of caller-owned rows, with the same arithmetic lane for lane.
using Df = hn::CappedTag<double, layout::kSlack>;
using D1 = hn::CappedTag<double, 1>;

// e^min(x, 0) with relative error below 5e-16; exactly 0 for x <= -700 (also for -inf), which
// flushes only values below 1e-304. Callers pass differences to a maximum (a log-sum, or a
// log-likelihood that bounds a posterior), so x <= 0 but for rounding; the clamp keeps that
// rounding from giving a probability above 1, and a large positive x (cancellation between
// inputs near 1e30) from carrying n past the exponent field (it once gave -4.5e57).
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 split so that n * ln2_hi is exact), n read from the low
// mantissa bits of x * log2(e) + 1.5 * 2^52 and added straight into the exponent field, e^r by a
// degree-10 polynomial: the Chebyshev fit of e^r on [-ln2/2, ln2/2] (mpmath.chebyfit, fit error
// 2.2e-16).
template <class D>
HWY_INLINE hn::Vec<D> exp_nonpositive(D d, hn::Vec<D> x) {
    const hn::RebindToUnsigned<D> du;
    const auto floor = hn::Set(d, -700.0);
    const auto in_range = hn::Gt(x, floor);
    const auto clamped = hn::Min(hn::IfThenElse(in_range, x, floor), hn::Zero(d));
    const auto shifter = hn::Set(d, 6755399441055744.0);  // 1.5 * 2^52
    const auto shifted = hn::MulAdd(clamped, hn::Set(d, 1.4426950408889634), shifter);
    const auto n = hn::Sub(shifted, shifter);
    const auto r = hn::MulAdd(n, hn::Set(d, -1.42860682030941723212e-6),
                              hn::MulAdd(n, hn::Set(d, -0.693145751953125), clamped));
    auto c = [d](double value) { return hn::Set(d, value); };
    const auto r2 = hn::Mul(r, r);
    const auto r4 = hn::Mul(r2, r2);
    const auto r8 = hn::Mul(r4, r4);
    const auto a0 = hn::MulAdd(c(1.0000000000000067), r, c(1.0));
    const auto a1 = hn::MulAdd(c(0.16666666666554406), r, c(0.5000000000000006));
    const auto a2 = hn::MulAdd(c(0.008333333385667782), r, c(0.04166666666657314));
    const auto a3 = hn::MulAdd(c(0.00019841170270440067), r, c(0.0013888888932488599));
    const auto a4 = hn::MulAdd(c(2.764018079620985e-06), r, c(2.4801504346997686e-05));
    const auto b0 = hn::MulAdd(a1, r2, a0);
    const auto b1 = hn::MulAdd(a3, r2, a2);
    const auto b2 = hn::MulAdd(c(2.7626357241447223e-07), r2, a4);
    const auto p = hn::MulAdd(b2, r8, hn::MulAdd(b1, r4, b0));
    // n >= -1010 here: the biased exponent of p (1022 or 1023) plus n stays normal, and the
    // unsigned add wraps n's two's complement into the exponent field.
    const auto scaled = hn::Add(hn::BitCast(du, p), hn::ShiftLeft<52>(hn::BitCast(du, shifted)));
    return hn::IfThenElseZero(in_range, hn::BitCast(d, scaled));
}

// log(1 + u) for u in [0, 1], absolute error below 4e-16 and relative error below 1e-15 near 0.
// No range reduction and no division (a vector divide costs as much as ~16 FMAs): u * g(u) with g
// the degree-18 Chebyshev fit of log1p(u) / u on [0, 1] (mpmath.chebyfit, fit error 3.9e-16).
template <class D>
HWY_INLINE hn::Vec<D> log1p_unit(D d, hn::Vec<D> u) {
    auto c = [d](double value) { return hn::Set(d, value); };
    const auto u2 = hn::Mul(u, u);
    const auto u4 = hn::Mul(u2, u2);
    const auto u8 = hn::Mul(u4, u4);
    const auto u16 = hn::Mul(u8, u8);
    const auto a0 = hn::MulAdd(c(-0.49999999999971906), u, c(0.9999999999999996));
    const auto a1 = hn::MulAdd(c(-0.24999999836556086), u, c(0.33333333329940107));
    const auto a2 = hn::MulAdd(c(-0.16666600961412256), u, c(0.19999995817342595));
    const auto a3 = hn::MulAdd(c(-0.12494859138938634), u, c(0.14285023617558082));
    const auto a4 = hn::MulAdd(c(-0.0988285620764629), u, c(0.11082925631397271));
    const auto a5 = hn::MulAdd(c(-0.07375189663045013), u, c(0.08713666158405099));
    const auto a6 = hn::MulAdd(c(-0.03907726951573114), u, c(0.05742104178532733));
    const auto a7 = hn::MulAdd(c(-0.009629407360351236), u, c(0.0219941389705604));
    const auto a8 = hn::MulAdd(c(-0.0006056331381238628), u, c(0.003032665275883164));
    const auto b0 = hn::MulAdd(a1, u2, a0);
    const auto b1 = hn::MulAdd(a3, u2, a2);
    const auto b2 = hn::MulAdd(a5, u2, a4);
    const auto b3 = hn::MulAdd(a7, u2, a6);
    const auto b4 = hn::MulAdd(c(5.7257071651592704e-05), u2, a8);
    const auto d0 = hn::MulAdd(b1, u4, b0);
    const auto d1 = hn::MulAdd(b3, u4, b2);
    const auto p = hn::MulAdd(b4, u16, hn::MulAdd(d1, u8, d0));
    return hn::Mul(u, p);
}

// log(e^a + e^b) for a, b in [-inf, +inf): max + log(1 + e^(min - max)), one exp and one log.
// Never -inf - -inf: the exp's argument uses max(max, lowest), so both -inf gives -inf + 0. The
// result is >= max(a, b), which the label recursions rely on.
template <class D>
HWY_INLINE hn::Vec<D> log_add(D d, hn::Vec<D> a, hn::Vec<D> b) {
    const auto x = hn::Max(a, b);
    const auto y = hn::Min(a, b);
    const auto x_safe = hn::Max(x, hn::Set(d, std::numeric_limits<double>::lowest()));
    return hn::Add(x, log1p_unit(d, exp_nonpositive(d, hn::Sub(y, x_safe))));
}

double log_add_scalar(double a, double b) {
    const D1 d1;
    return hn::GetLane(log_add(d1, hn::Set(d1, a), hn::Set(d1, b)));
}

// Stores the first `count` lanes of v at p and keeps the rest of p's vector (scratch only: the
// rest belongs to this thread, and the slack makes the whole vector addressable).
template <class D>
HWY_INLINE void store_first(D d, hn::Vec<D> v, int64_t count, double* p) {
    if (count >= static_cast<int64_t>(hn::Lanes(d))) {
        hn::StoreU(v, d, p);
    } else {
        hn::StoreU(hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(count)), v, hn::LoadU(d, p)), d,
                   p);
    }
}

template <class D>
HWY_INLINE hn::Vec<D> load_as_double(D d, const float* p) {
    const hn::Rebind<float, D> df;
    return hn::PromoteTo(d, hn::LoadU(df, p));
}
template <class D>
HWY_INLINE hn::Vec<D> load_as_double(D d, const double* p) {
    return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE void store_from_double(D /*d*/, hn::Vec<D> v, float* p) {
    const hn::Rebind<float, D> df;
    hn::StoreU(hn::DemoteTo(df, v), df, p);
}
template <class D>
HWY_INLINE void store_from_double(D d, hn::Vec<D> v, double* p) {
    hn::StoreU(v, d, p);
}

// body(d, i) for i in [0, count): whole vectors, then single lanes, so that memory the caller
// owns past `count` (another sample's row, or the end of the tensor) is never touched.
template <class Body>
HWY_INLINE void for_each_lane(int64_t count, Body body) {
    const Df d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    for (; i + lanes <= count; i += lanes) body(d, i);
    for (; i < count; ++i) body(D1(), i);
}

// The log-softmax of a frame is (x - max) - log_sum. Kept as two terms, not as x - (max +
// log_sum): near the float range's end (|max| ~ 1e38, where a double's spacing is ~1e22)
// max + log_sum rounds to max, and tied classes would each get probability 1.
struct Norm {
    double max = 0.0, log_sum = 0.0;
};

// frame (classes) := one input row x in double; returns the log-softmax's terms when `logits`,
// else zeros (log-probs are used as given). work (classes + slack) is scratch; frame's slack must
// hold -inf.
template <typename T>
Norm load_frame(const T* x, int64_t classes, bool logits, double* HWY_RESTRICT frame,
                double* HWY_RESTRICT work) {
    for_each_lane(classes,
                  [&](auto d, int64_t c) { hn::StoreU(load_as_double(d, x + c), d, frame + c); });
    if (!logits) return {};
    // Eight running maxima in a fixed order, the same on every target.
    double lanes[8] = {layout::kNegInf, layout::kNegInf, layout::kNegInf, layout::kNegInf,
                       layout::kNegInf, layout::kNegInf, layout::kNegInf, layout::kNegInf};
    int64_t c = 0;
    for (; c + 8 <= classes; c += 8)
        for (int j = 0; j < 8; ++j) lanes[j] = lanes[j] > frame[c + j] ? lanes[j] : frame[c + j];
    for (; c < classes; ++c) lanes[0] = lanes[0] > frame[c] ? lanes[0] : frame[c];
    double max = lanes[0];
    for (int j = 1; j < 8; ++j) max = max > lanes[j] ? max : lanes[j];
    const Df d;
    const auto vmax = hn::Set(d, max);
    for (int64_t k = 0; k < classes; k += static_cast<int64_t>(hn::Lanes(d)))
        hn::StoreU(exp_nonpositive(d, hn::Sub(hn::LoadU(d, frame + k), vmax)), d, work + k);
    return {max, std::log(layout::fixed_order_sum(work, classes))};
}

// Whether every entry of row[0..count) is below +inf (false for NaN and +inf). The row's slack
// past count must hold -inf (which passes), so whole vectors need no remainder loop.
HWY_INLINE bool below_inf(const double* HWY_RESTRICT row, int64_t count) {
    const Df d;
    const auto inf = hn::Set(d, std::numeric_limits<double>::infinity());
    auto below = hn::Lt(hn::LoadU(d, row), inf);
    for (int64_t k = static_cast<int64_t>(hn::Lanes(d)); k < count;
         k += static_cast<int64_t>(hn::Lanes(d)))
        below = hn::And(below, hn::Lt(hn::LoadU(d, row + k), inf));
    return hn::AllTrue(d, below);
}

// A sample whose valid frames hold NaN or +inf (or, for logits, a frame with every class -inf:
// no distribution) has no defined loss: loss NaN and a NaN gradient on every valid frame, as
// PyTorch gives, so that bad input shows instead of passing for an infeasible sample. Padded
// frames still get exact zeros.
template <typename T>
double poisoned(T* grad, const CtcSampleDims& dims) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (!grad) return nan;
    for (int64_t t = 0; t < dims.max_time; ++t)
        std::fill(grad + t * dims.stride, grad + t * dims.stride + dims.classes,
                  t < dims.frames ? static_cast<T>(nan) : T(0));
    return nan;
}

// Frame t's gradient row from the class posteriors `post` (their sum times post_scale is 1):
// d/dlogits = scale (softmax - posterior), d/dlog_probs = -scale posterior.
template <typename T>
HWY_INLINE void gradient_row(const T* input, T* out, const CtcSampleDims& dims,
                             const CtcScratch& ws, int64_t t, double post_scale) {
    const int64_t classes = dims.classes;
    const double* post = ws.posterior;
    if (dims.logits) {
        load_frame(input + t * dims.stride, classes, false, ws.frame, ws.work);
        const double max = ws.log_norm[2 * t], log_sum = ws.log_norm[2 * t + 1];
        const double* x = ws.frame;
        for_each_lane(classes, [&](auto dd, int64_t c) {
            const auto shifted = hn::Sub(hn::LoadU(dd, x + c), hn::Set(dd, max));
            const auto softmax = exp_nonpositive(dd, hn::Sub(shifted, hn::Set(dd, log_sum)));
            const auto p = hn::Mul(hn::LoadU(dd, post + c), hn::Set(dd, post_scale));
            store_from_double(dd, hn::Mul(hn::Set(dd, dims.scale), hn::Sub(softmax, p)), out + c);
        });
    } else {
        const double factor = -dims.scale * post_scale;
        for_each_lane(classes, [&](auto dd, int64_t c) {
            store_from_double(dd, hn::Mul(hn::Set(dd, factor), hn::LoadU(dd, post + c)), out + c);
        });
    }
}

// Adds frame t's state occupations g (label states at g[k], k in the window) and the blanks'
// total to the class posteriors, and takes them back out after the row is written.
HWY_INLINE void add_posteriors(double* post, const int64_t* labels, const layout::Window& w,
                               const double* g, int64_t blank, double blank_total) {
    for (int64_t k = w.label_lo; k < w.label_hi; ++k) post[labels[k]] += g[k];
    post[blank] += blank_total;
}
HWY_INLINE void clear_posteriors(double* post, const int64_t* labels, const layout::Window& w,
                                 int64_t blank) {
    post[blank] = 0.0;
    for (int64_t k = w.label_lo; k < w.label_hi; ++k) post[labels[k]] = 0.0;
}

// Exact zeros on the padded frames (and on every frame of a sample without an alignment).
template <typename T>
void zero_frames(T* grad, const CtcSampleDims& dims, int64_t from) {
    for (int64_t t = from; t < dims.max_time; ++t)
        std::fill(grad + t * dims.stride, grad + t * dims.stride + dims.classes, T(0));
}

// The log-space passes: alpha, loss, beta and the gradient, from the log emissions in ws.emit.
// Exact for every input (no scaling can underflow), at one exp and one log1p per log-add.
template <typename T>
double log_passes(const T* input, T* grad, const int64_t* labels, const CtcSampleDims& dims,
                  const CtcScratch& ws) {
    using layout::kNegInf;
    const Df d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    const int64_t frames = dims.frames, count = dims.labels;
    const int64_t row = layout::state_row(count), lab = layout::label_offset(count);
    const int64_t erow = layout::emit_row(count);

    // alpha_t(s): log probability of all prefixes of frames 0..t that end in state s.
    {
        const layout::Window w = layout::window(0, frames, count);
        double* a = ws.alpha;
        layout::clear_outside(a, count, w);
        if (w.blank_lo == 0 && w.blank_hi > 0) a[0] = ws.emit[0];
        if (w.label_lo == 0 && w.label_hi > 0) a[lab] = ws.emit[1];
    }
    for (int64_t t = 1; t < frames; ++t) {
        const layout::Window w = layout::window(t, frames, count);
        const double* HWY_RESTRICT prev_b = ws.alpha + (t - 1) * row;
        const double* HWY_RESTRICT prev_l = prev_b + lab;
        double* HWY_RESTRICT cur_b = ws.alpha + t * row;
        double* HWY_RESTRICT cur_l = cur_b + lab;
        const double* HWY_RESTRICT e = ws.emit + t * erow;
        const double* HWY_RESTRICT skip = ws.skip;
        layout::clear_outside(cur_b, count, w);
        // Blank 2k comes from itself or from label k - 1 (the sentinel for k = 0): their log-sum
        // u. Label k comes from itself, from blank k or, when the labels differ, from label
        // k - 1; the sum of the last two is u again, so one log-add of (label k, u) does it, and
        // u >= blank k lets max() pick between u and blank k without a branch.
        const auto blank_lp = hn::Set(d, e[0]);
        for (int64_t k = w.label_lo; k < w.label_hi; k += lanes) {
            const auto pb = hn::LoadU(d, prev_b + k);
            const auto u = log_add(d, pb, hn::LoadU(d, prev_l + k - 1));
            const auto from_below = hn::Max(hn::Add(u, hn::LoadU(d, skip + k)), pb);
            const auto label =
                hn::Add(hn::LoadU(d, e + 1 + k), log_add(d, hn::LoadU(d, prev_l + k), from_below));
            store_first(d, hn::Add(blank_lp, u), w.label_hi - k, cur_b + k);
            store_first(d, label, w.label_hi - k, cur_l + k);
        }
        // The window may hold one more blank than labels at its top (and the loop above may
        // have written one blank just below the window, which nothing on a complete alignment
        // reads).
        if (w.blank_hi > w.label_hi) {
            const int64_t k = w.blank_hi - 1;
            cur_b[k] = e[0] + log_add_scalar(prev_b[k], prev_l[k - 1]);
        }
    }
    const double* last = ws.alpha + (frames - 1) * row;
    const double loglik = count == 0 ? last[0] : log_add_scalar(last[count], last[lab + count - 1]);
    const double loss = -loglik;
    if (!grad) return loss;

    const bool dead = !(loglik > kNegInf);  // no alignment: zero gradient, never NaN
    zero_frames(grad, dims, dead ? 0 : frames);
    if (dead) return loss;

    // beta_t(s): log probability of all suffixes over frames t+1.. given state s at frame t (the
    // emission at t excluded, so alpha + beta - loglik is the log occupation probability and no
    // -inf log-prob is ever subtracted).
    double* beta_next = ws.beta;
    double* beta_cur = ws.beta + row;
    layout::clear_outside(beta_cur, count, layout::window(frames - 1, frames, count));
    beta_cur[count] = 0.0;
    if (count > 0) beta_cur[lab + count - 1] = 0.0;
    std::fill(ws.next, ws.next + row, kNegInf);
    std::fill(ws.posterior, ws.posterior + dims.classes, 0.0);
    const auto vloglik = hn::Set(d, loglik);

    for (int64_t t = frames - 1; t >= 0; --t) {
        const layout::Window w = layout::window(t, frames, count);
        if (t < frames - 1) {
            std::swap(beta_next, beta_cur);
            const double* HWY_RESTRICT e = ws.emit + (t + 1) * erow;
            const double* HWY_RESTRICT nb = beta_next;
            const double* HWY_RESTRICT nl = beta_next + lab;
            double* HWY_RESTRICT xb = ws.next;
            double* HWY_RESTRICT xl = ws.next + lab;
            double* HWY_RESTRICT cb = beta_cur;
            double* HWY_RESTRICT cl = beta_cur + lab;
            const double* HWY_RESTRICT skip = ws.skip;
            const auto blank_lp = hn::Set(d, e[0]);
            // Whole vectors into the slack: every entry read below lies in [0, count] (xb) and
            // [0, count) plus the end sentinel (xl), and the lanes past them are dropped.
            for (int64_t k = 0; k <= count; k += lanes)
                hn::StoreU(hn::Add(blank_lp, hn::LoadU(d, nb + k)), d, xb + k);
            for (int64_t k = 0; k < count; k += lanes)
                hn::StoreU(hn::Add(hn::LoadU(d, e + 1 + k), hn::LoadU(d, nl + k)), d, xl + k);
            xl[count] = kNegInf;  // "label count" past the end
            layout::clear_outside(cb, count, w);
            // Blank 2k goes to itself or to label k (label count is the -inf end sentinel).
            // Label k goes to itself, to blank k + 1 or, when the labels differ, to label k + 1;
            // the sum of the last two is blank k + 1's own result, reused as in alpha. The
            // blank loop may compute one blank above the window, which the labels need and
            // nothing else reads.
            const int64_t blank_end = std::max(w.blank_hi, w.label_hi + 1);
            for (int64_t k = w.blank_lo; k < blank_end; k += lanes)
                store_first(d, log_add(d, hn::LoadU(d, xb + k), hn::LoadU(d, xl + k)),
                            blank_end - k, cb + k);
            for (int64_t k = w.label_lo; k < w.label_hi; k += lanes) {
                const auto v = hn::Add(hn::LoadU(d, cb + k + 1), hn::LoadU(d, skip + k + 1));
                const auto to_above = hn::Max(v, hn::LoadU(d, xb + k + 1));
                store_first(d, log_add(d, hn::LoadU(d, xl + k), to_above), w.label_hi - k, cl + k);
            }
        }
        if (t >= 2) {
            layout::prefetch_row(grad + (t - 2) * dims.stride, dims.classes, true);
            if (dims.logits)
                layout::prefetch_row(input + (t - 2) * dims.stride, dims.classes, false);
        }
        // Occupation probabilities of frame t, summed per class in a fixed order.
        const double* HWY_RESTRICT ab = ws.alpha + t * row;
        const double* HWY_RESTRICT al = ab + lab;
        const double* HWY_RESTRICT bb = beta_cur;
        const double* HWY_RESTRICT bl = beta_cur + lab;
        double* HWY_RESTRICT g = ws.work;
        for (int64_t k = w.blank_lo; k < w.blank_hi; k += lanes) {
            const auto sum = hn::Add(hn::LoadU(d, ab + k), hn::LoadU(d, bb + k));
            hn::StoreU(exp_nonpositive(d, hn::Sub(sum, vloglik)), d, g + k);
        }
        const double blank_post = layout::fixed_order_sum(g + w.blank_lo, w.blank_hi - w.blank_lo);
        for (int64_t k = w.label_lo; k < w.label_hi; k += lanes) {
            const auto sum = hn::Add(hn::LoadU(d, al + k), hn::LoadU(d, bl + k));
            hn::StoreU(exp_nonpositive(d, hn::Sub(sum, vloglik)), d, g + k);
        }
        add_posteriors(ws.posterior, labels, w, g, dims.blank, blank_post);
        gradient_row(input, grad + t * dims.stride, dims, ws, t, 1.0);
        clear_posteriors(ws.posterior, labels, w, dims.blank);
    }
    return loss;
}

// A positive scale kept as mantissa and binary exponent, so that products of thousands of
// per-frame sums neither underflow nor cost a log each.
struct Scale {
    double mantissa = 0.5;  // in [0.5, 1)
    int64_t exponent = 1;   // value = mantissa * 2^exponent; starts at 1
    void times(double factor) {
        int e = 0;
        mantissa = std::frexp(mantissa * factor, &e);
        exponent += e;
    }
    double log() const { return std::log(mantissa) + static_cast<double>(exponent) * kLn2; }
    static constexpr double kLn2 = 0.69314718055994530942;
};

// A frame whose states sum to less than this (relative to the previous frame's sum) has lost
// almost all of its mass: the scaled passes stop and the log-space passes run instead.
constexpr double kMinFrameSum = 0x1p-700;
// The occupation check: every frame's occupations must add up to the likelihood. Rounding
// drifts by about T * 1e-16; mass lost to underflow (states far below their frame's sum, which
// FlushDenormals turns into zeros) beyond this tolerance sends the sample to the log-space
// passes. Only float results take this path, whose own rounding is 6e-8.
constexpr double kOccupationTolerance = 1e-9;
// alpha and beta are each scaled to a row sum near 1, but where they put their mass on different
// states their products can be tiny: at T = 5000 with random logits a frame's occupations added
// up to 1e-315, a denormal with few digits left. The products are formed times 2^600 instead
// (no overflow: each factor is below 4), which leaves them normal down to 1e-488.
constexpr int kOccupationBoostExponent = 600;

// Denormals flushed to zero (kFlushDenormalBits of kernels/cpu/cpu_features.hpp) while the scaled
// recursions run: x86 cores take a microcode assist of about a hundred cycles on every denormal
// result, and states far below their frame's sum produce them (small emissions times small alphas);
// their mass is negligible or the occupation check catches it. The caller's mode comes back for
// each gradient row (pause) and at the end, so float outputs keep their denormals as in the
// log-space passes.
class FlushDenormals {
public:
#if LSTM_HAVE_FP_CONTROL
    FlushDenormals() : saved_(read_fp_control()) { resume(); }
    ~FlushDenormals() { pause(); }
    void pause() const { write_fp_control(saved_); }
    void resume() const { write_fp_control(saved_ | kFlushDenormalBits); }

private:
    FpControl saved_;
#else
    void pause() const {}
    void resume() const {}
#endif
};

// Sum of a state row (blank and label arrays with their slack, all zero outside the window).
HWY_INLINE double row_sum(const double* row, int64_t count) {
    const Df d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    const double* lab = row + layout::label_offset(count);
    auto acc = hn::Zero(d);
    for (int64_t k = 0; k <= count; k += lanes) acc = hn::Add(acc, hn::LoadU(d, row + k));
    for (int64_t k = 0; k < count; k += lanes) acc = hn::Add(acc, hn::LoadU(d, lab + k));
    return hn::GetLane(hn::SumOfLanes(d, acc));
}

// The same passes on probabilities instead of their logs, rescaled every frame (Rabiner's
// scaling): a state costs a few multiply-adds instead of two log-adds. Used for float results
// from logits with at least one label, with a gradient (grad set). Returns false, having written
// nothing that the log-space passes would not overwrite, when a frame's mass underflows or the
// occupations of a frame do not add up to the likelihood; the caller then runs log_passes.
// ws.emit_lin holds the emissions as probabilities; ws.scales gets alpha's scale per frame.
template <typename T>
bool scaled_passes(const T* input, T* grad, const int64_t* labels, const CtcSampleDims& dims,
                   const CtcScratch& ws, double* loss_out) {
    const Df d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    const int64_t frames = dims.frames, count = dims.labels;
    const int64_t row = layout::state_row(count), lab = layout::label_offset(count);
    const int64_t erow = layout::emit_row(count);
    const auto zero = hn::Zero(d);
    const FlushDenormals flush;

    // alpha_t = A_t * K_t with K_t the product of the sums of the scaled rows before t.
    Scale k_scale;
    {
        const layout::Window w = layout::window(0, frames, count);
        double* a = ws.alpha;
        layout::clear_outside(a, count, w, 0.0);
        if (w.blank_lo == 0 && w.blank_hi > 0) a[0] = ws.emit_lin[0];
        if (w.label_lo == 0 && w.label_hi > 0) a[lab] = ws.emit_lin[1];
    }
    ws.scales[0] = k_scale.mantissa;
    ws.scales[1] = static_cast<double>(k_scale.exponent);
    double sum = row_sum(ws.alpha, count);
    for (int64_t t = 1; t < frames; ++t) {
        if (!(sum >= kMinFrameSum)) return false;
        k_scale.times(sum);
        ws.scales[2 * t] = k_scale.mantissa;
        ws.scales[2 * t + 1] = static_cast<double>(k_scale.exponent);
        const double inv = 1.0 / sum;
        const layout::Window w = layout::window(t, frames, count);
        const double* HWY_RESTRICT prev_b = ws.alpha + (t - 1) * row;
        const double* HWY_RESTRICT prev_l = prev_b + lab;
        double* HWY_RESTRICT cur_b = ws.alpha + t * row;
        double* HWY_RESTRICT cur_l = cur_b + lab;
        const double* HWY_RESTRICT e = ws.emit_lin + t * erow;
        const double* HWY_RESTRICT skip = ws.skip;
        layout::clear_outside(cur_b, count, w, 0.0);
        // As in log_passes: u = blank k + label k - 1 feeds blank k, and label k takes label k
        // plus u where label k - 1 may be skipped, else plus blank k.
        const auto blank_p = hn::Set(d, e[0] * inv);
        const auto vinv = hn::Set(d, inv);
        for (int64_t k = w.label_lo; k < w.label_hi; k += lanes) {
            const auto pb = hn::LoadU(d, prev_b + k);
            const auto pl_below = hn::LoadU(d, prev_l + k - 1);
            const auto u = hn::Add(pb, pl_below);
            const auto can_skip = hn::Eq(hn::LoadU(d, skip + k), zero);
            const auto from_below = hn::IfThenElse(can_skip, u, pb);
            const auto label_p = hn::Mul(hn::LoadU(d, e + 1 + k), vinv);
            const auto label = hn::Mul(label_p, hn::Add(hn::LoadU(d, prev_l + k), from_below));
            store_first(d, hn::Mul(blank_p, u), w.label_hi - k, cur_b + k);
            store_first(d, label, w.label_hi - k, cur_l + k);
        }
        if (w.blank_hi > w.label_hi) {
            const int64_t k = w.blank_hi - 1;
            cur_b[k] = e[0] * inv * (prev_b[k] + prev_l[k - 1]);
        }
        // The loop may have written one blank just below the window (see log_passes); the row
        // sum must not count it.
        if (w.blank_lo > 0) cur_b[w.blank_lo - 1] = 0.0;
        sum = row_sum(cur_b, count);
    }
    const double* last = ws.alpha + (frames - 1) * row;
    const double final_sum = last[count] + last[lab + count - 1];
    if (!(final_sum >= kMinFrameSum)) return false;
    Scale likelihood = k_scale;
    likelihood.times(final_sum);
    const double loss = -likelihood.log();

    // beta_t = B_t * Kb_t with Kb_t the product of the sums of the scaled rows after t. The
    // occupation of state s at t is A_t(s) B_t(s) K_t Kb_t, and every frame's occupations add up
    // to the likelihood K_{T-1} * final_sum: checked frame by frame.
    Scale kb_scale;
    double* beta_next = ws.beta;
    double* beta_cur = ws.beta + row;
    layout::clear_outside(beta_cur, count, layout::window(frames - 1, frames, count), 0.0);
    beta_cur[count] = 1.0;
    beta_cur[lab + count - 1] = 1.0;
    std::fill(ws.next, ws.next + row, 0.0);
    std::fill(ws.posterior, ws.posterior + dims.classes, 0.0);
    for (int64_t t = frames - 1; t >= 0; --t) {
        const layout::Window w = layout::window(t, frames, count);
        if (t < frames - 1) {
            const double next_sum = row_sum(beta_cur, count);
            if (!(next_sum >= kMinFrameSum)) return false;
            kb_scale.times(next_sum);
            const double inv = 1.0 / next_sum;
            std::swap(beta_next, beta_cur);
            const double* HWY_RESTRICT e = ws.emit_lin + (t + 1) * erow;
            const double* HWY_RESTRICT nb = beta_next;
            const double* HWY_RESTRICT nl = beta_next + lab;
            double* HWY_RESTRICT xb = ws.next;
            double* HWY_RESTRICT xl = ws.next + lab;
            double* HWY_RESTRICT cb = beta_cur;
            double* HWY_RESTRICT cl = beta_cur + lab;
            const double* HWY_RESTRICT skip = ws.skip;
            const auto blank_p = hn::Set(d, e[0] * inv);
            const auto vinv = hn::Set(d, inv);
            for (int64_t k = 0; k <= count; k += lanes)
                hn::StoreU(hn::Mul(blank_p, hn::LoadU(d, nb + k)), d, xb + k);
            for (int64_t k = 0; k < count; k += lanes)
                hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, e + 1 + k), vinv), hn::LoadU(d, nl + k)), d,
                           xl + k);
            xl[count] = 0.0;  // "label count" past the end
            layout::clear_outside(cb, count, w, 0.0);
            const int64_t blank_end = std::max(w.blank_hi, w.label_hi + 1);
            for (int64_t k = w.blank_lo; k < blank_end; k += lanes)
                store_first(d, hn::Add(hn::LoadU(d, xb + k), hn::LoadU(d, xl + k)), blank_end - k,
                            cb + k);
            for (int64_t k = w.label_lo; k < w.label_hi; k += lanes) {
                const auto can_skip = hn::Eq(hn::LoadU(d, skip + k + 1), zero);
                const auto to_above =
                    hn::IfThenElse(can_skip, hn::LoadU(d, cb + k + 1), hn::LoadU(d, xb + k + 1));
                store_first(d, hn::Add(hn::LoadU(d, xl + k), to_above), w.label_hi - k, cl + k);
            }
            // The blank computed above the window (for the labels) is not part of this frame.
            if (blank_end > w.blank_hi) cb[blank_end - 1] = 0.0;
        }
        if (t >= 2) {
            layout::prefetch_row(grad + (t - 2) * dims.stride, dims.classes, true);
            layout::prefetch_row(input + (t - 2) * dims.stride, dims.classes, false);
        }
        const double* HWY_RESTRICT ab = ws.alpha + t * row;
        const double* HWY_RESTRICT al = ab + lab;
        const double* HWY_RESTRICT bb = beta_cur;
        const double* HWY_RESTRICT bl = beta_cur + lab;
        double* HWY_RESTRICT g = ws.work;
        const auto boost = hn::Set(d, std::ldexp(1.0, kOccupationBoostExponent));
        for (int64_t k = w.blank_lo; k < w.blank_hi; k += lanes)
            hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, ab + k), boost), hn::LoadU(d, bb + k)), d,
                       g + k);
        const double blank_occ = layout::fixed_order_sum(g + w.blank_lo, w.blank_hi - w.blank_lo);
        for (int64_t k = w.label_lo; k < w.label_hi; k += lanes)
            hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, al + k), boost), hn::LoadU(d, bl + k)), d,
                       g + k);
        const double occupation =
            blank_occ + layout::fixed_order_sum(g + w.label_lo, w.label_hi - w.label_lo);
        // occupation 2^-600 K_t Kb_t / likelihood must be 1.
        const double ratio = std::ldexp(
            occupation * (ws.scales[2 * t] * kb_scale.mantissa / likelihood.mantissa),
            static_cast<int>(static_cast<int64_t>(ws.scales[2 * t + 1]) + kb_scale.exponent -
                             likelihood.exponent - kOccupationBoostExponent));
        if (!(std::abs(ratio - 1.0) <= kOccupationTolerance)) return false;
        add_posteriors(ws.posterior, labels, w, g, dims.blank, blank_occ);
        flush.pause();
        gradient_row(input, grad + t * dims.stride, dims, ws, t, 1.0 / occupation);
        flush.resume();
        clear_posteriors(ws.posterior, labels, w, dims.blank);
    }
    zero_frames(grad, dims, frames);
    *loss_out = loss;
    return true;
}

template <typename T>
double run_sample(const T* input, T* grad, const int64_t* labels, const CtcSampleDims& dims,
                  const CtcScratch& ws) {
    using layout::kNegInf;
    const Df d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    const int64_t frames = dims.frames, count = dims.labels, classes = dims.classes;
    const int64_t stride = dims.stride;
    const int64_t erow = layout::emit_row(count);
    // Float results from logits with a gradient take the scaled passes. Double results, log-probs
    // (which may hold values above 0), empty targets and calls without a gradient take the
    // log-space ones: without beta there is no occupation check to vouch for the loss.
    const bool scaled = std::is_same_v<T, float> && dims.logits && count > 0 && grad != nullptr;

    for (int64_t k = 0; k <= count; ++k)
        ws.skip[k] = k >= 1 && k < count && labels[k] != labels[k - 1] ? 0.0 : kNegInf;
    std::fill(ws.skip + count + 1, ws.skip + count + 1 + layout::kSlack, kNegInf);
    std::fill(ws.frame + classes, ws.frame + classes + layout::kSlack, kNegInf);

    // Emissions: log-probs of the blank and of each label, per frame, in double (and as
    // probabilities for the scaled passes). Log-probs as given may lie above 0, and a run of huge
    // ones would overflow alpha to +inf, which an impossible class (-inf) then turns into NaN
    // instead of the zero probability it is: a frame's emissions above 0 are shifted down by their
    // largest, and the shifts are added back to the loss. The posteriors, and so the gradient, are
    // the same; inputs at or below 0 (and all logits) are not shifted at all.
    double shift = 0.0;
    constexpr int64_t kAhead = 8;  // frames; the loop body is short, so look further ahead
    for (int64_t t = 0; t < std::min(kAhead, frames); ++t)
        layout::prefetch_row(input + t * stride, classes, false);
    for (int64_t t = 0; t < frames; ++t) {
        if (t + kAhead < frames)
            layout::prefetch_row(input + (t + kAhead) * stride, classes, false);
        const Norm norm = load_frame(input + t * stride, classes, dims.logits, ws.frame, ws.work);
        if (!below_inf(ws.frame, classes) || !(norm.max > kNegInf)) return poisoned(grad, dims);
        double* e = ws.emit + t * erow;
        ws.log_norm[2 * t] = norm.max;
        ws.log_norm[2 * t + 1] = norm.log_sum;
        e[0] = (ws.frame[dims.blank] - norm.max) - norm.log_sum;
        for (int64_t k = 0; k < count; ++k)
            e[1 + k] = (ws.frame[labels[k]] - norm.max) - norm.log_sum;
        const double top = dims.logits ? 0.0 : *std::max_element(e, e + 1 + count);
        if (top > 0.0) {
            for (int64_t k = 0; k <= count; ++k) e[k] -= top;
            shift += top;
        }
        std::fill(e + 1 + count, e + erow, 0.0);
        if (scaled)
            for (int64_t k = 0; k < erow; k += lanes)
                hn::StoreU(exp_nonpositive(d, hn::LoadU(d, e + k)), d, ws.emit_lin + t * erow + k);
    }
    if (scaled) {
        double loss = 0;
        if (scaled_passes(input, grad, labels, dims, ws, &loss)) return loss;
    }
    const double loss = log_passes(input, grad, labels, dims, ws);
    if (!(shift > 0.0) || !(loss < std::numeric_limits<double>::infinity())) return loss;
    // A zero probability stays +inf whatever the shifts; a likelihood beyond the double range is
    // -inf, whose gradient is zeroed as every infinite loss's.
    const double unshifted = loss - shift;
    if (grad && std::isinf(unshifted)) zero_frames(grad, dims, 0);
    return unshifted;
}

double sample_f32(const float* input, float* grad, const int64_t* labels, const CtcSampleDims& dims,
                  const CtcScratch& scratch) {
    return run_sample(input, grad, labels, dims, scratch);
}

double sample_f64(const double* input, double* grad, const int64_t* labels,
                  const CtcSampleDims& dims, const CtcScratch& scratch) {
    return run_sample(input, grad, labels, dims, scratch);
}

}  // namespace HWY_NAMESPACE
}  // namespace lstm::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lstm::kernels::cpu {

HWY_EXPORT(sample_f32);
HWY_EXPORT(sample_f64);

size_t carve_ctc_scratch(void* base, int64_t max_time, int64_t classes, int64_t max_labels,
                         CtcScratch* scratch) {
    char* const start = static_cast<char*>(base);
    size_t offset = 0;
    // 64-byte aligned pieces, so that every row starts on a cache line.
    auto take = [&](int64_t count) {
        offset = (offset + 63) / 64 * 64;
        double* piece = start ? reinterpret_cast<double*>(start + offset) : nullptr;
        offset += static_cast<size_t>(count) * sizeof(double);
        return piece;
    };
    namespace cl = ctc_layout;
    CtcScratch s;
    s.alpha = take(max_time * cl::state_row(max_labels));
    s.emit = take(max_time * cl::emit_row(max_labels));
    s.emit_lin = take(max_time * cl::emit_row(max_labels));
    s.scales = take(2 * max_time);
    s.log_norm = take(2 * max_time);
    s.beta = take(2 * cl::state_row(max_labels));
    s.next = take(cl::state_row(max_labels));
    s.skip = take(max_labels + 1 + cl::kSlack);
    s.frame = take(classes + cl::kSlack);
    s.work = take(std::max(classes, max_labels + 1) + cl::kSlack);
    s.posterior = take(classes);
    if (scratch) *scratch = s;
    return (offset + 63) / 64 * 64;
}

double ctc_sample(const float* input, float* grad, const int64_t* labels, const CtcSampleDims& dims,
                  const CtcScratch& scratch) {
    apply_isa_cap();
    return HWY_DYNAMIC_DISPATCH(sample_f32)(input, grad, labels, dims, scratch);
}

double ctc_sample(const double* input, double* grad, const int64_t* labels,
                  const CtcSampleDims& dims, const CtcScratch& scratch) {
    apply_isa_cap();
    return HWY_DYNAMIC_DISPATCH(sample_f64)(input, grad, labels, dims, scratch);
}

}  // namespace lstm::kernels::cpu
#endif  // HWY_ONCE
