// The dense layer against naive loops and central finite differences, its accumulation contract
// and PyTorch's initialization bound; the last-step gather/scatter; and a whole classification
// head (last step -> Dense -> cross-entropy) differentiated end to end.

#include "lstm/nn/dense.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lstm/loss/cross_entropy.hpp"
#include "lstm/nn/sequence.hpp"
#include "test_util.hpp"

namespace {

using lstm::Span;
using lstm::TensorView;
using lstm::nn::Dense;

// The oracle: y = x W^T + b in double from the layer's own flat parameters.
template <typename T>
std::vector<double> naive_dense(const std::vector<T>& params, bool bias, int64_t in, int64_t out,
                                const std::vector<T>& x, int64_t rows) {
    std::vector<double> y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
            double sum = bias ? static_cast<double>(params[out * in + o]) : 0.0;
            for (int64_t i = 0; i < in; ++i)
                sum += static_cast<double>(params[o * in + i]) * static_cast<double>(x[r * in + i]);
            y[r * out + o] = sum;
        }
    }
    return y;
}

template <typename T>
std::vector<T> to_vector(Span<T> s) {
    return std::vector<T>(s.begin(), s.end());
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

}  // namespace

TEMPLATE_TEST_CASE("Dense forward matches naive loops with and without bias", "[nn]", float,
                   double) {
    using T = TestType;
    const int64_t in = 5, out = 3, rows = 7;
    for (bool bias : {true, false}) {
        INFO("bias " << bias);
        Dense<T> dense(in, out, bias);
        dense.reset_parameters(3);
        const auto x = lstm::test::random_vector<T>(rows * in, 4);
        std::vector<T> y(rows * out, std::numeric_limits<T>::quiet_NaN());
        dense.forward(TensorView<const T>(x.data(), {rows, in}),
                      TensorView<T>(y.data(), {rows, out}));
        const auto want = naive_dense(to_vector(dense.parameters()), bias, in, out, x, rows);
        const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
        LSTM_CHECK_CLOSE(lstm::test::compare("y", y, want, tol, tol));
    }
}

TEST_CASE("Dense forward follows torch.nn.Linear's layout on a hand-computed case", "[nn]") {
    // weight [[1, 2], [3, 4], [5, 6]] (out 3, in 2), then bias [0.5, -1, 2], as
    // Linear.parameters().
    Dense<double> dense(2, 3, true);
    REQUIRE(dense.parameter_count() == 9);
    const std::vector<double> params = {1, 2, 3, 4, 5, 6, 0.5, -1, 2};
    std::copy(params.begin(), params.end(), dense.parameters().begin());
    CHECK(dense.weight()[5] == 6);
    CHECK(dense.bias()[1] == -1);
    std::vector<double> x = {1, 1, 2, -1}, y(6);
    dense.forward(TensorView<double>(x.data(), {2, 2}), TensorView<double>(y.data(), {2, 3}));
    // Row [1, 1]: [3 + 0.5, 7 - 1, 11 + 2]; row [2, -1]: [0 + 0.5, 2 - 1, 4 + 2].
    CHECK(y == std::vector<double>{3.5, 6, 13, 0.5, 1, 6});
}

