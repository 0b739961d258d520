// Cross-entropy against a naive double log(sum(exp)) oracle, closed forms on extreme logits,
// central finite differences for the gradient, the reductions, the padded-frame form, PyTorch's
// results for class weights, ignore_index and label smoothing, and errors.

#include "lstm/loss/cross_entropy.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "test_data.hpp"
#include "test_util.hpp"

namespace {

using lstm::Span;
using lstm::TensorView;
using lstm::loss::cross_entropy;
using lstm::loss::cross_entropy_frames;
using lstm::loss::Reduction;

constexpr Reduction kReductions[] = {Reduction::none, Reduction::sum, Reduction::mean};

// The oracle: per-row log(sum(exp(x))) - x[target] in double, unshifted (the logits it sees are
// moderate, so nothing overflows).
std::vector<double> naive_row_losses(const std::vector<double>& logits,
                                     const std::vector<int64_t>& targets, int64_t classes) {
    std::vector<double> out(targets.size());
    for (size_t r = 0; r < targets.size(); ++r) {
        double sum = 0;
        for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits[r * classes + j]);
        out[r] = std::log(sum) - logits[r * classes + targets[r]];
    }
    return out;
}

double naive_reduced(const std::vector<double>& logits, const std::vector<int64_t>& targets,
                     int64_t classes, Reduction reduction) {
    double sum = 0;
    for (double l : naive_row_losses(logits, targets, classes)) sum += l;
    return reduction == Reduction::mean ? sum / static_cast<double>(targets.size()) : sum;
}

// d(reduced loss)/d(logits) by central differences of the oracle.
std::vector<double> finite_difference_grad(std::vector<double> logits,
                                           const std::vector<int64_t>& targets, int64_t classes,
                                           Reduction reduction) {
    const double h = 1e-6;
    std::vector<double> out(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        const double saved = logits[i];
        logits[i] = saved + h;
        const double up = naive_reduced(logits, targets, classes, reduction);
        logits[i] = saved - h;
        const double down = naive_reduced(logits, targets, classes, reduction);
        logits[i] = saved;
        out[i] = (up - down) / (2 * h);
    }
    return out;
}

std::vector<int64_t> random_targets(size_t n, int64_t classes, uint64_t seed) {
    const auto u = lstm::test::random_vector<double>(n, seed, 0.0, 1.0);
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<int64_t>(u[i] * static_cast<double>(classes));
    return out;
}

template <typename T>
double tol() {
    return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

// Loss and gradient of one row, with reduction sum (scale 1).
template <typename T>
T one_row(std::vector<T> logits, int64_t target, std::vector<T>& grad) {
    const auto classes = static_cast<int64_t>(logits.size());
    grad.assign(logits.size(), std::numeric_limits<T>::quiet_NaN());
    std::vector<int64_t> targets = {target};
    return cross_entropy(TensorView<T>(logits.data(), {1, classes}), targets, Reduction::sum,
                         TensorView<T>(grad.data(), {1, classes}));
}

}  // namespace

TEMPLATE_TEST_CASE("cross_entropy matches a naive log-sum-exp on moderate logits", "[loss]", float,
                   double) {
    using T = TestType;
    const int64_t rows = 7, classes = 5;
    const auto logits = lstm::test::random_vector<double>(rows * classes, 11, -3.0, 3.0);
    const auto targets = random_targets(rows, classes, 12);
    auto logits_t = lstm::test::cast_vector<T>(logits);
    const auto logits_rounded = lstm::test::cast_vector<double>(logits_t);
    const auto want_rows = naive_row_losses(logits_rounded, targets, classes);
    for (Reduction reduction : kReductions) {
        INFO("reduction " << lstm::loss::to_string(reduction));
        std::vector<T> losses(rows, std::numeric_limits<T>::quiet_NaN());
        const T got =
            cross_entropy(TensorView<const T>(logits_t.data(), {rows, classes}), targets, reduction,
                          TensorView<T>{}, TensorView<T>(losses.data(), {rows}));
        const double want = naive_reduced(logits_rounded, targets, classes, reduction);
        CHECK(static_cast<double>(got) == Approx(want).epsilon(tol<T>()));
        LSTM_CHECK_CLOSE(lstm::test::compare("losses", losses, want_rows, tol<T>(), tol<T>()));
    }
}

