// CTC loss: the published values (tests/ctc_cases.hpp names their sources), the double reference
// against an enumeration of every path and against central finite differences, the fast kernel
// against the reference (float and double, logits and log-probs, padded and concatenated targets,
// every reduction), per-frame gradient sums, padding, batch = per-sample, thread-count invariance,
// infeasible samples, errors, and the accuracy of float at T = 5000 against double.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ctc_cases.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/reference/ctc_reference.hpp"
#include "simd_levels.hpp"
#include "test_util.hpp"

namespace {

using lstm::Span;
using lstm::TensorView;
using lstm::loss::CtcArgs;
using lstm::loss::CtcOutputs;
using lstm::loss::Reduction;
using lstm::reference::CtcReferenceCase;
using lstm::reference::CtcReferenceResult;

using lstm::test::simd_element_t;
using lstm::test::ctc::brute_force;
using lstm::test::ctc::BruteForce;
using lstm::test::ctc::check_against_reference;
using lstm::test::ctc::kInf;
using lstm::test::ctc::kReductions;
using lstm::test::ctc::loss_tol;
using lstm::test::ctc::random_case;
using lstm::test::ctc::relative_error;
using lstm::test::ctc::rounded;
using lstm::test::ctc::single;
using lstm::test::ctc::Targets;

// ---------------------------------------------------------------------------------------------
// Running the library on a CtcReferenceCase
// ---------------------------------------------------------------------------------------------

template <typename T>
struct Run {
    T loss = 0;
    std::vector<T> grad;    // (T, N, C), NaN-initialized before the call
    std::vector<T> losses;  // (N)
};

// Runs lstm::loss::ctc_loss on the case with inputs rounded to T. Padded targets carry the
// garbage -5, blank, 10^6 past each target length.
template <typename T>
Run<T> run_ctc(const CtcReferenceCase& c, Targets layout = Targets::padded, bool with_grad = true,
               size_t workspace_threads = 0) {
    lstm::test::ctc::CtcCall<T> call(c, layout, {-5, c.blank, 1000000}, with_grad);
    Run<T> out;
    if (workspace_threads == 0) {
        out.loss = lstm::loss::ctc_loss(call.args, call.outputs);
    } else {
        std::vector<unsigned char> workspace(
            lstm::loss::ctc_workspace_bytes(call.args, static_cast<int>(workspace_threads)));
        out.loss =
            lstm::loss::ctc_loss(call.args, call.outputs, workspace.data(), workspace.size());
    }
    out.grad = std::move(call.grad);
    out.losses = std::move(call.losses);
    return out;
}

// log of the binomial coefficient, for the number of alignments of uniform inputs.
double log_choose(double n, double k) {
    return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Published values
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ctc_loss reproduces the published CTC values", "[ctc]", LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    lstm::test::ctc::check_published_ctc<T>(
        [](const CtcReferenceCase& c) { return run_ctc<T>(c); },
        [](const lstm::test::ctc::PublishedCtc& p, const CtcReferenceCase& c, const Run<T>&) {
            // The oracle agrees with the published value too.
            CHECK(lstm::reference::ctc_reference(rounded<T>(c)).loss ==
                  Approx(p.loss).epsilon(std::is_same_v<T, float> ? 2e-7 : 1e-10));
        });
}