TEST_CASE("Dense backward matches central finite differences in double", "[nn]") {
    const int64_t in = 4, out = 3, rows = 5;
    for (bool bias : {true, false}) {
        INFO("bias " << bias);
        Dense<double> dense(in, out, bias);
        dense.reset_parameters(7);
        auto x = lstm::test::random_vector<double>(rows * in, 8);
        // L = <r, y> for a random r, so dL/dy = r and every output element matters.
        const auto r = lstm::test::random_vector<double>(rows * out, 9);
        auto loss = [&]() {
            return dot(r, naive_dense(to_vector(dense.parameters()), bias, in, out, x, rows));
        };

        std::vector<double> dx(rows * in, std::numeric_limits<double>::quiet_NaN());
        dense.zero_grad();
        dense.backward(TensorView<double>(x.data(), {rows, in}),
                       TensorView<const double>(r.data(), {rows, out}),
                       TensorView<double>(dx.data(), {rows, in}));

        const double h = 1e-6;
        std::vector<double> fd_params(static_cast<size_t>(dense.parameter_count()));
        for (size_t i = 0; i < fd_params.size(); ++i)
            fd_params[i] = lstm::test::central_difference(
                dense.parameters()[static_cast<int64_t>(i)], h, loss);
        std::vector<double> fd_x(x.size());
        for (size_t i = 0; i < x.size(); ++i)
            fd_x[i] = lstm::test::central_difference(x[i], h, loss);
        LSTM_CHECK_CLOSE(
            lstm::test::compare("dparams", to_vector(dense.gradients()), fd_params, 1e-9, 1e-7));
        LSTM_CHECK_CLOSE(lstm::test::compare("dx", dx, fd_x, 1e-9, 1e-7));
    }
}

TEMPLATE_TEST_CASE("Dense backward accumulates into the gradient buffer", "[nn]", float, double) {
    using T = TestType;
    const int64_t in = 6, out = 5, rows = 3;
    Dense<T> dense(in, out, true);
    const auto x = lstm::test::random_vector<T>(rows * in, 10);
    const auto dy = lstm::test::random_vector<T>(rows * out, 11);
    const TensorView<const T> xv(x.data(), {rows, in}), dyv(dy.data(), {rows, out});
    for (T g : dense.gradients()) REQUIRE(g == T(0));  // a fresh layer starts at zero

    dense.backward(xv, dyv);  // dx not wanted
    const auto once = to_vector(dense.gradients());
    // The oracle: dW = dy^T x, db = column sums of dy.
    std::vector<double> want(static_cast<size_t>(dense.parameter_count()), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
            for (int64_t i = 0; i < in; ++i)
                want[o * in + i] += static_cast<double>(dy[r * out + o]) * x[r * in + i];
            want[out * in + o] += dy[r * out + o];
        }
    }
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
    LSTM_CHECK_CLOSE(lstm::test::compare("one backward", once, want, tol, tol));

    dense.backward(xv, dyv);
    for (double& w : want) w *= 2;
    LSTM_CHECK_CLOSE(
        lstm::test::compare("two backwards", to_vector(dense.gradients()), want, tol, tol));
    dense.zero_grad();
    for (T g : dense.gradients()) CHECK(g == T(0));
}

TEST_CASE("Dense reset_parameters draws from PyTorch's U(-1/sqrt(in), 1/sqrt(in))", "[nn]") {
    const int64_t in = 64, out = 100;
    Dense<double> dense(in, out, true);
    dense.reset_parameters(42);
    const double bound = 1.0 / 8.0;  // 1 / sqrt(64)
    const auto p = to_vector(dense.parameters());
    double mean = 0, sq = 0, largest = 0;
    for (double v : p) {
        mean += v;
        sq += v * v;
        largest = std::max(largest, std::abs(v));
    }
    const auto n = static_cast<double>(p.size());
    mean /= n;
    sq /= n;
    CHECK(largest < bound);
    CHECK(largest > 0.99 * bound);
    // U(-b, b) has mean 0 and variance b^2 / 3; with 6500 draws both sit within a few
    // standard errors (b / sqrt(3 n) for the mean, about b^2 / (3 sqrt(n)) for the variance).
    CHECK(std::abs(mean) < 5 * bound / std::sqrt(3 * n));
    CHECK(sq == Approx(bound * bound / 3).epsilon(0.05));
    // The bias (last out entries) follows the same bound, and the draw is reproducible per seed.
    for (int64_t o = 0; o < out; ++o) CHECK(std::abs(dense.bias()[o]) < bound);
    Dense<double> again(in, out, true);
    again.reset_parameters(42);
    CHECK(to_vector(again.parameters()) == p);
    again.reset_parameters(43);
    CHECK(to_vector(again.parameters()) != p);
}