TEST_CASE("cross_entropy gradient matches central finite differences in double", "[loss]") {
    const int64_t rows = 6, classes = 7;
    auto logits = lstm::test::random_vector<double>(rows * classes, 21, -2.0, 2.0);
    const auto targets = random_targets(rows, classes, 22);
    for (Reduction reduction : kReductions) {
        INFO("reduction " << lstm::loss::to_string(reduction));
        std::vector<double> grad(logits.size(), std::numeric_limits<double>::quiet_NaN());
        cross_entropy(TensorView<double>(logits.data(), {rows, classes}), targets, reduction,
                      TensorView<double>(grad.data(), {rows, classes}));
        const auto fd = finite_difference_grad(logits, targets, classes, reduction);
        LSTM_CHECK_CLOSE(lstm::test::compare("grad vs finite differences", grad, fd, 1e-8, 1e-6));

        // The closed form: (softmax - onehot) times 1 (none, sum) or 1 / M (mean).
        const double scale = reduction == Reduction::mean ? 1.0 / rows : 1.0;
        std::vector<double> want(logits.size());
        for (int64_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits[r * classes + j]);
            for (int64_t j = 0; j < classes; ++j)
                want[r * classes + j] = scale * (std::exp(logits[r * classes + j]) / sum -
                                                 (j == targets[r] ? 1.0 : 0.0));
        }
        LSTM_CHECK_CLOSE(lstm::test::compare("grad vs softmax - onehot", grad, want, 1e-15, 1e-13));
    }
}

TEST_CASE("cross_entropy float gradient matches the double closed form", "[loss]") {
    using T = float;
    const int64_t rows = 9, classes = 11;
    const auto logits = lstm::test::random_vector<T>(rows * classes, 31, -4.0, 4.0);
    const auto targets = random_targets(rows, classes, 32);
    std::vector<T> grad(logits.size());
    cross_entropy(TensorView<const T>(logits.data(), {rows, classes}), targets, Reduction::mean,
                  TensorView<T>(grad.data(), {rows, classes}));
    auto logits_d = lstm::test::cast_vector<double>(logits);
    std::vector<double> want(logits.size());
    for (int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < classes; ++j) sum += std::exp(logits_d[r * classes + j]);
        for (int64_t j = 0; j < classes; ++j)
            want[r * classes + j] =
                (std::exp(logits_d[r * classes + j]) / sum - (j == targets[r] ? 1.0 : 0.0)) / rows;
    }
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", grad, want, 1e-8, 1e-5));
}

TEMPLATE_TEST_CASE("cross_entropy stays finite and exact on extreme logits", "[loss]", float,
                   double) {
    using T = TestType;
    std::vector<T> grad;
    // log(1 + e^-1e4) - 0 rounds to the closed form 1e4 exactly; the softmax is exactly [1, 0].
    CHECK(one_row<T>({T(1e4), T(0)}, 1, grad) == T(1e4));
    CHECK(grad == std::vector<T>{T(1), T(-1)});
    CHECK(one_row<T>({T(1e4), T(0)}, 0, grad) == T(0));
    CHECK(grad == std::vector<T>{T(0), T(0)});
    CHECK(one_row<T>({T(-1e4), T(1e4), T(0)}, 0, grad) == T(2e4));
    CHECK(grad == std::vector<T>{T(-1), T(1), T(0)});
    // Equal huge logits: exactly ln 2 and [-1/2, 1/2], with no cancellation against 1e4.
    CHECK(static_cast<double>(one_row<T>({T(1e4), T(1e4)}, 0, grad)) ==
          Approx(std::log(2.0)).epsilon(tol<T>()));
    CHECK(grad == std::vector<T>{T(-0.5), T(0.5)});
    CHECK(static_cast<double>(one_row<T>({T(-1e4), T(-1e4), T(-1e4)}, 2, grad)) ==
          Approx(std::log(3.0)).epsilon(tol<T>()));
    LSTM_CHECK_CLOSE(lstm::test::compare(
        "grad", grad, std::vector<double>{1.0 / 3, 1.0 / 3, -2.0 / 3}, tol<T>(), tol<T>()));
    // A difference of 1 on top of 1e4: log(1 + e^-1) = softplus(-1), kept to full precision.
    CHECK(static_cast<double>(one_row<T>({T(1e4), T(1e4 - 1)}, 0, grad)) ==
          Approx(std::log1p(std::exp(-1.0))).epsilon(tol<T>()));
    const double p = 1.0 / (1.0 + std::exp(-1.0));
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", grad, std::vector<double>{p - 1.0, 1.0 - p},
                                         tol<T>(), tol<T>()));
}

