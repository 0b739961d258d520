// CTC test cases shared by tests/ctc_test.cpp, tests/cuda_loss_host_test.cpp and
// tests/gpu/losses_test.cpp: the case builders, a case as ctc_loss's arguments, the comparison with
// the double oracle, the published values (tests/ctc_cases.hpp names their sources), the
// random-batch sweep and the long inputs where float is checked against double. Each test file
// brings its own way of running a case (the CPU kernel, the emulated CUDA kernels, the GPU); a run
// result is any struct with `loss`, `losses` and `grad`.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lstm/loss/ctc.hpp"
#include "lstm/loss/reduction.hpp"
#include "lstm/reference/ctc_reference.hpp"
#include "test_util.hpp"

namespace lstm::test::ctc {

using lstm::Span;
using lstm::TensorView;
using lstm::loss::Reduction;
using lstm::reference::CtcReferenceCase;
using lstm::reference::CtcReferenceResult;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Reduction kReductions[] = {Reduction::none, Reduction::sum, Reduction::mean};

// How a run passes the targets: (N, S) padded or concatenated.
enum class Targets { padded, concatenated };

// The case with its inputs rounded to T, so that the reference sees exactly what the kernel saw.
template <typename T>
CtcReferenceCase rounded(CtcReferenceCase c) {
    for (double& v : c.input) v = static_cast<double>(static_cast<T>(v));
    return c;
}

// A case as lstm::loss::ctc_loss takes it: inputs rounded to T, targets padded or concatenated,
// and NaN-filled outputs, so that an element the loss leaves unwritten shows. Padded targets get
// S = longest + 2 with `garbage` past each target length, cycled by position, values that must
// never be read. Owns what its views point into, hence neither copied nor moved.
template <typename T>
struct CtcCall {
    std::vector<T> input;
    std::vector<int64_t> targets, target_lengths;
    std::vector<T> grad;    // (T, N, C); in the outputs only when asked for
    std::vector<T> losses;  // (N)
    lstm::loss::CtcArgs<T> args;
    lstm::loss::CtcOutputs<T> outputs;

    CtcCall(const CtcReferenceCase& c, Targets layout, const std::vector<int64_t>& garbage,
            bool with_grad)
        : input(lstm::test::cast_vector<T>(c.input)), target_lengths(c.batch) {
        size_t longest = 0;
        for (const auto& t : c.targets) longest = std::max(longest, t.size());
        const int64_t stride = static_cast<int64_t>(longest) + 2;
        for (int64_t n = 0; n < c.batch; ++n) {
            const auto& t = c.targets[n];
            target_lengths[n] = static_cast<int64_t>(t.size());
            targets.insert(targets.end(), t.begin(), t.end());
            if (layout == Targets::padded)
                for (int64_t i = static_cast<int64_t>(t.size()); i < stride; ++i)
                    targets.push_back(garbage[static_cast<size_t>(i) % garbage.size()]);
        }
        const TensorView<const T> view(input.data(), {c.max_time, c.batch, c.classes});
        (c.logits ? args.logits : args.log_probs) = view;
        args.targets =
            layout == Targets::padded
                ? TensorView<const int64_t>(targets.data(), {c.batch, stride})
                : TensorView<const int64_t>(targets.data(), {static_cast<int64_t>(targets.size())});
        args.input_lengths = Span<const int64_t>(c.input_lengths.data(), c.batch);
        args.target_lengths = Span<const int64_t>(target_lengths.data(), c.batch);
        args.blank = c.blank;
        args.reduction = c.reduction;
        args.zero_infinity = c.zero_infinity;

        grad.assign(input.size(), std::numeric_limits<T>::quiet_NaN());
        losses.assign(c.batch, std::numeric_limits<T>::quiet_NaN());
        if (with_grad)
            (c.logits ? outputs.grad_logits : outputs.grad_log_probs) =
                TensorView<T>(grad.data(), {c.max_time, c.batch, c.classes});
        outputs.losses = TensorView<T>(losses.data(), {c.batch});
    }
    CtcCall(const CtcCall&) = delete;
    CtcCall& operator=(const CtcCall&) = delete;
};

// A random case: logits uniform in [-scale, scale], labels from a small alphabet so repeats occur.
inline CtcReferenceCase random_case(int64_t max_time, std::vector<int64_t> input_lengths,
                                    std::vector<int64_t> target_lengths, int64_t classes,
                                    int64_t blank, uint64_t seed, double scale = 2.0) {
    CtcReferenceCase c;
    c.max_time = max_time;
    c.batch = static_cast<int64_t>(input_lengths.size());
    c.classes = classes;
    c.input = lstm::test::random_vector<double>(max_time * c.batch * classes, seed, -scale, scale);
    c.input_lengths = std::move(input_lengths);
    c.blank = blank;
    std::mt19937_64 rng(seed + 1);
    for (int64_t length : target_lengths) {
        std::vector<int64_t> labels;
        for (int64_t i = 0; i < length; ++i) {
            const auto label = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes - 1));
            labels.push_back(label >= blank ? label + 1 : label);  // skip the blank
        }
        c.targets.push_back(labels);
    }
    return c;
}