TEST_CASE("Dense rejects mismatched shapes with messages naming the argument", "[nn]") {
    Dense<float> dense(4, 3, false);
    CHECK(dense.bias().empty());
    CHECK(dense.parameter_count() == 12);
    std::vector<float> x(2 * 4), y(2 * 3), dx(2 * 4);
    CHECK_THROWS_WITH(
        dense.forward(TensorView<float>(x.data(), {2, 4}), TensorView<float>(y.data(), {3, 2})),
        Catch::Contains("y must have shape (2, 3), got (3, 2)"));
    CHECK_THROWS_WITH(
        dense.forward(TensorView<float>(x.data(), {4, 2}), TensorView<float>(y.data(), {4, 3})),
        Catch::Contains("x must have shape (4, 4), got (4, 2)"));
    CHECK_THROWS_WITH(
        dense.backward(TensorView<float>(x.data(), {2, 4}), TensorView<float>(y.data(), {2, 3}),
                       TensorView<float>(dx.data(), {4, 2})),
        Catch::Contains("dx must have shape (2, 4), got (4, 2)"));
    CHECK_THROWS_WITH(Dense<float>(0, 3), Catch::Contains("in_features must be >= 1, got 0"));
    // out * in past 2^63 once wrapped to a tiny layer; beyond memory, std::bad_alloc came out.
    Dense<float> square(3, 3, true);
    std::vector<float> xy(2 * 3, 1.0f);
    CHECK_THROWS_WITH(square.forward(TensorView<const float>(xy.data(), {2, 3}),
                                     TensorView<float>(xy.data(), {2, 3})),
                      Catch::Contains("y must not overlap x"));
    // dx is written by the last GEMM, which reads dy: in place it was corrupted silently (and
    // over x it overwrote an input passed as const). Refused before anything is written.
    std::vector<float> both(2 * 3 + 2 * 3, 1.0f);
    const std::vector<float> grads_before(square.gradients().begin(), square.gradients().end());
    CHECK_THROWS_WITH(square.backward(TensorView<const float>(xy.data(), {2, 3}),
                                      TensorView<const float>(both.data(), {2, 3}),
                                      TensorView<float>(xy.data(), {2, 3})),
                      Catch::Contains("Dense::backward: dx must not overlap x"));
    CHECK_THROWS_WITH(square.backward(TensorView<const float>(xy.data(), {2, 3}),
                                      TensorView<const float>(both.data(), {2, 3}),
                                      TensorView<float>(both.data() + 5, {2, 3})),
                      Catch::Contains("Dense::backward: dx must not overlap dy"));
    CHECK(std::vector<float>(square.gradients().begin(), square.gradients().end()) == grads_before);
    // Adjacent is not overlapping.
    CHECK_NOTHROW(square.backward(TensorView<const float>(xy.data(), {2, 3}),
                                  TensorView<const float>(both.data(), {2, 3}),
                                  TensorView<float>(both.data() + 6, {2, 3})));
    // The layer's own buffers as a caller's tensor: a y over the weights the GEMM reads (or x over
    // the gradients it adds into) came out wrong without a word.
    const float* weights = square.parameters().data;
    CHECK_THROWS_WITH(square.forward(TensorView<const float>(xy.data(), {2, 3}),
                                     TensorView<float>(square.parameters().data, {2, 3})),
                      "Dense::forward: y overlaps the layer's parameters()");
    CHECK_THROWS_WITH(square.backward(TensorView<const float>(square.gradients().data, {2, 3}),
                                      TensorView<const float>(both.data(), {2, 3})),
                      "Dense::backward: x overlaps the layer's gradients()");
    CHECK_THROWS_WITH(square.backward(TensorView<const float>(xy.data(), {2, 3}),
                                      TensorView<const float>(weights + 6, {2, 3})),
                      "Dense::backward: dy overlaps the layer's parameters()");
    CHECK_THROWS_WITH(square.backward(TensorView<const float>(xy.data(), {2, 3}),
                                      TensorView<const float>(both.data(), {2, 3}),
                                      TensorView<float>(square.parameters().data + 6, {2, 3})),
                      "Dense::backward: dx overlaps the layer's parameters()");
    CHECK_THROWS_AS(Dense<float>(int64_t(1) << 62, 4), lstm::OutOfMemory);
    CHECK_THROWS_AS(Dense<float>(int64_t(1) << 31, int64_t(1) << 31), lstm::OutOfMemory);
}

