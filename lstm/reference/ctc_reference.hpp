#pragma once

// The double-precision CTC oracle the fast kernel (kernels/cpu/ctc.hpp) is judged against. It is
// written to be obviously right rather than fast, and independently of the kernel: one sample at
// a time, the textbook recursions of Graves et al. (2006) over the full extended label sequence
// l' = (blank, l1, blank, l2, ..., lL, blank), alpha and beta both including the emission of
// their own frame, std::exp/std::log in scalar loops, explicit -inf tests instead of tricks. Its
// own correctness is established in tests/ctc_test.cpp by enumerating every path for short
// inputs, by central finite differences, and by published values.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/loss/reduction.hpp"

namespace lstm::reference {

namespace ctc_detail {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(e^a + e^b), with -inf meaning probability zero.
inline double log_sum(double a, double b) {
    if (a == kNegInf) return b;
    if (b == kNegInf) return a;
    const double hi = std::max(a, b), lo = std::min(a, b);
    return hi + std::log1p(std::exp(lo - hi));
}

}  // namespace ctc_detail

// One sample's loss -log p(labels | log_probs) and its gradient w.r.t. the log-probabilities.
struct CtcSampleResult {
    double loss = 0;                     // +inf when no alignment has nonzero probability
    std::vector<double> grad_log_probs;  // (frames, classes): -posterior, all 0 when infeasible
};

// log_probs (frames, classes) row-major, any real values or -inf (they need not be normalized:
// the derivative is then still that of -log of the sum over alignments of prod_t e^lp).
// labels in [0, classes), none equal to blank.
inline CtcSampleResult ctc_sample_reference(const std::vector<double>& log_probs, int64_t frames,
                                            int64_t classes, const std::vector<int64_t>& labels,
                                            int64_t blank) {
    using ctc_detail::kNegInf;
    using ctc_detail::log_sum;
    check(frames >= 1 && static_cast<int64_t>(log_probs.size()) == frames * classes,
          "ctc_sample_reference: log_probs must have frames * classes elements");
    const int64_t count = static_cast<int64_t>(labels.size());
    const int64_t states = 2 * count + 1;
    std::vector<int64_t> ext(states, blank);  // l'
    for (int64_t i = 0; i < count; ++i) ext[2 * i + 1] = labels[i];
    auto lp = [&](int64_t t, int64_t s) { return log_probs[t * classes + ext[s]]; };
    // A state may be entered from two back when it is a label that differs from the label two
    // back (between them is a blank that may be skipped).
    auto can_skip = [&](int64_t s) { return s >= 2 && ext[s] != blank && ext[s] != ext[s - 2]; };

    std::vector<double> alpha(frames * states, kNegInf), beta(frames * states, kNegInf);
    auto a = [&](int64_t t, int64_t s) -> double& { return alpha[t * states + s]; };
    auto b = [&](int64_t t, int64_t s) -> double& { return beta[t * states + s]; };
    a(0, 0) = lp(0, 0);
    if (states > 1) a(0, 1) = lp(0, 1);
    for (int64_t t = 1; t < frames; ++t) {
        for (int64_t s = 0; s < states; ++s) {
            double sum = a(t - 1, s);
            if (s >= 1) sum = log_sum(sum, a(t - 1, s - 1));
            if (can_skip(s)) sum = log_sum(sum, a(t - 1, s - 2));
            a(t, s) = sum == kNegInf ? kNegInf : sum + lp(t, s);
        }
    }
    b(frames - 1, states - 1) = lp(frames - 1, states - 1);
    if (states > 1) b(frames - 1, states - 2) = lp(frames - 1, states - 2);
    for (int64_t t = frames - 2; t >= 0; --t) {
        for (int64_t s = 0; s < states; ++s) {
            double sum = b(t + 1, s);
            if (s + 1 < states) sum = log_sum(sum, b(t + 1, s + 1));
            if (s + 2 < states && can_skip(s + 2)) sum = log_sum(sum, b(t + 1, s + 2));
            b(t, s) = sum == kNegInf ? kNegInf : sum + lp(t, s);
        }
    }
    double loglik = a(frames - 1, states - 1);
    if (states > 1) loglik = log_sum(loglik, a(frames - 1, states - 2));

    CtcSampleResult out;
    out.loss = -loglik;
    out.grad_log_probs.assign(frames * classes, 0.0);
    if (loglik == kNegInf) return out;
    // alpha_t(s) beta_t(s) counts the emission of frame t twice; divide it out once.
    for (int64_t t = 0; t < frames; ++t) {
        for (int64_t s = 0; s < states; ++s) {
            if (a(t, s) == kNegInf || b(t, s) == kNegInf) continue;
            const double occupation = std::exp(a(t, s) + b(t, s) - lp(t, s) - loglik);
            out.grad_log_probs[t * classes + ext[s]] -= occupation;
        }
    }
    return out;
}

// log_softmax over the last dimension of rows of `classes` values, in double.
inline std::vector<double> log_softmax_rows(const std::vector<double>& x, int64_t classes) {
    std::vector<double> out(x.size());
    for (size_t r = 0; r * classes < x.size(); ++r) {
        const double* row = x.data() + r * classes;
        const double max = *std::max_element(row, row + classes);
        double sum = 0;
        for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max);
        // (x - max) - log(sum), not x - (max + log(sum)): near |max| ~ 1e38 the latter rounds
        // log(sum) away and gives tied classes probability 1 each.
        const double log_sum = std::log(sum);
        for (int64_t c = 0; c < classes; ++c) out[r * classes + c] = (row[c] - max) - log_sum;
    }
    return out;
}