TEMPLATE_TEST_CASE("cross_entropy reductions on uniform logits give ln C", "[loss]", float,
                   double) {
    using T = TestType;
    const int64_t rows = 4, classes = 10;
    std::vector<T> logits(rows * classes, T(0.25)), grad(rows * classes), losses(rows);
    const std::vector<int64_t> targets = {0, 9, 3, 3};
    const TensorView<T> logits_view(logits.data(), {rows, classes});
    const TensorView<T> grad_view(grad.data(), {rows, classes});
    const TensorView<T> losses_view(losses.data(), {rows});
    const double ln10 = std::log(10.0);

    CHECK(static_cast<double>(cross_entropy(logits_view, targets, Reduction::sum, grad_view)) ==
          Approx(rows * ln10).epsilon(tol<T>()));
    CHECK(static_cast<double>(grad[9]) == Approx(0.1).epsilon(tol<T>()));
    CHECK(static_cast<double>(grad[0]) == Approx(-0.9).epsilon(tol<T>()));

    CHECK(static_cast<double>(cross_entropy(logits_view, targets, Reduction::mean, grad_view,
                                            losses_view)) == Approx(ln10).epsilon(tol<T>()));
    CHECK(static_cast<double>(grad[9]) == Approx(0.1 / rows).epsilon(tol<T>()));
    CHECK(static_cast<double>(grad[0]) == Approx(-0.9 / rows).epsilon(tol<T>()));
    for (T l : losses) CHECK(static_cast<double>(l) == Approx(ln10).epsilon(tol<T>()));

    // none returns the sum and differentiates the sum; the per-row values are in `losses`.
    CHECK(static_cast<double>(cross_entropy(logits_view, targets, Reduction::none, grad_view,
                                            losses_view)) == Approx(rows * ln10).epsilon(tol<T>()));
    CHECK(static_cast<double>(grad[9]) == Approx(0.1).epsilon(tol<T>()));
    for (T l : losses) CHECK(static_cast<double>(l) == Approx(ln10).epsilon(tol<T>()));
}

TEMPLATE_TEST_CASE("cross_entropy_frames skips padded frames and equals the row form on valid ones",
                   "[loss]", float, double) {
    using T = TestType;
    const int64_t steps = 5, batch = 3, classes = 4;
    const std::vector<int64_t> lengths = {5, 2, 1};
    const auto logits = lstm::test::random_vector<T>(steps * batch * classes, 41, -3.0, 3.0);
    auto targets = random_targets(steps * batch, classes, 42);
    int64_t valid = 0;
    std::vector<T> valid_logits;
    std::vector<int64_t> valid_targets;
    for (int64_t t = 0; t < steps; ++t) {
        for (int64_t n = 0; n < batch; ++n) {
            const int64_t frame = t * batch + n;
            if (t >= lengths[n]) {
                targets[frame] = frame % 2 ? -1 : 999;  // padding: never read, never range-checked
                continue;
            }
            ++valid;
            valid_targets.push_back(targets[frame]);
            valid_logits.insert(valid_logits.end(), logits.begin() + frame * classes,
                                logits.begin() + (frame + 1) * classes);
        }
    }
    REQUIRE(valid == 8);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    for (Reduction reduction : kReductions) {
        INFO("reduction " << lstm::loss::to_string(reduction));
        std::vector<T> grad(logits.size(), nan), losses(steps * batch, nan);
        const T got = cross_entropy_frames(
            TensorView<const T>(logits.data(), {steps, batch, classes}), lengths, targets,
            reduction, TensorView<T>(grad.data(), {steps, batch, classes}),
            TensorView<T>(losses.data(), {steps, batch}));

        std::vector<T> row_grad(valid_logits.size(), nan), row_losses(valid, nan);
        const T want =
            cross_entropy(TensorView<const T>(valid_logits.data(), {valid, classes}), valid_targets,
                          reduction, TensorView<T>(row_grad.data(), {valid, classes}),
                          TensorView<T>(row_losses.data(), {valid}));
        CHECK(static_cast<double>(got) == Approx(static_cast<double>(want)).epsilon(tol<T>()));
        // Mean divides by the 8 valid frames, not by T * N = 15.
        const double oracle = naive_reduced(lstm::test::cast_vector<double>(valid_logits),
                                            valid_targets, classes, reduction);
        CHECK(static_cast<double>(got) == Approx(oracle).epsilon(tol<T>()));

        int64_t v = 0;
        for (int64_t t = 0; t < steps; ++t) {
            for (int64_t n = 0; n < batch; ++n) {
                const int64_t frame = t * batch + n;
                INFO("t " << t << " n " << n);
                if (t >= lengths[n]) {
                    CHECK(losses[frame] == T(0));
                    for (int64_t j = 0; j < classes; ++j) CHECK(grad[frame * classes + j] == T(0));
                    continue;
                }
                CHECK(losses[frame] == row_losses[v]);
                for (int64_t j = 0; j < classes; ++j)
                    CHECK(grad[frame * classes + j] == row_grad[v * classes + j]);
                ++v;
            }
        }
    }
}