TEMPLATE_TEST_CASE("gather_last_step and scatter_last_step use each sequence's last valid step",
                   "[nn]", float, double) {
    using T = TestType;
    const int64_t steps = 4, batch = 3, features = 2;
    const std::vector<int64_t> lengths = {4, 1, 3};
    std::vector<T> y(steps * batch * features);
    for (size_t i = 0; i < y.size(); ++i) y[i] = T(i);  // y[t, n, f] = (t * N + n) * F + f
    std::vector<T> out(batch * features, std::numeric_limits<T>::quiet_NaN());
    lstm::nn::gather_last_step(TensorView<T>(y.data(), {steps, batch, features}), lengths,
                               TensorView<T>(out.data(), {batch, features}));
    // Steps 3, 0, 2 of sequences 0, 1, 2: flat offsets (3*3+0)*2, (0*3+1)*2, (2*3+2)*2.
    CHECK(out == std::vector<T>{18, 19, 2, 3, 16, 17});

    const std::vector<T> dout = {1, 2, 3, 4, 5, 6};
    std::vector<T> dy(y.size(), std::numeric_limits<T>::quiet_NaN());
    lstm::nn::scatter_last_step(TensorView<const T>(dout.data(), {batch, features}), lengths,
                                TensorView<T>(dy.data(), {steps, batch, features}));
    std::vector<T> want(y.size(), T(0));
    want[18] = 1, want[19] = 2, want[2] = 3, want[3] = 4, want[16] = 5, want[17] = 6;
    CHECK(dy == want);

    // rescatter_last_step clears only the rows the call above wrote (steps 3, 0, 2) and gives
    // what scatter_last_step gives for the new lengths.
    const std::vector<int64_t> previous = {3, 0, 2}, next = {2, 4, 1};
    lstm::nn::rescatter_last_step(TensorView<const T>(dout.data(), {batch, features}), next,
                                  previous, TensorView<T>(dy.data(), {steps, batch, features}));
    std::vector<T> fresh(y.size(), std::numeric_limits<T>::quiet_NaN());
    lstm::nn::scatter_last_step(TensorView<const T>(dout.data(), {batch, features}), next,
                                TensorView<T>(fresh.data(), {steps, batch, features}));
    CHECK(dy == fresh);

    // No lengths: every sequence ends at T - 1.
    lstm::nn::gather_last_step(TensorView<T>(y.data(), {steps, batch, features}),
                               Span<const int64_t>{}, TensorView<T>(out.data(), {batch, features}));
    CHECK(out == std::vector<T>{18, 19, 20, 21, 22, 23});
}