// A whole batch with lstm::loss::ctc_loss's semantics (lstm/loss/ctc.hpp), in double.
struct CtcReferenceCase {
    int64_t max_time = 0, batch = 0, classes = 0;
    std::vector<double> input;  // (max_time, batch, classes) time-major
    bool logits = true;         // true: softmax applied inside; false: log-probs as given
    std::vector<std::vector<int64_t>> targets;  // per sample
    std::vector<int64_t> input_lengths;         // per sample, 1..max_time
    int64_t blank = 0;
    loss::Reduction reduction = loss::Reduction::mean;
    bool zero_infinity = false;
};

struct CtcReferenceResult {
    double loss = 0;             // reduced as ctc_loss returns it
    std::vector<double> losses;  // (batch) unreduced, 0 for infeasible under zero_infinity
    std::vector<double> grad;    // (max_time, batch, classes) w.r.t. the input as given
};

inline CtcReferenceResult ctc_reference(const CtcReferenceCase& c) {
    const int64_t stride = c.batch * c.classes;
    check(static_cast<int64_t>(c.input.size()) == c.max_time * stride &&
              static_cast<int64_t>(c.targets.size()) == c.batch &&
              static_cast<int64_t>(c.input_lengths.size()) == c.batch,
          "ctc_reference: inconsistent sizes");
    CtcReferenceResult out;
    out.losses.assign(c.batch, 0.0);
    out.grad.assign(c.input.size(), 0.0);
    double total = 0;
    for (int64_t n = 0; n < c.batch; ++n) {
        const int64_t frames = c.input_lengths[n];
        std::vector<double> x(frames * c.classes);
        for (int64_t t = 0; t < frames; ++t)
            for (int64_t k = 0; k < c.classes; ++k)
                x[t * c.classes + k] = c.input[t * stride + n * c.classes + k];
        const std::vector<double> lp = c.logits ? log_softmax_rows(x, c.classes) : x;
        const CtcSampleResult r =
            ctc_sample_reference(lp, frames, c.classes, c.targets[n], c.blank);
        const bool infinite = std::isinf(r.loss);
        const double loss = infinite && c.zero_infinity ? 0.0 : r.loss;
        out.losses[n] = loss;
        const double length = static_cast<double>(std::max<size_t>(c.targets[n].size(), 1));
        double scale = 1.0;
        if (c.reduction == loss::Reduction::mean) {
            scale = 1.0 / (length * static_cast<double>(c.batch));
            total += loss / length;
        } else {
            total += loss;
        }
        if (infinite) continue;  // zero gradient
        for (int64_t t = 0; t < frames; ++t) {
            for (int64_t k = 0; k < c.classes; ++k) {
                // d/dlogits = softmax - posterior = e^lp + d/dlog_probs.
                const double g = r.grad_log_probs[t * c.classes + k];
                out.grad[t * stride + n * c.classes + k] =
                    scale * (c.logits ? std::exp(lp[t * c.classes + k]) + g : g);
            }
        }
    }
    if (c.reduction == loss::Reduction::mean)
        total = c.batch == 0 ? std::numeric_limits<double>::quiet_NaN()
                             : total / static_cast<double>(c.batch);
    out.loss = total;
    return out;
}

}  // namespace lstm::reference