TEST_CASE("cross_entropy_frames gradient matches finite differences with lengths", "[loss]") {
    const int64_t steps = 4, batch = 2, classes = 3;
    const std::vector<int64_t> lengths = {2, 4};
    auto logits = lstm::test::random_vector<double>(steps * batch * classes, 51, -2.0, 2.0);
    auto targets = random_targets(steps * batch, classes, 52);
    // The oracle sees only valid frames; padded logits must not influence the loss at all.
    auto reduced = [&](const std::vector<double>& x) {
        double sum = 0;
        int64_t count = 0;
        for (int64_t t = 0; t < steps; ++t) {
            for (int64_t n = 0; n < batch; ++n) {
                if (t >= lengths[n]) continue;
                const int64_t f = t * batch + n;
                double s = 0;
                for (int64_t j = 0; j < classes; ++j) s += std::exp(x[f * classes + j]);
                sum += std::log(s) - x[f * classes + targets[f]];
                ++count;
            }
        }
        return sum / static_cast<double>(count);
    };
    std::vector<double> grad(logits.size());
    const double loss = cross_entropy_frames(
        TensorView<double>(logits.data(), {steps, batch, classes}), lengths, targets,
        Reduction::mean, TensorView<double>(grad.data(), {steps, batch, classes}));
    CHECK(loss == Approx(reduced(logits)).epsilon(1e-13));
    std::vector<double> fd(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        const double saved = logits[i], h = 1e-6;
        logits[i] = saved + h;
        const double up = reduced(logits);
        logits[i] = saved - h;
        const double down = reduced(logits);
        logits[i] = saved;
        fd[i] = (up - down) / (2 * h);
    }
    LSTM_CHECK_CLOSE(lstm::test::compare("grad vs finite differences", grad, fd, 1e-9, 1e-6));
}

TEMPLATE_TEST_CASE("cross_entropy_frames with no lengths equals the row form over all frames",
                   "[loss]", float, double) {
    using T = TestType;
    const int64_t steps = 3, batch = 2, classes = 6;
    const auto logits = lstm::test::random_vector<T>(steps * batch * classes, 61, -3.0, 3.0);
    const auto targets = random_targets(steps * batch, classes, 62);
    std::vector<T> frame_grad(logits.size()), row_grad(logits.size());
    const T frames = cross_entropy_frames(
        TensorView<const T>(logits.data(), {steps, batch, classes}), Span<const int64_t>{}, targets,
        Reduction::mean, TensorView<T>(frame_grad.data(), {steps, batch, classes}));
    const T rows =
        cross_entropy(TensorView<const T>(logits.data(), {steps * batch, classes}), targets,
                      Reduction::mean, TensorView<T>(row_grad.data(), {steps * batch, classes}));
    CHECK(frames == rows);
    CHECK(frame_grad == row_grad);
    const double oracle =
        naive_reduced(lstm::test::cast_vector<double>(logits), targets, classes, Reduction::mean);
    CHECK(static_cast<double>(frames) == Approx(oracle).epsilon(tol<T>()));
}