TEST_CASE("gather_last_step and scatter_last_step reject bad lengths and shapes", "[nn]") {
    const int64_t steps = 3, batch = 2, features = 4;
    std::vector<double> y(steps * batch * features), out(batch * features);
    const TensorView<double> yv(y.data(), {steps, batch, features});
    const TensorView<double> ov(out.data(), {batch, features});
    std::vector<int64_t> lengths = {3, 4};
    CHECK_THROWS_WITH(lstm::nn::gather_last_step(yv, lengths, ov),
                      Catch::Contains("lengths[1] = 4 exceeds T = 3"));
    lengths = {0, 1};
    CHECK_THROWS_WITH(lstm::nn::scatter_last_step(ov, lengths, yv),
                      Catch::Contains("lengths[0] = 0 must be >= 1"));
    lengths = {1, 2};
    CHECK_THROWS_WITH(
        lstm::nn::gather_last_step(yv, lengths, TensorView<double>(out.data(), {features, batch})),
        Catch::Contains("out must have shape (2, 4), got (4, 2)"));
    CHECK_THROWS_WITH(
        lstm::nn::scatter_last_step(TensorView<double>(out.data(), {batch, features}), lengths,
                                    TensorView<double>(y.data(), {steps * batch, features})),
        Catch::Contains("dy must have rank 3"));
    const std::vector<int64_t> previous_short = {0}, previous_past = {0, 3};
    CHECK_THROWS_WITH(
        lstm::nn::rescatter_last_step(TensorView<const double>(ov), lengths, previous_short, yv),
        Catch::Contains("previous must have N = 2 elements, got 1"));
    CHECK_THROWS_WITH(
        lstm::nn::rescatter_last_step(TensorView<const double>(ov), lengths, previous_past, yv),
        Catch::Contains("previous[1] = 3 is not a step of T = 3"));
    lengths = {0, 1};
    CHECK_THROWS_WITH(
        lstm::nn::rescatter_last_step(TensorView<const double>(ov), lengths, previous_past, yv),
        Catch::Contains("rescatter_last_step: lengths[0] = 0 must be >= 1"));
}

TEST_CASE("A last-step classification head matches finite differences end to end", "[nn][loss]") {
    // y (T, N, F) -> last valid step (N, F) -> Dense (N, C) -> mean cross-entropy.
    const int64_t steps = 4, batch = 3, features = 5, classes = 4;
    const std::vector<int64_t> lengths = {2, 4, 1};
    const std::vector<int64_t> targets = {3, 0, 2};
    auto y = lstm::test::random_vector<double>(steps * batch * features, 71);
    Dense<double> head(features, classes, true);
    head.reset_parameters(72);

    std::vector<double> last(batch * features), logits(batch * classes);
    const TensorView<double> yv(y.data(), {steps, batch, features});
    const TensorView<double> last_v(last.data(), {batch, features});
    const TensorView<double> logits_v(logits.data(), {batch, classes});
    auto loss = [&]() {
        lstm::nn::gather_last_step(yv, lengths, last_v);
        head.forward(last_v, logits_v);
        return lstm::loss::cross_entropy(logits_v, targets, lstm::loss::Reduction::mean);
    };

    // Analytic: the backward chain in reverse order.
    std::vector<double> dlogits(logits.size()), dlast(last.size()), dy(y.size());
    lstm::nn::gather_last_step(yv, lengths, last_v);
    head.forward(last_v, logits_v);
    lstm::loss::cross_entropy(logits_v, targets, lstm::loss::Reduction::mean,
                              TensorView<double>(dlogits.data(), {batch, classes}));
    head.zero_grad();
    head.backward(last_v, TensorView<double>(dlogits.data(), {batch, classes}),
                  TensorView<double>(dlast.data(), {batch, features}));
    lstm::nn::scatter_last_step(TensorView<double>(dlast.data(), {batch, features}), lengths,
                                TensorView<double>(dy.data(), {steps, batch, features}));

    const double h = 1e-6;
    std::vector<double> fd_y(y.size());
    for (size_t i = 0; i < y.size(); ++i) fd_y[i] = lstm::test::central_difference(y[i], h, loss);
    std::vector<double> fd_params(static_cast<size_t>(head.parameter_count()));
    for (size_t i = 0; i < fd_params.size(); ++i)
        fd_params[i] =
            lstm::test::central_difference(head.parameters()[static_cast<int64_t>(i)], h, loss);
    LSTM_CHECK_CLOSE(lstm::test::compare("dy", dy, fd_y, 1e-9, 1e-6));
    LSTM_CHECK_CLOSE(
        lstm::test::compare("dparams", to_vector(head.gradients()), fd_params, 1e-9, 1e-6));
    // Padded and non-final steps get exactly zero.
    for (int64_t t = 0; t < steps; ++t)
        for (int64_t n = 0; n < batch; ++n)
            if (t != lengths[n] - 1)
                for (int64_t f = 0; f < features; ++f)
                    CHECK(dy[(t * batch + n) * features + f] == 0.0);
}