// ---------------------------------------------------------------------------------------------
// The oracle and the kernel against an enumeration of every path
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ctc reference and kernel equal brute-force path enumeration for T <= 6",
                   "[ctc]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    struct Small {
        int64_t frames, classes, blank;
        std::vector<int64_t> labels;
    };
    const std::vector<Small> smalls = {
        {1, 3, 0, {}},        {1, 3, 0, {2}},       {2, 3, 0, {1, 2}},    {3, 3, 0, {1, 1}},
        {2, 3, 0, {1, 1}},    {4, 4, 0, {1, 2, 1}}, {5, 4, 0, {3, 3}},    {6, 4, 0, {1, 2, 3}},
        {6, 3, 2, {0, 1, 0}}, {5, 4, 3, {0}},       {6, 4, 1, {0, 0, 2}}, {6, 4, 0, {}},
        {4, 2, 0, {1, 1, 1}}, {6, 2, 1, {0, 0, 0}}, {3, 4, 0, {1, 2, 3}}, {6, 3, 0, {2, 2, 1, 1}},
    };
    uint64_t seed = 100;
    for (const auto& s : smalls) {
        for (const bool logits : {true, false}) {
            INFO("T " << s.frames << " C " << s.classes << " blank " << s.blank << " L "
                      << s.labels.size() << (logits ? " logits" : " log_probs"));
            CtcReferenceCase c =
                single(lstm::test::random_vector<double>(s.frames * s.classes, ++seed, -2.0, 2.0),
                       s.classes, s.labels, logits);
            c.blank = s.blank;
            const std::vector<double> lp =
                logits ? lstm::reference::log_softmax_rows(c.input, c.classes) : c.input;
            const BruteForce want = brute_force(lp, s.frames, s.classes, s.labels, s.blank);
            // The reference, w.r.t. log-probs.
            const auto ref =
                lstm::reference::ctc_sample_reference(lp, s.frames, s.classes, s.labels, s.blank);
            if (std::isinf(want.loss)) {
                CHECK(ref.loss == kInf);
            } else {
                CHECK(ref.loss == Approx(want.loss).epsilon(1e-13));
            }
            LSTM_CHECK_CLOSE(lstm::test::compare("reference grad_log_probs", ref.grad_log_probs,
                                                 want.grad_log_probs, 1e-14, 1e-12));
            // The kernel in double, w.r.t. whichever input it got.
            const Run<double> got = run_ctc<double>(c);
            std::vector<double> want_grad = want.grad_log_probs;
            if (logits && !std::isinf(want.loss))
                for (size_t i = 0; i < lp.size(); ++i) want_grad[i] += std::exp(lp[i]);
            if (std::isinf(want.loss)) {
                CHECK(got.loss == kInf);
            } else {
                CHECK(got.loss == Approx(want.loss).epsilon(1e-13));
            }
            LSTM_CHECK_CLOSE(lstm::test::compare("kernel grad", got.grad, want_grad, 1e-14, 1e-12));
        }
    }
}

TEMPLATE_TEST_CASE("ctc log-probs with -inf entries (impossible classes) match brute force",
                   "[ctc]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    const int64_t frames = 5, classes = 4;
    auto lp = lstm::test::random_vector<double>(frames * classes, 7, -3.0, 0.0);
    lp[0 * classes + 2] = -kInf;  // label 2 impossible at t = 0
    lp[2 * classes + 0] = -kInf;  // blank impossible at t = 2
    lp[3 * classes + 1] = -kInf;
    for (const auto& labels : std::vector<std::vector<int64_t>>{{2, 1}, {1, 1}, {3}, {2, 2, 3}}) {
        INFO("L " << labels.size());
        const BruteForce want = brute_force(lp, frames, classes, labels, 0);
        const Run<double> got = run_ctc<double>(single(lp, classes, labels, false));
        if (std::isinf(want.loss))
            CHECK(got.loss == kInf);
        else
            CHECK(got.loss == Approx(want.loss).epsilon(1e-13));
        LSTM_CHECK_CLOSE(
            lstm::test::compare("grad_log_probs", got.grad, want.grad_log_probs, 1e-14, 1e-12));
    }
}

TEMPLATE_TEST_CASE("ctc log-probs far above 0: an overflowing sum is no NaN, shifts cancel",
                   "[ctc]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    const double big = std::numeric_limits<double>::max();
    const auto all_zero = [](const std::vector<double>& g) {
        return std::all_of(g.begin(), g.end(), [](double x) { return x == 0.0; });
    };
    // Empty target, blank 0 on every frame: DBL_MAX twice, then -inf. A zero factor makes the
    // probability 0 (loss +inf), though the running sum overflows to +inf first.
    const Run<double> impossible =
        run_ctc<double>(single({big, -1.0, big, -1.0, -kInf, 0.0}, 2, {}, false));
    CHECK(impossible.loss == kInf);
    CHECK(all_zero(impossible.grad));
    // DBL_MAX twice, then 0: a likelihood beyond the double range, loss -inf, gradient zero as for
    // every infinite loss.
    const Run<double> huge =
        run_ctc<double>(single({big, -1.0, big, -1.0, 0.0, -1.0}, 2, {}, false));
    CHECK(huge.loss == -kInf);
    CHECK(all_zero(huge.grad));
    // Log-probs up to 40: the kernel shifts such frames down and adds the shifts back; the loss
    // and the gradient match the enumeration of all paths.
    const int64_t frames = 5, classes = 4;
    const auto lp = lstm::test::random_vector<double>(frames * classes, 11, -3.0, 40.0);
    for (const auto& labels : std::vector<std::vector<int64_t>>{{2, 1}, {1, 1}, {3}, {}}) {
        INFO("L " << labels.size());
        const BruteForce want = brute_force(lp, frames, classes, labels, 0);
        const Run<double> got = run_ctc<double>(single(lp, classes, labels, false));
        CHECK(got.loss == Approx(want.loss).epsilon(1e-13));
        LSTM_CHECK_CLOSE(
            lstm::test::compare("grad_log_probs", got.grad, want.grad_log_probs, 1e-14, 1e-12));
    }
}