TEST_CASE("cross_entropy rejects bad targets and shapes with messages naming them", "[loss]") {
    const int64_t rows = 4, classes = 10;
    std::vector<double> logits(rows * classes, 0.0), grad(rows * classes, 7.0), losses(rows, 7.0);
    const TensorView<double> x(logits.data(), {rows, classes});
    const TensorView<double> g(grad.data(), {rows, classes});

    std::vector<int64_t> targets = {0, 1, 2, 12};
    CHECK_THROWS_AS(cross_entropy(x, targets, Reduction::mean, g), lstm::Error);
    CHECK_THROWS_WITH(cross_entropy(x, targets, Reduction::mean, g),
                      Catch::Contains("targets[3] = 12 is out of range for 10 classes"));
    CHECK(grad == std::vector<double>(rows * classes, 7.0));  // nothing written before the throw
    targets = {0, -1, 2, 3};
    CHECK_THROWS_WITH(cross_entropy(x, targets),
                      Catch::Contains("targets[1] = -1 is out of range for 10 classes"));
    targets = {0, 1, 10, 3};
    CHECK_THROWS_WITH(cross_entropy(x, targets), Catch::Contains("targets[2] = 10"));

    targets = {0, 1, 2};
    CHECK_THROWS_WITH(cross_entropy(x, targets),
                      Catch::Contains("targets must have M = 4 elements, got 3"));
    targets = {0, 1, 2, 3};
    CHECK_THROWS_WITH(
        cross_entropy(x, targets, Reduction::sum, TensorView<double>(grad.data(), {rows, 9})),
        Catch::Contains("grad must have shape (4, 10), got (4, 9)"));
    CHECK_THROWS_WITH(
        cross_entropy(x, targets, Reduction::sum, g, TensorView<double>(losses.data(), {rows - 1})),
        Catch::Contains("losses must have shape (4), got (3)"));
    CHECK_THROWS_WITH(cross_entropy(TensorView<double>(logits.data(), {rows * classes}), targets),
                      Catch::Contains("logits must have rank 2"));
}

TEST_CASE("cross_entropy_frames rejects bad lengths and valid-frame targets", "[loss]") {
    const int64_t steps = 5, batch = 3, classes = 4;
    std::vector<double> logits(steps * batch * classes, 0.0);
    const TensorView<double> x(logits.data(), {steps, batch, classes});
    std::vector<int64_t> targets(steps * batch, 1);

    std::vector<int64_t> lengths = {5, 0, 2};
    CHECK_THROWS_WITH(cross_entropy_frames(x, lengths, targets),
                      Catch::Contains("lengths[1] = 0 must be >= 1"));
    lengths = {5, 3, 7};
    CHECK_THROWS_WITH(cross_entropy_frames(x, lengths, targets),
                      Catch::Contains("lengths[2] = 7 exceeds T = 5"));
    lengths = {5, 3};
    CHECK_THROWS_WITH(cross_entropy_frames(x, lengths, targets),
                      Catch::Contains("lengths must have N = 3 elements"));
    lengths = {5, 3, 2};
    targets[1 * batch + 1] = 4;  // t = 1 < lengths[1]: a valid frame, so it is checked
    CHECK_THROWS_WITH(cross_entropy_frames(x, lengths, targets),
                      Catch::Contains("targets[4] = 4 is out of range for 4 classes"));
    targets[1 * batch + 1] = 1;
    targets[3 * batch + 2] = -7;  // t = 3 >= lengths[2]: padding, ignored
    CHECK_NOTHROW(cross_entropy_frames(x, lengths, targets));
    std::vector<int64_t> short_targets(steps * batch - 1, 0);
    CHECK_THROWS_WITH(cross_entropy_frames(x, lengths, short_targets),
                      Catch::Contains("targets must have T * N = 15 elements, got 14"));
    std::vector<double> grad(steps * batch * classes);
    CHECK_THROWS_WITH(
        cross_entropy_frames(x, lengths, targets, Reduction::mean,
                             TensorView<double>(grad.data(), {steps, batch + 1, classes - 1})),
        Catch::Contains("grad must have shape (5, 3, 4), got (5, 4, 3)"));
}