// A one-sample case from explicit rows (T, C), reduction sum.
inline CtcReferenceCase single(std::vector<double> rows, int64_t classes,
                               std::vector<int64_t> labels, bool logits = true) {
    CtcReferenceCase c;
    c.max_time = static_cast<int64_t>(rows.size()) / classes;
    c.batch = 1;
    c.classes = classes;
    c.input = std::move(rows);
    c.logits = logits;
    c.targets = {std::move(labels)};
    c.input_lengths = {c.max_time};
    c.reduction = Reduction::sum;
    return c;
}

template <typename T>
double loss_tol() {
    return std::is_same_v<T, float> ? 1e-6 : 1e-12;
}

// Kernel vs reference: loss, per-sample losses, gradient. Infinite values must match exactly.
template <typename T, template <typename> class Result>
void check_against_reference(const CtcReferenceCase& c, const Result<T>& got,
                             const CtcReferenceResult& want) {
    const double tol = loss_tol<T>();
    if (std::isinf(want.loss)) {
        CHECK(static_cast<double>(got.loss) == want.loss);
    } else {
        CHECK(static_cast<double>(got.loss) == Approx(want.loss).epsilon(tol).margin(tol));
    }
    for (int64_t n = 0; n < c.batch; ++n) {
        INFO("sample " << n);
        if (std::isinf(want.losses[n]))
            CHECK(static_cast<double>(got.losses[n]) == want.losses[n]);
        else
            CHECK(static_cast<double>(got.losses[n]) ==
                  Approx(want.losses[n]).epsilon(tol).margin(tol));
    }
    double max_grad = 0;
    for (double g : want.grad) max_grad = std::max(max_grad, std::abs(g));
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", got.grad, want.grad, tol * (max_grad + 1e-300),
                                         std::is_same_v<T, float> ? 1e-6 : 1e-11));
}

// Norm-wise relative error ||got - want|| / ||want||.
template <typename A>
double relative_error(const std::vector<A>& got, const std::vector<double>& want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = static_cast<double>(got[i]) - want[i];
        diff += d * d;
        norm += want[i] * want[i];
    }
    return std::sqrt(diff / norm);
}

// ---------------------------------------------------------------------------------------------
// The published values (each with its source)
// ---------------------------------------------------------------------------------------------

struct PublishedCtc {
    const char* name;
    CtcReferenceCase c;
    double loss;
};

// The published cases, as logits; index 3 is the two-frame case with a published gradient.
inline std::vector<PublishedCtc> published_ctc_cases() {
    const double ln4 = std::log(4.0);
    std::vector<double> rising(15), falling(15);
    for (int i = 0; i < 15; ++i) rising[i] = i + 1;  // rows [1..5], [6..10], [11..15]
    for (int t = 0; t < 3; ++t)
        for (int k = 0; k < 5; ++k) falling[t * 5 + k] = -5.0 * (t + 1) + k;  // [-5..-1], ...
    return {
        {"rising rows, labels [3, 3]", single(rising, 5, {3, 3}), 7.3557431878},
        {"falling rows, labels [2, 3]", single(falling, 5, {2, 3}), 4.9388498670},
        {"zero logits, T 1, labels [1]", single(std::vector<double>(5, 0.0), 5, {1}),
         std::log(5.0)},
        {"two peaked frames, labels [1, 2]",
         single({0.1, 0.6, 0.1, 0.1, 0.1, 0.1, 0.1, 0.6, 0.1, 0.1}, 5, {1, 2}), 2.4628583915},
        {"uniform, T 2, labels [1, 1] (infeasible)", single(std::vector<double>(8, 0.3), 4, {1, 1}),
         kInf},
        {"uniform, T 3, labels [1, 1] (one alignment)",
         single(std::vector<double>(12, 0.3), 4, {1, 1}), 3 * ln4},
        {"uniform, T 3, empty labels", single(std::vector<double>(12, 0.3), 4, {}), 3 * ln4},
    };
}