TEMPLATE_TEST_CASE("ctc number of alignments of uniform inputs equals the closed form", "[ctc]",
                   LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    // With uniform inputs every path has probability C^-T, so loss = T ln C - ln(#alignments);
    // the count C(T + L - R, 2L) (R = adjacent repeats) is checked here against enumeration.
    const int64_t classes = 3;
    for (int64_t frames = 1; frames <= 6; ++frames) {
        for (const auto& labels : std::vector<std::vector<int64_t>>{
                 {}, {1}, {1, 2}, {1, 1}, {2, 1, 2}, {1, 1, 1}, {1, 2, 2}}) {
            INFO("T " << frames << " L " << labels.size());
            const std::vector<double> lp(frames * classes, -std::log(3.0));
            int64_t repeats = 0;
            for (size_t i = 1; i < labels.size(); ++i) repeats += labels[i] == labels[i - 1];
            const int64_t count = static_cast<int64_t>(labels.size());
            const BruteForce want = brute_force(lp, frames, classes, labels, 0);
            const double n = static_cast<double>(frames + count - repeats);
            const double closed = n >= 2.0 * count ? std::exp(log_choose(n, 2.0 * count)) : 0.0;
            CHECK(static_cast<double>(want.alignments) == Approx(closed).epsilon(1e-12));
            const Run<double> got = run_ctc<double>(single(lp, classes, labels, false));
            if (want.alignments == 0)
                CHECK(got.loss == kInf);
            else
                CHECK(got.loss == Approx(frames * std::log(3.0) - std::log(closed)).epsilon(1e-13));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ctc gradient matches central finite differences in double", "[ctc]",
                   LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    // Variable lengths, a repeat, an empty target and blank = C - 1; every input element,
    // including padded frames (whose finite difference is 0), for both input kinds and every
    // reduction. The kernel's analytic gradient is compared with differences of the reference.
    CtcReferenceCase base = random_case(5, {5, 3, 4}, {2, 0, 3}, 4, 3, 31);
    base.targets[0] = {1, 1};
    for (const bool logits : {true, false}) {
        for (const Reduction reduction : kReductions) {
            INFO((logits ? "logits" : "log_probs")
                 << ", reduction " << lstm::loss::to_string(reduction));
            CtcReferenceCase c = base;
            c.logits = logits;
            c.reduction = reduction;
            if (!logits) {  // unnormalized log-probs: the derivative is the partial one
                for (double& v : c.input) v -= 1.3;
            }
            const Run<double> got = run_ctc<double>(c);
            std::vector<double> fd(c.input.size());
            const double h = 1e-6;
            for (size_t i = 0; i < c.input.size(); ++i) {
                CtcReferenceCase up = c, down = c;
                up.input[i] += h;
                down.input[i] -= h;
                fd[i] = (lstm::reference::ctc_reference(up).loss -
                         lstm::reference::ctc_reference(down).loss) /
                        (2 * h);
            }
            LSTM_CHECK_CLOSE(
                lstm::test::compare("grad vs finite differences", got.grad, fd, 2e-8, 1e-6));
            check_against_reference(c, got, lstm::reference::ctc_reference(c));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel against the reference
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ctc_loss matches the reference on random batches", "[ctc]",
                   LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    lstm::test::ctc::check_random_batches<T>(
        lstm::test::ctc::random_batch_shapes(), 500,
        [](const CtcReferenceCase& c, Targets layout) { return run_ctc<T>(c, layout); });
}

TEMPLATE_TEST_CASE("ctc_loss stays exact and finite on extreme logits", "[ctc]",
                   LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    // Logits of +-100 and +-1e4: log-probs of -2e4 per frame, where a probability-space recursion
    // underflows (the float kernel's scaled passes then hand the sample to its log-space passes).
    // The double reference is exact in log space, so the kernel must agree with it.
    for (const double scale : {100.0, 1e4}) {
        INFO("scale " << scale);
        CtcReferenceCase c = random_case(12, {12, 9, 6}, {4, 3, 3}, 5, 0, 77, 1.0);
        for (double& v : c.input) v = v > 0 ? scale : (v < -0.5 ? -scale : 0.0);
        c.targets[1] = {2, 2, 2};  // needs two blanks: at 9 frames still feasible
        for (const bool logits : {true, false}) {
            CtcReferenceCase d = c;
            d.logits = logits;
            if (!logits) d.input = lstm::reference::log_softmax_rows(d.input, d.classes);
            d.reduction = Reduction::sum;
            d = rounded<T>(d);
            const Run<T> got = run_ctc<T>(d);
            const CtcReferenceResult want = lstm::reference::ctc_reference(d);
            check_against_reference(d, got, want);
            CHECK(lstm::test::all_finite(got.grad));
            for (T l : got.losses) CHECK(!std::isnan(l));
        }
    }
}

TEMPLATE_TEST_CASE("ctc in double at inputs of 1e20 to 1e300: the loss exact, the gradient bounded",
                   "[ctc]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    lstm::test::ctc::check_huge_inputs(
        [](const CtcReferenceCase& c) { return run_ctc<double>(c); });
}

// ---------------------------------------------------------------------------------------------
// Structural properties
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ctc gradient sums per frame to 0 (logits) or -scale (log-probs), padding is 0",
                   "[ctc]", LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    CtcReferenceCase c = random_case(20, {20, 11, 1, 16}, {6, 4, 0, 7}, 7, 2, 91);
    for (const bool logits : {true, false}) {
        for (const Reduction reduction : kReductions) {
            INFO((logits ? "logits" : "log_probs") << " " << lstm::loss::to_string(reduction));
            CtcReferenceCase d = c;
            d.logits = logits;
            if (!logits) d.input = lstm::reference::log_softmax_rows(d.input, d.classes);
            d.reduction = reduction;
            const Run<T> got = run_ctc<T>(d);  // gradient NaN-filled before the call
            for (int64_t n = 0; n < d.batch; ++n) {
                const double length = static_cast<double>(std::max<size_t>(d.targets[n].size(), 1));
                const double scale = reduction == Reduction::mean
                                         ? 1.0 / (length * static_cast<double>(d.batch))
                                         : 1.0;
                for (int64_t t = 0; t < d.max_time; ++t) {
                    INFO("n " << n << " t " << t);
                    const T* row = got.grad.data() + (t * d.batch + n) * d.classes;
                    if (t >= d.input_lengths[n]) {  // padded frame: exactly zero
                        for (int64_t k = 0; k < d.classes; ++k) CHECK(row[k] == T(0));
                        continue;
                    }
                    double sum = 0;
                    for (int64_t k = 0; k < d.classes; ++k) sum += static_cast<double>(row[k]);
                    const double want = logits ? 0.0 : -scale;
                    CHECK(sum == Approx(want).margin(std::is_same_v<T, float> ? 1e-6 : 1e-12));
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("ctc batch equals each sample run alone, bit for bit", "[ctc]",
                   LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    CtcReferenceCase c = random_case(25, {25, 9, 18, 25, 3}, {8, 2, 17, 0, 2}, 6, 0, 123);
    c.reduction = Reduction::sum;
    c.targets[2] = std::vector<int64_t>(9, 3);  // 9 repeats: 18 frames is exactly feasible
    for (const bool logits : {true, false}) {
        c.logits = logits;
        const Run<T> batch = run_ctc<T>(c);
        double total = 0;
        for (int64_t n = 0; n < c.batch; ++n) {
            INFO((logits ? "logits" : "log_probs") << " sample " << n);
            CtcReferenceCase one;
            one.max_time = c.max_time;
            one.batch = 1;
            one.classes = c.classes;
            one.logits = logits;
            one.reduction = Reduction::sum;
            one.targets = {c.targets[n]};
            one.input_lengths = {c.input_lengths[n]};
            for (int64_t t = 0; t < c.max_time; ++t)
                for (int64_t k = 0; k < c.classes; ++k)
                    one.input.push_back(c.input[(t * c.batch + n) * c.classes + k]);
            const Run<T> alone = run_ctc<T>(one);
            CHECK(alone.loss == batch.losses[n]);
            total += static_cast<double>(alone.loss);
            for (int64_t t = 0; t < c.max_time; ++t)
                for (int64_t k = 0; k < c.classes; ++k)
                    CHECK(alone.grad[t * c.classes + k] ==
                          batch.grad[(t * c.batch + n) * c.classes + k]);
        }
        CHECK(static_cast<double>(batch.loss) ==
              Approx(total).epsilon(std::is_same_v<T, float> ? 1e-7 : 1e-15));
        CHECK(std::isinf(static_cast<double>(batch.losses[2])) == false);
    }
}

TEMPLATE_TEST_CASE("ctc results are bit-identical for every thread count and workspace size",
                   "[ctc]", LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    CtcReferenceCase c =
        random_case(60, {60, 41, 59, 7, 33, 60, 12}, {20, 11, 25, 3, 9, 1, 5}, 11, 0, 321);
    c.reduction = Reduction::mean;
    const Run<T> want = run_ctc<T>(c, Targets::padded, true, 1);  // a one-thread workspace
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    for (const int threads : {1, 2, 3, 4, 8}) {
        omp_set_num_threads(threads);
        for (const size_t workspace_threads : {size_t(0), size_t(2), size_t(16)}) {
            INFO("threads " << threads << " workspace for " << workspace_threads);
            const Run<T> got = run_ctc<T>(c, Targets::padded, true, workspace_threads);
            CHECK(got.loss == want.loss);
            CHECK(got.losses == want.losses);
            CHECK(got.grad == want.grad);
        }
    }
    omp_set_num_threads(saved);
#endif
    // And the numbers themselves are right.
    check_against_reference(c, want, lstm::reference::ctc_reference(rounded<T>(c)));
}

TEMPLATE_TEST_CASE("ctc infeasible samples: +inf and zero gradient, or 0 under zero_infinity",
                   "[ctc]", LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    // Sample 0 needs 5 frames (3 labels + 2 repeats) but has 4; sample 1 needs more labels than
    // frames; sample 2 is fine.
    CtcReferenceCase c = random_case(6, {4, 3, 6}, {3, 4, 2}, 5, 0, 55);
    c.targets[0] = {2, 2, 2};
    for (const Reduction reduction : kReductions) {
        for (const bool zero_infinity : {false, true}) {
            INFO(lstm::loss::to_string(reduction) << " zero_infinity " << zero_infinity);
            c.reduction = reduction;
            c.zero_infinity = zero_infinity;
            const Run<T> got = run_ctc<T>(c);
            const CtcReferenceResult want = lstm::reference::ctc_reference(rounded<T>(c));
            for (int64_t n = 0; n < 2; ++n) {
                CHECK(static_cast<double>(got.losses[n]) == (zero_infinity ? 0.0 : kInf));
                for (int64_t t = 0; t < c.max_time; ++t)
                    for (int64_t k = 0; k < c.classes; ++k)
                        CHECK(got.grad[(t * c.batch + n) * c.classes + k] == T(0));
            }
            CHECK(std::isfinite(static_cast<double>(got.losses[2])));
            if (zero_infinity)
                CHECK(static_cast<double>(got.loss) == Approx(want.loss).epsilon(loss_tol<T>()));
            else
                CHECK(static_cast<double>(got.loss) == kInf);
            check_against_reference(c, got, want);
        }
    }
}

TEMPLATE_TEST_CASE("ctc log-softmax keeps log(sum) next to logits of 1e30 and beyond", "[ctc]",
                   LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    lstm::test::ctc::check_huge_tied_logits<T>(
        [](const CtcReferenceCase& c) { return run_ctc<T>(c); });
}

TEMPLATE_TEST_CASE(
    "ctc input NaN or +inf on a valid frame: that sample's loss and gradient are NaN", "[ctc]",
    LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    lstm::test::ctc::check_poisoned_sample<T>(
        [](const CtcReferenceCase& c) { return run_ctc<T>(c); });
}

TEMPLATE_TEST_CASE("ctc mean divides each loss by its target length (min 1), then averages",
                   "[ctc]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    CtcReferenceCase c = random_case(15, {15, 10, 12}, {4, 0, 6}, 5, 0, 8);
    c.reduction = Reduction::none;
    const Run<double> none = run_ctc<double>(c);
    c.reduction = Reduction::sum;
    const Run<double> sum = run_ctc<double>(c);
    c.reduction = Reduction::mean;
    const Run<double> mean = run_ctc<double>(c);
    const double want_mean = (none.losses[0] / 4 + none.losses[1] / 1 + none.losses[2] / 6) / 3;
    CHECK(mean.loss == Approx(want_mean).epsilon(1e-15));
    CHECK(sum.loss == Approx(none.losses[0] + none.losses[1] + none.losses[2]).epsilon(1e-15));
    CHECK(none.loss == sum.loss);  // none returns the sum; per-sample values are in `losses`
    CHECK(none.grad == sum.grad);
    // The mean's gradient is each sample's sum-gradient over N * max(L, 1).
    const double divisors[] = {12.0, 3.0, 18.0};
    for (int64_t t = 0; t < c.max_time; ++t)
        for (int64_t n = 0; n < 3; ++n)
            for (int64_t k = 0; k < c.classes; ++k) {
                const size_t i = (t * 3 + n) * c.classes + k;
                CHECK(mean.grad[i] ==
                      Approx(sum.grad[i] / divisors[n]).epsilon(1e-15).margin(1e-300));
            }
}

TEMPLATE_TEST_CASE("ctc_loss without a gradient gives the same losses", "[ctc]",
                   LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    CtcReferenceCase c = random_case(30, {30, 21}, {10, 7}, 8, 0, 4);
    c.reduction = Reduction::mean;
    const Run<T> with = run_ctc<T>(c);
    const Run<T> without = run_ctc<T>(c, Targets::padded, false);
    CHECK(with.loss == without.loss);
    CHECK(with.losses == without.losses);
    check_against_reference(c, with, lstm::reference::ctc_reference(rounded<T>(c)));
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("ctc_loss rejects bad arguments with lstm::Error naming them", "[ctc]") {
    using Catch::Contains;
    const int64_t T = 4, N = 2, C = 5;
    std::vector<float> x(T * N * C, 0.1f), g(T * N * C), losses(N);
    std::vector<int64_t> targets = {1, 2, 3, 4, 2, 0}, input_lengths = {4, 3},
                         target_lengths = {3, 2};
    auto make = [&] {
        CtcArgs<float> a;
        a.logits = TensorView<const float>(x.data(), {T, N, C});
        a.targets = TensorView<const int64_t>(targets.data(), {N, 3});
        a.input_lengths = input_lengths;
        a.target_lengths = target_lengths;
        return a;
    };
    CtcOutputs<float> out;
    out.grad_logits = TensorView<float>(g.data(), {T, N, C});
    CHECK_NOTHROW(lstm::loss::ctc_loss(make(), out));

    auto a = make();
    targets[1] = 0;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("targets[0][1] = 0 equals the blank"));
    targets[1] = 5;
    CHECK_THROWS_AS(lstm::loss::ctc_loss(a, out), lstm::Error);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("targets[0][1] = 5 is out of range for C = 5"));
    targets[1] = -1;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("targets[0][1] = -1"));
    targets[1] = 2;

    target_lengths[1] = 4;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("target_lengths[1] = 4 exceeds S = 3"));
    target_lengths[1] = -1;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("target_lengths[1] = -1 must be >= 0"));
    target_lengths[1] = 2;
    {
        // Lengths whose sum wraps around int64 (to 1, the size of these concatenated targets)
        // must not pass the size check and send the label scan past the targets.
        const int64_t huge = std::numeric_limits<int64_t>::max();
        std::vector<int64_t> one = {1}, three_lengths = {huge, huge, 3}, three_inputs = {4, 4, 4};
        std::vector<float> x3(T * 3 * C, 0.1f);
        CtcArgs<float> w;
        w.logits = TensorView<const float>(x3.data(), {T, 3, C});
        w.targets = TensorView<const int64_t>(one.data(), {1});
        w.input_lengths = three_inputs;
        w.target_lengths = three_lengths;
        CHECK_THROWS_WITH(lstm::loss::ctc_loss(w, CtcOutputs<float>{}),
                          Contains("target_lengths[1] = 9223372036854775807 makes the sum of "
                                   "target_lengths overflow int64"));
    }

    input_lengths[1] = 0;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("input_lengths[1] = 0 must be >= 1"));
    input_lengths[1] = 5;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("input_lengths[1] = 5 exceeds T = 4"));
    input_lengths[1] = 3;

    // Mismatched batch sizes.
    a.targets = TensorView<const int64_t>(targets.data(), {3, 2});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("targets has 3 rows but the batch has N = 2"));
    a = make();
    a.input_lengths = Span<const int64_t>(input_lengths.data(), 1);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("input_lengths must have N = 2"));
    a = make();
    a.target_lengths = Span<const int64_t>(target_lengths.data(), 3);
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("target_lengths must have N = 2"));

    // Concatenated targets must hold exactly the sum of the target lengths.
    a = make();
    a.targets = TensorView<const int64_t>(targets.data(), {4});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("concatenated targets must have 5 elements"));
    targets = {1, 2, 3, 4, 2, 0};
    a.targets = TensorView<const int64_t>(targets.data(), {5});
    targets[3] = 0;  // sample 1, label 0 in the concatenated layout
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("targets[3] (sample 1, label 0) = 0 equals the blank"));
    targets[3] = 4;

    // Input and output naming.
    a = make();
    a.log_probs = a.logits;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("got both"));
    a.logits = {};
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out),
                      Contains("grad_logits was given but the input is log_probs"));
    a = make();
    a.logits = {};
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("got neither"));
    a = make();
    CtcOutputs<float> wrong;
    wrong.grad_log_probs = TensorView<float>(g.data(), {T, N, C});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong),
                      Contains("grad_log_probs was given but the input is logits"));
    wrong = {};
    wrong.grad_logits = TensorView<float>(g.data(), {T, N, C - 1});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong), Contains("grad_logits must have shape"));
    wrong.grad_logits = TensorView<float>(x.data(), {T, N, C});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong), Contains("must not overlap logits"));
    wrong = {};
    wrong.losses = TensorView<float>(losses.data(), {N + 1});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong), Contains("losses must have shape"));
    // Losses inside the gradient were written over it silently; inside the input they overwrote
    // what was passed as const. Both are refused before anything is written.
    wrong.grad_logits = TensorView<float>(g.data(), {T, N, C});
    wrong.losses = TensorView<float>(g.data() + 1, {N});
    const std::vector<float> g_before = g;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong),
                      Contains("losses must not overlap grad_logits"));
    CHECK(g == g_before);
    wrong.grad_logits = {};
    wrong.losses = TensorView<float>(x.data() + T * N * C - 1, {N});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, wrong), Contains("losses must not overlap logits"));
    {
        CtcArgs<float> lp = make();
        lp.log_probs = lp.logits;
        lp.logits = {};
        CtcOutputs<float> o;
        o.grad_log_probs = TensorView<float>(g.data(), {T, N, C});
        o.losses = TensorView<float>(g.data() + T * N * C - 1, {N});
        CHECK_THROWS_WITH(lstm::loss::ctc_loss(lp, o),
                          Contains("losses must not overlap grad_log_probs"));
        o.grad_log_probs = {};
        o.losses = TensorView<float>(x.data(), {N});
        CHECK_THROWS_WITH(lstm::loss::ctc_loss(lp, o),
                          Contains("losses must not overlap log_probs"));
    }
    wrong = {};
    a.blank = 5;
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("blank = 5 is out of range"));
    a = make();
    a.logits = TensorView<const float>(x.data(), {T, N * C});
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out), Contains("logits must have rank 3"));

    // Workspace.
    a = make();
    const size_t need = lstm::loss::ctc_workspace_bytes(a, 1);
    std::vector<unsigned char> workspace(need);
    CHECK_NOTHROW(lstm::loss::ctc_loss(a, out, workspace.data(), need));
    CHECK_THROWS_WITH(lstm::loss::ctc_loss(a, out, workspace.data(), need - 1),
                      Contains("workspace has " + std::to_string(need - 1) + " bytes"));
}