TEST_CASE("cross_entropy refuses outputs that share memory with logits", "[loss]") {
    // The kernel uses grad as scratch while it still reads logits: in place, the loss of
    // logits (1, 2, 3) against class 0 came out 4.318 instead of 2.408, without an error.
    std::vector<float> b = {1.0f, 2.0f, 3.0f};
    const std::vector<int64_t> t = {0};
    CHECK_THROWS_WITH(
        cross_entropy(TensorView<const float>(b.data(), {1, 3}), Span<const int64_t>(t),
                      Reduction::sum, TensorView<float>(b.data(), {1, 3})),
        Catch::Contains("grad must not overlap logits"));
    CHECK_THROWS_WITH(cross_entropy_frames(TensorView<const float>(b.data(), {1, 1, 3}), {},
                                           Span<const int64_t>(t), Reduction::sum, {},
                                           TensorView<float>(b.data() + 2, {1, 1})),
                      Catch::Contains("losses must not overlap logits"));
    // Without lengths, T = 0 leaves the sequences without frames; the message says so.
    CHECK_THROWS_WITH(cross_entropy_frames(TensorView<const float>(b.data(), {0, 1, 3}), {},
                                           Span<const int64_t>()),
                      Catch::Contains("logits has T = 0 frames"));
    // C = 0 once said "expected 0..-1" about the first target.
    CHECK_THROWS_WITH(
        cross_entropy(TensorView<const float>(b.data(), {1, 0}), Span<const int64_t>(t)),
        Catch::Contains("logits has no classes (shape (1, 0))"));
}