// Every published case, as logits and as log-probs, through `run(case)`: the loss equals the
// published value (an infeasible case gives +inf and an exactly zero gradient), and
// `also(published, case, result)` adds the caller's checks. Then the published logits-gradient of
// the two-frame case: -0.708125 on the label class, +0.177031 on each other class, per frame.
template <typename T, typename Run, typename Also>
void check_published_ctc(Run run, Also also) {
    // The table gives 11 significant digits.
    const double tol = std::is_same_v<T, float> ? 2e-7 : 3e-11;
    const std::vector<PublishedCtc> cases = published_ctc_cases();
    for (const auto& p : cases) {
        for (const bool logits : {true, false}) {
            INFO(p.name << (logits ? ", logits" : ", log_probs"));
            CtcReferenceCase c = p.c;
            if (!logits) {  // the same distribution given as log-probs
                c.input = lstm::reference::log_softmax_rows(c.input, c.classes);
                c.logits = false;
            }
            const auto got = run(c);
            if (std::isinf(p.loss)) {
                CHECK(static_cast<double>(got.loss) == kInf);
                for (T g : got.grad) CHECK(g == T(0));  // finite, and exactly zero
            } else {
                CHECK(static_cast<double>(got.loss) == Approx(p.loss).epsilon(tol));
            }
            also(p, c, got);
        }
    }
    const auto got = run(cases[3].c);
    for (int t = 0; t < 2; ++t)
        for (int k = 0; k < 5; ++k) {
            INFO("t " << t << " class " << k);
            const double want = k == t + 1 ? -0.708125 : 0.177031;
            CHECK(static_cast<double>(got.grad[t * 5 + k]) == Approx(want).margin(1e-6));
        }
}

// ---------------------------------------------------------------------------------------------
// Random batches against the reference
// ---------------------------------------------------------------------------------------------

struct BatchShape {
    int64_t max_time;
    std::vector<int64_t> input_lengths, target_lengths;
    int64_t classes, blank;
    double scale;
};

inline std::vector<BatchShape> random_batch_shapes() {
    return {
        {7, {7, 5, 1, 6}, {3, 2, 0, 1}, 5, 0, 2.0},
        {50, {50, 33, 17, 49, 8}, {20, 15, 5, 1, 3}, 6, 5, 3.0},  // repeats, T near L + R
        {30, {30, 30}, {14, 9}, 3, 1, 1.0},                       // tiny alphabet: many repeats
        {40, {40, 12, 25}, {39, 12, 3}, 9, 4, 20.0},  // saturated logits, infeasible samples
        {13, {13}, {6}, 2, 0, 2.0},
    };
}