// ---------------------------------------------------------------------------------------------
// Long inputs: float against double at T = 5000
// ---------------------------------------------------------------------------------------------
// Tagged [long]: they check float's accuracy over many frames, which the sanitized run of
// scripts/sanitize.sh leaves out (its -O0 build takes minutes on them; the shorter cases above
// run the same code under the sanitizers).

TEMPLATE_TEST_CASE("ctc at T = 5000: float agrees with the double reference (grad 1e-4, loss 1e-6)",
                   "[ctc][long]", LSTM_SIMD_LEVELS) {
    LSTM_ON_SIMD_LEVEL(TestType);
    // Two inputs a float recursion gets wrong: random logits, and "peaky" logits like those of
    // a trained model (blank dominant, each label spiking once near its place), where alpha
    // spans thousands of nats. The reference runs in double on the float-rounded inputs, so the
    // difference is the float computation's own error.
    const int64_t T = 5000, C = 40, L = 300;
    const CtcReferenceCase random = random_case(T, {T, 4321}, {L, 200}, C, 0, 2024, 3.0);
    const CtcReferenceCase peaky = lstm::test::ctc::peaky_case(random, 99);
    lstm::test::ctc::for_each_long_case(random, peaky, [](const CtcReferenceCase& c) {
        const CtcReferenceResult want = lstm::reference::ctc_reference(c);
        const Run<float> got = run_ctc<float>(c);
        lstm::test::ctc::check_float_accuracy(got, want);
        for (int64_t n = 0; n < c.batch; ++n)
            CHECK(std::abs(static_cast<double>(got.losses[n]) - want.losses[n]) <=
                  1e-6 * std::abs(want.losses[n]));
        // In double the kernel agrees with the reference to the precision double itself has
        // here: log alpha reaches 2e4, whose spacing is 4e-12, and 5000 roundings of it
        // random-walk to about 1e-10 in the log-probability of an occupation.
        const Run<double> exact = run_ctc<double>(c);
        const double exact_error = relative_error(exact.grad, want.grad);
        UNSCOPED_INFO("double: gradient relative error " << exact_error);
        CHECK(exact_error <= 1e-9);
        CHECK(exact.loss == Approx(want.loss).epsilon(1e-12));
    });
}