// tests/data/ce_options.*: torch.nn.functional.cross_entropy in float64 (from float32 inputs)
// with and without class weights, ignore_index -100 (its default) and 2, label_smoothing 0 and 0.3,
// every reduction. Both forms of the library against it: the rows, and the frames of a padded
// batch whose valid frames are those rows (padding interleaved, and its targets garbage).
TEMPLATE_TEST_CASE("cross_entropy matches PyTorch with weight, ignore_index and label_smoothing",
                   "[loss]", float, double) {
    using T = TestType;
    using lstm::io::read_safetensors;
    using lstm::test::data_path;
    const lstm::io::TensorFile inputs =
        read_safetensors(data_path("ce_options.inputs.safetensors"));
    const lstm::io::TensorFile expected =
        read_safetensors(data_path("ce_options.expected.safetensors"));
    const std::vector<double> logits64 = inputs.at("logits").floats_as_double();
    const std::vector<T> logits(logits64.begin(), logits64.end());
    const std::vector<double> weight64 = inputs.at("weight").floats_as_double();
    const std::vector<T> weight(weight64.begin(), weight64.end());
    const std::vector<int64_t> targets_given = inputs.at("targets").integers();
    const int64_t rows = inputs.at("logits").shape[0], classes = inputs.at("logits").shape[1];

    // Frames (T 2, N rows / 2 + 1): sequence n < rows / 2 holds rows 2n and 2n + 1; the last one
    // has length 1 (lengths must be >= 1): its frame at t = 0 repeats row 0, its frame at t = 1
    // is padding.
    const int64_t batch = rows / 2 + 1, steps = 2;
    std::vector<int64_t> lengths(batch, 2);
    lengths[batch - 1] = 1;
    // tol: float inputs are exact in T; float keeps ~1e-6 of the loss, double ~1e-15.
    const double rtol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
    for (const Reduction reduction : kReductions) {
        for (const bool weighted : {false, true}) {
            for (const int64_t ignore_index : {int64_t{-100}, int64_t{2}}) {
                for (const double smoothing : {0.0, 0.3}) {
                    std::ostringstream key_stream;
                    key_stream << lstm::loss::to_string(reduction) << "."
                               << (weighted ? "given" : "none") << "." << ignore_index << "."
                               << (smoothing == 0.0 ? "0.0" : "0.3");
                    const std::string key = key_stream.str();
                    INFO(key);
                    // The fixture's targets for ignore_index 2 turned -100 into class 0.
                    std::vector<int64_t> targets = targets_given;
                    if (ignore_index != -100)
                        for (int64_t& t : targets) t = std::max<int64_t>(t, 0);
                    lstm::loss::CrossEntropyOptions<T> options(reduction);
                    options.ignore_index = ignore_index;
                    options.label_smoothing = smoothing;
                    if (weighted) options.weight = Span<const T>(weight);

                    std::vector<T> grad(rows * classes), losses(rows);
                    const T loss =
                        cross_entropy(TensorView<const T>(logits.data(), {rows, classes}),
                                      Span<const int64_t>(targets), options,
                                      TensorView<T>(grad.data(), {rows, classes}),
                                      TensorView<T>(losses.data(), {rows}));
                    const std::vector<double> want_loss =
                        expected.at("loss." + key).floats_as_double();
                    const std::vector<double> want_grad =
                        expected.at("grad." + key).floats_as_double();
                    if (reduction == Reduction::none) {
                        LSTM_CHECK_CLOSE(
                            lstm::test::compare("losses", losses, want_loss, rtol, rtol));
                    } else {
                        CHECK(static_cast<double>(loss) == Approx(want_loss[0]).epsilon(rtol));
                    }
                    LSTM_CHECK_CLOSE(lstm::test::compare("grad", grad, want_grad, rtol, rtol));
                    // Ignored rows: exactly zero.
                    for (int64_t r = 0; r < rows; ++r) {
                        if (targets[r] != ignore_index) continue;
                        CHECK(losses[r] == T(0));
                        for (int64_t c = 0; c < classes; ++c) CHECK(grad[r * classes + c] == T(0));
                    }

                    // The frames form over the same rows plus one repeat of row 0 (so its
                    // reduction counts row 0 twice unless row 0 is ignored).
                    std::vector<T> frames(steps * batch * classes, T(1e30));
                    std::vector<int64_t> frame_targets(steps * batch, -7);
                    auto frame_of = [&](int64_t r) { return (r % 2) * batch + r / 2; };
                    for (int64_t r = 0; r <= rows; ++r) {
                        const int64_t f = r < rows ? frame_of(r) : batch - 1, src = r % rows;
                        std::copy_n(logits.begin() + src * classes, classes,
                                    frames.begin() + f * classes);
                        frame_targets[f] = targets[src];
                    }
                    std::vector<T> frame_grad(frames.size()), frame_losses(steps * batch);
                    const T frame_loss = cross_entropy_frames(
                        TensorView<const T>(frames.data(), {steps, batch, classes}),
                        Span<const int64_t>(lengths), Span<const int64_t>(frame_targets), options,
                        TensorView<T>(frame_grad.data(), {steps, batch, classes}),
                        TensorView<T>(frame_losses.data(), {steps, batch}));
                    // The row form over rows + row 0 again is the frames' oracle.
                    std::vector<T> more_logits(logits);
                    more_logits.insert(more_logits.end(), logits.begin(), logits.begin() + classes);
                    std::vector<int64_t> more_targets(targets);
                    more_targets.push_back(targets[0]);
                    std::vector<T> more_grad(more_logits.size());
                    const T more_loss =
                        cross_entropy(TensorView<const T>(more_logits.data(), {rows + 1, classes}),
                                      Span<const int64_t>(more_targets), options,
                                      TensorView<T>(more_grad.data(), {rows + 1, classes}));
                    // Only the order of the double sums (loss, mean's denominator) differs.
                    const double order_tol = std::is_same_v<T, float> ? 1e-7 : 1e-14;
                    CHECK(static_cast<double>(frame_loss) ==
                          Approx(static_cast<double>(more_loss)).epsilon(order_tol));
                    std::vector<T> frame_grad_rows(more_grad.size());
                    for (int64_t r = 0; r <= rows; ++r) {
                        const int64_t f = r < rows ? frame_of(r) : batch - 1;
                        std::copy_n(frame_grad.begin() + f * classes, classes,
                                    frame_grad_rows.begin() + r * classes);
                    }
                    LSTM_CHECK_CLOSE(lstm::test::compare("frames' grad", frame_grad_rows, more_grad,
                                                         order_tol, order_tol));
                    CHECK(frame_losses[steps * batch - 1] == T(0));  // the padded frame
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("cross_entropy with label smoothing on uniform logits gives ln C", "[loss]",
                   float, double) {
    // A uniform row's loss is ln C against any target distribution; its gradient is
    // softmax - target = 1/C - ((1 - s) onehot + s / C): -(1 - s)(1 - 1/C) at the target, and
    // (1 - s) / C elsewhere.
    using T = TestType;
    const int64_t classes = 8;
    const std::vector<T> logits(classes, T(-3.5));
    const std::vector<int64_t> targets = {5};
    std::vector<T> grad(classes);
    lstm::loss::CrossEntropyOptions<T> options(Reduction::sum);
    options.label_smoothing = 0.4;
    const T loss = cross_entropy(TensorView<const T>(logits.data(), {1, classes}),
                                 Span<const int64_t>(targets), options,
                                 TensorView<T>(grad.data(), {1, classes}));
    CHECK(static_cast<double>(loss) == Approx(std::log(8.0)).epsilon(tol<T>()));
    std::vector<double> want(classes, 0.6 / 8);
    want[5] = -0.6 * (1 - 1.0 / 8);
    LSTM_CHECK_CLOSE(lstm::test::compare("grad", grad, want, tol<T>(), tol<T>()));
}

TEST_CASE("cross_entropy ignores PyTorch's -100 targets by default; a mean of none is NaN",
          "[loss]") {
    const std::vector<double> logits = {0.5, -1.0, 2.0, 0.0, 0.0, 0.0};
    const TensorView<const double> x(logits.data(), {2, 3});
    std::vector<int64_t> targets = {-100, 1};
    // Only row 1 counts: its loss is ln 3, and mean divides by 1.
    CHECK(cross_entropy(x, Span<const int64_t>(targets)) == Approx(std::log(3.0)).epsilon(1e-15));
    targets = {-100, -100};
    CHECK(std::isnan(cross_entropy(x, Span<const int64_t>(targets))));
    std::vector<double> grad(6, 1.0);
    CHECK(cross_entropy(x, Span<const int64_t>(targets), Reduction::sum,
                        TensorView<double>(grad.data(), {2, 3})) == 0.0);
    CHECK(grad == std::vector<double>(6, 0.0));
}

TEST_CASE("cross_entropy refuses bad options, naming them", "[loss]") {
    const std::vector<double> logits(6, 0.0);
    const TensorView<const double> x(logits.data(), {2, 3});
    const std::vector<int64_t> targets = {0, 2};
    lstm::loss::CrossEntropyOptions<double> options;
    for (const double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
        options.label_smoothing = bad;
        CHECK_THROWS_WITH(cross_entropy(x, Span<const int64_t>(targets), options),
                          Catch::Contains("cross_entropy: label_smoothing must be in [0, 1], got"));
        CHECK_THROWS_WITH(
            cross_entropy_frames(TensorView<const double>(logits.data(), {1, 2, 3}), {},
                                 Span<const int64_t>(targets), options),
            Catch::Contains("cross_entropy_frames: label_smoothing must be in [0, 1]"));
    }
    options.label_smoothing = 1.0;  // the end is allowed
    CHECK_NOTHROW(cross_entropy(x, Span<const int64_t>(targets), options));
    const std::vector<double> weight = {1.0, 2.0};
    options.weight = Span<const double>(weight);
    CHECK_THROWS_WITH(
        cross_entropy(x, Span<const int64_t>(targets), options),
        Catch::Contains("weight must have C = 3 elements (or none for every class weighing 1), "
                        "got 2"));
    options.weight = Span<const double>(nullptr, 3);
    CHECK_THROWS_WITH(cross_entropy(x, Span<const int64_t>(targets), options),
                      Catch::Contains("weight has 3 elements but no data"));
    options.weight = {};
    options.ignore_index = 1;
    const std::vector<int64_t> out_of_range = {0, -100};  // -100 is a class index no more
    CHECK_THROWS_WITH(cross_entropy(x, Span<const int64_t>(out_of_range), options),
                      Catch::Contains("targets[1] = -100 is out of range for 3 classes (expected "
                                      "0..2, or ignore_index = 1)"));
}