// Each shape (seeds seed + 1, seed + 2, ...) as logits and log-probs, every reduction, with and
// without zero_infinity, padded and concatenated targets, inputs rounded to T: `run(case,
// layout)` against the reference, and a finite gradient.
template <typename T, typename Run>
void check_random_batches(const std::vector<BatchShape>& shapes, uint64_t seed, Run run) {
    for (const auto& s : shapes) {
        const CtcReferenceCase base = random_case(s.max_time, s.input_lengths, s.target_lengths,
                                                  s.classes, s.blank, ++seed, s.scale);
        for (const bool logits : {true, false}) {
            for (const Reduction reduction : kReductions) {
                for (const bool zero_infinity : {false, true}) {
                    for (const Targets layout : {Targets::padded, Targets::concatenated}) {
                        INFO("T " << s.max_time << " C " << s.classes << " "
                                  << (logits ? "logits" : "log_probs") << " "
                                  << lstm::loss::to_string(reduction) << " zero_infinity "
                                  << zero_infinity << " "
                                  << (layout == Targets::padded ? "padded" : "concatenated"));
                        CtcReferenceCase c = base;
                        c.logits = logits;
                        if (!logits)
                            c.input = lstm::reference::log_softmax_rows(c.input, c.classes);
                        c.reduction = reduction;
                        c.zero_infinity = zero_infinity;
                        c = rounded<T>(c);
                        const auto got = run(c, layout);
                        check_against_reference(c, got, lstm::reference::ctc_reference(c));
                        CHECK(lstm::test::all_finite(got.grad));
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Logits near the end of the float range
// ---------------------------------------------------------------------------------------------

// Two frames of two tied logits v, no labels: loss = 2 log 2 whatever v, gradient -1/2 for the
// blank and +1/2 for the other class. log_softmax must be (x - max) - log(sum): as
// x - (max + log(sum)) the log 2 vanishes next to v = 1e30 and the loss came out 0 (found by
// tests/fuzz/ctc_fuzz.cpp). `run(case)` runs a case; the reference must agree too.
template <typename T, typename Run>
void check_huge_tied_logits(Run run) {
    for (const double v : {1e30, 3e38, -3e38}) {
        INFO("logits " << v);
        const CtcReferenceCase c = rounded<T>(single({v, v, v, v}, 2, {}));
        const auto got = run(c);
        CHECK(static_cast<double>(got.loss) == Approx(2 * std::log(2.0)).epsilon(loss_tol<T>()));
        for (size_t i = 0; i < 4; ++i)
            CHECK(static_cast<double>(got.grad[i]) == Approx(i % 2 == 0 ? -0.5 : 0.5));
        check_against_reference(c, got, lstm::reference::ctc_reference(c));
    }
}

// ---------------------------------------------------------------------------------------------
// Non-finite input
// ---------------------------------------------------------------------------------------------

// Counts the elements of a sample's frames [t0, t1) that fail `bad`, and describes the first few.
template <typename T, typename Bad>
int64_t count_bad(const std::vector<T>& grad, const CtcReferenceCase& c, int64_t n, int64_t t0,
                  int64_t t1, Bad bad, std::string* where) {
    int64_t count = 0;
    for (int64_t t = t0; t < t1; ++t)
        for (int64_t k = 0; k < c.classes; ++k) {
            const double g = static_cast<double>(grad[(t * c.batch + n) * c.classes + k]);
            if (!bad(g)) continue;
            if (++count <= 4)
                *where += " [t " + std::to_string(t) + " class " + std::to_string(k) +
                          "] = " + std::to_string(g);
        }
    return count;
}

// PyTorch's semantics for input without a defined distribution: sample 0's valid frames hold
// `value` (NaN, +inf, or for logits a whole frame of -inf), so its loss is NaN and its gradient is
// NaN on every valid frame, whatever zero_infinity says; its padded frame stays exact zeros; NaN
// on a padded frame of sample 2 is never read; samples 1 and 2 are bit-identical to the clean
// run, which is checked against the reference. `run(case)` runs a case.
template <typename T, typename Run>
void check_poisoned_sample(Run run) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const bool logits : {true, false}) {
        for (const bool zero_infinity : {false, true}) {
            for (const double value : {nan, kInf, -kInf}) {
                if (!logits && value == -kInf) continue;  // a -inf log-prob is probability 0
                INFO((logits ? "logits" : "log_probs")
                     << " zero_infinity " << zero_infinity << ", poison " << value);
                CtcReferenceCase clean = random_case(6, {5, 6, 4}, {2, 3, 1}, 5, 0, 91);
                clean.logits = logits;
                if (!logits) clean.input = lstm::reference::log_softmax_rows(clean.input, 5);
                clean.zero_infinity = zero_infinity;
                clean = rounded<T>(clean);
                CtcReferenceCase poisoned = clean;
                auto at = [&](int64_t t, int64_t n, int64_t k) -> double& {
                    return poisoned.input[static_cast<size_t>((t * 3 + n) * 5 + k)];
                };
                if (value == -kInf) {
                    for (int64_t k = 0; k < 5; ++k) at(2, 0, k) = value;
                } else {
                    at(2, 0, 1) = value;
                }
                at(5, 2, 3) = nan;  // frame 5 of sample 2 (4 frames) is padding
                const auto want = run(clean);
                const auto got = run(poisoned);
                check_against_reference(clean, want, lstm::reference::ctc_reference(clean));
                CHECK(std::isnan(static_cast<double>(got.loss)));
                CHECK(std::isnan(static_cast<double>(got.losses[0])));
                std::string where;
                CHECK(count_bad(
                          got.grad, clean, 0, 0, 5, [](double g) { return !std::isnan(g); },
                          &where) == 0);
                CHECK(count_bad(
                          got.grad, clean, 0, 5, 6, [](double g) { return g != 0.0; }, &where) ==
                      0);
                INFO("not NaN on a valid frame, or not 0 on padding:" << where);
                CHECK(where.empty());
                for (int64_t n = 1; n < 3; ++n) {
                    INFO("sample " << n);
                    CHECK(std::memcmp(&got.losses[n], &want.losses[n], sizeof(T)) == 0);
                    for (int64_t t = 0; t < 6; ++t)
                        CHECK(std::memcmp(&got.grad[(t * 3 + n) * 5], &want.grad[(t * 3 + n) * 5],
                                          5 * sizeof(T)) == 0);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Long inputs: float against the double reference
// ---------------------------------------------------------------------------------------------

// `c` (blank 0) with "peaky" logits like those of a trained model, which a float recursion gets
// wrong: noise, the blank dominant, and each label spiking once near the start of its segment of
// the sample's frames, where alpha spans thousands of nats. Padding frames are plain noise.
inline CtcReferenceCase peaky_case(CtcReferenceCase c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (int64_t n = 0; n < c.batch; ++n) {
        const auto& labels = c.targets[n];
        const int64_t frames = c.input_lengths[n];
        const auto count = static_cast<int64_t>(labels.size());
        for (int64_t t = 0; t < c.max_time; ++t) {
            double* row = c.input.data() + (t * c.batch + n) * c.classes;
            for (int64_t k = 0; k < c.classes; ++k) row[k] = 2.0 * noise(rng);
            row[0] += 8.0;
            if (t < frames && t * count % frames < 3 * count)
                row[labels[t * count / frames]] += 14.0;
        }
    }
    return c;
}

// `random` and `peaky`, each as logits and as log-probs, reduction sum, inputs rounded to float:
// `check(case)` under an INFO that names it.
template <typename Check>
void for_each_long_case(const CtcReferenceCase& random, const CtcReferenceCase& peaky,
                        Check check) {
    for (const CtcReferenceCase* base : {&random, &peaky}) {
        for (const bool logits : {true, false}) {
            INFO((base == &random ? "random" : "peaky") << (logits ? " logits" : " log_probs"));
            CtcReferenceCase c = *base;
            c.reduction = Reduction::sum;
            c.logits = logits;
            if (!logits) c.input = lstm::reference::log_softmax_rows(c.input, c.classes);
            check(rounded<float>(c));
        }
    }
}

// A float run of a long case against the double reference: gradient within 1e-4 and loss within
// 1e-6, relative; the errors are reported either way.
template <template <typename> class Result>
void check_float_accuracy(const Result<float>& got, const CtcReferenceResult& want) {
    const double grad_error = relative_error(got.grad, want.grad);
    const double loss_error =
        std::abs(static_cast<double>(got.loss) - want.loss) / std::abs(want.loss);
    UNSCOPED_INFO("float: gradient relative error " << grad_error << ", loss relative error "
                                                    << loss_error << ", loss " << want.loss);
    CHECK(grad_error <= 1e-4);
    CHECK(loss_error <= 1e-6);
}

// Braun's CTC shape: T 1000, N 32, C 59, 100 labels, input lengths linspace(500, 1000, 32) (or
// all T), logits U(-1, 1), PyTorch's mean.
inline CtcReferenceCase braun_case(bool equal_lengths = false) {
    const int64_t T = 1000, N = 32, C = 59, L = 100;
    std::vector<int64_t> input_lengths(N);
    for (int64_t n = 0; n < N; ++n)
        input_lengths[n] = equal_lengths ? T : 500 + (500 * n) / (N - 1);
    return random_case(T, input_lengths, std::vector<int64_t>(N, L), C, 0, 42, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Brute force: every path of length T over C classes, the oracle for small cases
// ---------------------------------------------------------------------------------------------

struct BruteForce {
    double loss = 0;
    std::vector<double> grad_log_probs;  // -posterior
    int64_t alignments = 0;              // paths that collapse to the labels
};

inline BruteForce brute_force(const std::vector<double>& log_probs, int64_t frames, int64_t classes,
                              const std::vector<int64_t>& labels, int64_t blank) {
    std::vector<int64_t> path(frames, 0);
    std::vector<std::vector<int64_t>> valid_paths;
    std::vector<double> scores;
    while (true) {
        std::vector<int64_t> collapsed;
        for (int64_t t = 0; t < frames; ++t) {
            if (path[t] == blank || (t > 0 && path[t] == path[t - 1])) continue;
            collapsed.push_back(path[t]);
        }
        if (collapsed == labels) {
            double score = 0;
            for (int64_t t = 0; t < frames; ++t) score += log_probs[t * classes + path[t]];
            valid_paths.push_back(path);
            scores.push_back(score);
        }
        int64_t t = 0;
        while (t < frames && ++path[t] == classes) path[t++] = 0;
        if (t == frames) break;
    }
    BruteForce out;
    out.alignments = static_cast<int64_t>(valid_paths.size());
    out.grad_log_probs.assign(frames * classes, 0.0);
    double max = -kInf;
    for (double s : scores) max = std::max(max, s);
    if (max == -kInf) {
        out.loss = kInf;
        return out;
    }
    double sum = 0;
    for (double s : scores) sum += std::exp(s - max);
    const double loglik = max + std::log(sum);
    out.loss = -loglik;
    for (size_t i = 0; i < valid_paths.size(); ++i)
        for (int64_t t = 0; t < frames; ++t)
            out.grad_log_probs[t * classes + valid_paths[i][t]] -= std::exp(scores[i] - loglik);
    return out;
}

// Double inputs of 1e20 to 1e300 (T 6, C 4, labels [3, 3] and [1, 2], logits and log-probs).
// At such scales softmax is one-hot and the best alignment takes the whole posterior, which
// the enumeration finds exactly. `run(case)` runs a double case (loss, grad).
template <typename Run>
void check_huge_inputs(Run run) {
    // The posterior exp(alpha + beta - loglik) cancels numbers whose spacing is far above 1 there:
    // a rounding of its argument above 0 once carried the exponential past its exponent field (a
    // gradient entry of -4.5e57 at 1e30). Now every entry stays a difference of probabilities
    // (logits: [-1, 1]; log-probs: [-1, 0]), and those frames give the enumeration's gradient
    // exactly; elsewhere at these scales a frame's posterior can still round away (docs/ctc.md), so
    // only the bounds are checked there. Rows (6, 4) in units of the scale: random ones, and the
    // frames that gave -4.5e57 at 1e30.
    const std::vector<double> found = {-0.7686, 1.9999,  -0.8406, -0.6692, -2.0436, 1.3521,
                                       -2.9956, -2.3462, -0.639,  0.7387,  -0.072,  0.689,
                                       2.4257,  -0.8275, 1.9692,  1.4654,  -0.9815, 0.4941,
                                       1.2398,  -0.2993, -0.9244, -0.9611, -0.3117, -1.1105};
    uint64_t seed = 900;
    for (const double scale : {1e20, 1e30, 1e100, 1e300}) {
        for (const std::vector<int64_t>& labels : {std::vector<int64_t>{3, 3}, {1, 2}}) {
            for (const bool logits : {true, false}) {
                INFO("scale " << scale << " labels " << labels.size() << " "
                              << (logits ? "logits" : "log_probs"));
                const bool is_found = scale == 1e30 && labels[0] == 3;
                std::vector<double> rows =
                    is_found ? found : lstm::test::random_vector<double>(6 * 4, ++seed, -2.5, 2.5);
                for (double& v : rows) v *= scale;
                CtcReferenceCase c = single(rows, 4, labels, logits);
                const std::vector<double> lp = lstm::reference::log_softmax_rows(rows, 4);
                if (!logits) c.input = lp;
                const BruteForce want = brute_force(lp, 6, 4, labels, 0);
                REQUIRE(std::isfinite(want.loss));
                const auto got = run(c);
                CHECK(static_cast<double>(got.loss) == Approx(want.loss).epsilon(1e-15));
                for (const auto g : got.grad) {
                    CHECK(g >= -1.0);
                    CHECK(g <= (logits ? 1.0 : 0.0));
                }
                if (!is_found) continue;
                std::vector<double> want_grad = want.grad_log_probs;
                if (logits)
                    for (size_t i = 0; i < lp.size(); ++i) want_grad[i] += std::exp(lp[i]);
                LSTM_CHECK_CLOSE(lstm::test::compare("grad", got.grad, want_grad, 0, 0));
            }
        }
    }
}

}  // namespace lstm::test::ctc