TEMPLATE_TEST_CASE("ctc at T = 5000 with uniform inputs equals T ln C - ln C(T + L - R, 2L)",
                   "[ctc][long]", LSTM_SIMD_FLOAT_TYPES) {
    using T = simd_element_t<TestType>;
    LSTM_ON_SIMD_LEVEL(TestType);
    const int64_t frames = 5000, classes = 20;
    CtcReferenceCase c = random_case(frames, {frames, 3001}, {600, 1400}, classes, 0, 5);
    for (double& v : c.input) v = 0.7;
    c.targets[1].assign(1400, 4);  // 1399 repeats: needs 2799 frames of its 3001
    c.reduction = Reduction::none;
    const Run<T> got = run_ctc<T>(c);
    for (int64_t n = 0; n < 2; ++n) {
        const auto& labels = c.targets[n];
        int64_t repeats = 0;
        for (size_t i = 1; i < labels.size(); ++i) repeats += labels[i] == labels[i - 1];
        const double count = static_cast<double>(labels.size());
        const double frames_n = static_cast<double>(c.input_lengths[n]);
        const double want = frames_n * std::log(static_cast<double>(classes)) -
                            log_choose(frames_n + count - static_cast<double>(repeats), 2 * count);
        INFO("sample " << n << " loss " << want);
        CHECK(static_cast<double>(got.losses[n]) ==
              Approx(want).epsilon(std::is_same_v<T, float> ? 1e-7 : 1e-12));
    }
    CHECK(lstm::test::all_finite(got.grad));
}
