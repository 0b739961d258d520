// SGD and Adam against independent scalar re-implementations of torch.optim's formulas in double,
// Adam's first-step fact (each parameter moves by lr * sign(grad), up to eps), and bad input.

#include "lstm/nn/optim.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using lstm::Span;
using lstm::nn::Adam;
using lstm::nn::AdamOptions;
using lstm::nn::Sgd;
using lstm::nn::SgdOptions;

// The oracle for one scalar parameter, written from the formulas in PyTorch's SGD documentation.
struct ScalarSgd {
    SgdOptions o;
    double p;
    double buf = 0;
    bool has_buf = false;
    void step(double g) {
        double d = g + o.weight_decay * p;
        if (o.momentum != 0) {
            buf = has_buf ? o.momentum * buf + (1 - o.dampening) * d : d;
            has_buf = true;
            d = o.nesterov ? d + o.momentum * buf : buf;
        }
        p -= o.lr * d;
    }
};

// The oracle for one scalar parameter, in the textbook form of Kingma & Ba with bias-corrected
// moments m_hat and v_hat (algebraically PyTorch's update, computed differently).
struct ScalarAdam {
    AdamOptions o;
    double p;
    double m = 0, v = 0;
    int t = 0;
    void step(double g) {
        ++t;
        // AdamW (Loshchilov & Hutter): the decay acts on the parameter, not through the moments.
        if (o.decoupled_weight_decay) p -= o.lr * o.weight_decay * p;
        const double d = o.decoupled_weight_decay ? g : g + o.weight_decay * p;
        m = o.beta1 * m + (1 - o.beta1) * d;
        v = o.beta2 * v + (1 - o.beta2) * d * d;
        const double m_hat = m / (1 - std::pow(o.beta1, t));
        const double v_hat = v / (1 - std::pow(o.beta2, t));
        p -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
};

// Runs `steps` updates of an optimizer over two buffers (odd sizes) against per-element oracles,
// feeding both the same gradient sequence, and compares all parameters after every step.
template <typename T, typename Optimizer, typename Oracle, typename Options>
void run_against_oracle(const Options& options, int steps, double tol) {
    const size_t sizes[] = {5, 17};
    std::vector<std::vector<T>> params, grads;
    std::vector<std::vector<Oracle>> oracles;
    Optimizer opt(options);
    for (size_t b = 0; b < 2; ++b) {
        params.push_back(lstm::test::random_vector<T>(sizes[b], 100 + b));
        grads.emplace_back(sizes[b]);
        oracles.emplace_back();
        for (T p : params[b]) oracles[b].push_back(Oracle{options, static_cast<double>(p)});
    }
    // Registered after all push_backs, so the vectors' storage no longer moves.
    for (size_t b = 0; b < 2; ++b) opt.add(Span<T>(params[b]), Span<const T>(grads[b]));
    for (int s = 0; s < steps; ++s) {
        for (size_t b = 0; b < 2; ++b) {
            // Copied in place: the optimizer holds a span of this very storage.
            const auto g = lstm::test::random_vector<T>(sizes[b], 1000 * (s + 1) + b, -2.0, 2.0);
            std::copy(g.begin(), g.end(), grads[b].begin());
            for (size_t i = 0; i < sizes[b]; ++i)
                oracles[b][i].step(static_cast<double>(grads[b][i]));
        }
        opt.step();
        for (size_t b = 0; b < 2; ++b) {
            std::vector<double> want;
            for (const auto& o : oracles[b]) want.push_back(o.p);
            INFO("step " << s + 1 << ", buffer " << b);
            LSTM_REQUIRE_CLOSE(lstm::test::compare("params", params[b], want, tol, tol));
        }
    }
}

template <typename T>
double optim_tol() {
    return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

}  // namespace

TEMPLATE_TEST_CASE("Sgd follows PyTorch's update rule over several steps", "[nn]", float, double) {
    using T = TestType;
    SECTION("plain") {
        run_against_oracle<T, Sgd<T>, ScalarSgd>(SgdOptions{0.1, 0, 0, 0, false}, 6,
                                                 optim_tol<T>());
    }
    SECTION("momentum: the first step seeds the buffer with the gradient") {
        run_against_oracle<T, Sgd<T>, ScalarSgd>(SgdOptions{0.05, 0.9, 0, 0, false}, 6,
                                                 optim_tol<T>());
    }
    SECTION("momentum, dampening and weight decay") {
        run_against_oracle<T, Sgd<T>, ScalarSgd>(SgdOptions{0.05, 0.8, 0.3, 0.01, false}, 6,
                                                 optim_tol<T>());
    }
    SECTION("nesterov with weight decay") {
        run_against_oracle<T, Sgd<T>, ScalarSgd>(SgdOptions{0.02, 0.9, 0, 0.1, true}, 6,
                                                 optim_tol<T>());
    }
}

TEMPLATE_TEST_CASE("Adam follows PyTorch's bias-corrected update over several steps", "[nn]", float,
                   double) {
    using T = TestType;
    SECTION("defaults") {
        run_against_oracle<T, Adam<T>, ScalarAdam>(AdamOptions{}, 8, optim_tol<T>());
    }
    SECTION("large lr, other betas, weight decay") {
        run_against_oracle<T, Adam<T>, ScalarAdam>(AdamOptions{0.1, 0.8, 0.99, 1e-6, 0.05}, 8,
                                                   optim_tol<T>());
    }
    SECTION("decoupled weight decay (AdamW)") {
        AdamOptions o = lstm::nn::adamw_options(0.05, 0.2);
        o.beta2 = 0.99;
        run_against_oracle<T, Adam<T>, ScalarAdam>(o, 8, optim_tol<T>());
    }
}

TEST_CASE("AdamW gives torch.optim.AdamW's parameters", "[nn]") {
    // Printed by PyTorch 1.13.1 (float64): p = tensor([0.5, -1.25, 2.0, 0.0, -0.75]),
    // AdamW([p], lr=0.1, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.3), three steps with the
    // gradients below, p after each.
    const std::vector<std::vector<double>> grads = {
        {0.3, -0.2, 1.5, 0.01, -2.0}, {-0.1, 0.4, 0.5, -0.3, 1.0}, {0.2, 0.2, -0.7, 0.05, 0.6}};
    const std::vector<std::vector<double>> torch_params = {
        {0.38500033333222222, -1.1125004999974999, 1.8400000666666221, -0.099990000999900019,
         -0.627500049999975},
        {0.33335598182011222, -1.1156861408900185, 1.6975355967758823, -0.025011617351393192,
         -0.58200512248521608},
        {0.2629495989397736, -1.1341398874337831, 1.6108354646234007, 0.020239219280221515,
         -0.56122085889131479}};
    AdamOptions o = lstm::nn::adamw_options(0.1, 0.3);
    o.beta2 = 0.99;
    o.eps = 1e-6;
    Adam<double> adam(o);
    std::vector<double> params = {0.5, -1.25, 2.0, 0.0, -0.75}, g(5);
    adam.add(Span<double>(params), Span<const double>(g));
    for (size_t s = 0; s < grads.size(); ++s) {
        g = grads[s];
        adam.step();
        INFO("step " << s + 1);
        LSTM_REQUIRE_CLOSE(lstm::test::compare("params", params, torch_params[s], 1e-14, 1e-14));
    }
}

TEMPLATE_TEST_CASE("Adam's first step moves each parameter by lr times sign(grad)", "[nn]", float,
                   double) {
    // After one step m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps): lr times
    // the sign of g up to a relative eps / |g| (Kingma & Ba, section 2.1).
    using T = TestType;
    const double lr = 1e-3, eps = 1e-8;
    const size_t n = 64;
    std::vector<T> params(n, T(0)), grads(n);
    const auto u = lstm::test::random_vector<double>(n, 5, -1.0, 1.0);
    for (size_t i = 0; i < n; ++i) {
        // Magnitudes from 1e-3 to 10 with both signs.
        const double magnitude = std::pow(10.0, -3.0 + 4.0 * std::abs(u[i]));
        grads[i] = static_cast<T>(u[i] < 0 ? -magnitude : magnitude);
    }
    Adam<T> adam(AdamOptions{lr, 0.9, 0.999, eps, 0});
    adam.add(Span<T>(params), Span<const T>(grads));
    adam.step();
    const double rounding = std::is_same_v<T, float> ? 1e-6 : 1e-14;
    for (size_t i = 0; i < n; ++i) {
        const double g = static_cast<double>(grads[i]);
        const double want = g < 0 ? lr : -lr;
        INFO("grad " << g);
        CHECK(std::abs(static_cast<double>(params[i]) - want) <=
              lr * (eps / std::abs(g) + rounding));
    }

    // A buffer added later keeps its own step count: its first step is again lr * sign(grad).
    std::vector<T> late_params(3, T(0)), late_grads = {T(-4), T(0.5), T(2e-3)};
    adam.add(Span<T>(late_params), Span<const T>(late_grads));
    adam.step();
    CHECK(static_cast<double>(late_params[0]) == Approx(lr).epsilon(1e-5));
    CHECK(static_cast<double>(late_params[1]) == Approx(-lr).epsilon(1e-5));
    CHECK(static_cast<double>(late_params[2]) == Approx(-lr).epsilon(1e-5));
}

TEMPLATE_TEST_CASE("Adam with a small beta1 keeps gradients far smaller than the moment", "[nn]",
                   float, double) {
    // Printed by PyTorch 1.13.1: p = zeros(3), Adam([p], lr=0.01, betas=(b1, b2), eps=1e-8),
    // three steps with the gradients below; p after the last step. With beta1 = 0 the first
    // moment is the gradient itself, so exp_avg must equal it exactly: stepping m + 1 * (d - m)
    // rounded a 1e-8 gradient after a gradient of 1 away to m = 0, and p did not move.
    using T = TestType;
    const bool is_float = std::is_same_v<T, float>;
    const std::vector<std::vector<T>> grads = {
        {T(1.0), T(-2.0), T(0.5)}, {T(1e-8), T(3e-9), T(-1e-7)}, {T(2e-12), T(1.0), T(4e-6)}};
    struct Case {
        double beta1, beta2;
        std::vector<double> torch_float, torch_double;
    };
    const Case cases[] = {{0.0,
                           0.0,
                           {-0.015001999214291573, -0.0023076925426721573, -0.01088415365666151},
                           {-0.015001999500079986, -0.0023076922576923085, -0.010884153053230563}},
                          {0.3,
                           0.9,
                           {-0.014537321403622627, 0.00863670650869608, -0.01453742478042841},
                           {-0.014537321300110328, 0.00863670622173288, -0.014537423226606214}}};
    for (const Case& c : cases) {
        INFO("betas (" << c.beta1 << ", " << c.beta2 << ")");
        Adam<T> adam(AdamOptions{0.01, c.beta1, c.beta2, 1e-8, 0});
        std::vector<T> params(3, T(0)), g(3);
        adam.add(Span<T>(params), Span<const T>(g));
        for (const std::vector<T>& step : grads) {
            g = step;
            adam.step();
            if (c.beta1 == 0)
                CHECK(std::vector<T>(adam.exp_avg(0).data(), adam.exp_avg(0).data() + 3) == step);
        }
        const double tol = is_float ? 1e-6 : 1e-14;
        LSTM_REQUIRE_CLOSE(lstm::test::compare(
            "params", params, is_float ? c.torch_float : c.torch_double, tol, tol));
    }
}

TEST_CASE("Sgd and Adam update large buffers like the scalar formulas", "[nn]") {
    // Big enough for the OpenMP path; the update is elementwise, so threads cannot change it.
    const size_t n = (size_t(1) << 15) + 3;
    auto params = lstm::test::random_vector<double>(n, 7);
    auto adam_params = params;
    std::vector<double> grads(n);
    Sgd<double> sgd(SgdOptions{0.1, 0.9, 0, 1e-3, false});
    Adam<double> adam(AdamOptions{});
    sgd.add(Span<double>(params), Span<const double>(grads));
    adam.add(Span<double>(adam_params), Span<const double>(grads));
    std::vector<ScalarSgd> sgd_ref;
    std::vector<ScalarAdam> adam_ref;
    for (size_t i = 0; i < n; ++i) {
        sgd_ref.push_back(ScalarSgd{sgd.options(), params[i]});
        adam_ref.push_back(ScalarAdam{adam.options(), params[i]});
    }
    for (int s = 0; s < 3; ++s) {
        const auto g = lstm::test::random_vector<double>(n, 50 + s);
        std::copy(g.begin(), g.end(), grads.begin());  // in place: the optimizers hold spans
        sgd.step();
        adam.step();
        for (size_t i = 0; i < n; ++i) {
            sgd_ref[i].step(grads[i]);
            adam_ref[i].step(grads[i]);
        }
    }
    std::vector<double> sgd_want(n), adam_want(n);
    for (size_t i = 0; i < n; ++i) sgd_want[i] = sgd_ref[i].p, adam_want[i] = adam_ref[i].p;
    LSTM_CHECK_CLOSE(lstm::test::compare("sgd", params, sgd_want, 1e-13, 1e-13));
    LSTM_CHECK_CLOSE(lstm::test::compare("adam", adam_params, adam_want, 1e-13, 1e-13));
}

TEST_CASE("Sgd set_lr changes the following steps only", "[nn]") {
    std::vector<double> params = {1.0, -2.0}, grads = {0.5, 0.25};
    Sgd<double> sgd(SgdOptions{0.1});
    sgd.add(Span<double>(params), Span<const double>(grads));
    sgd.step();  // p -= 0.1 * g
    sgd.set_lr(1.0);
    sgd.step();  // p -= 1.0 * g
    CHECK(params[0] == Approx(1.0 - 0.05 - 0.5).epsilon(1e-15));
    CHECK(params[1] == Approx(-2.0 - 0.025 - 0.25).epsilon(1e-15));
}

TEST_CASE("Adam refuses a step past the largest step count", "[nn]") {
    std::vector<float> params(3, 1.0f), grads(3, 0.5f), other(2, 1.0f), other_grads(2, 0.5f);
    Adam<float> adam;
    adam.add(Span<float>(other), Span<const float>(other_grads));
    adam.add(Span<float>(params), Span<const float>(grads));
    adam.set_steps(1, std::numeric_limits<int64_t>::max());
    // The count once wrapped to INT64_MIN and wrote NaN into the parameters; and the refusal
    // once came after the buffers before it had been updated (a half-taken step).
    CHECK_THROWS_WITH(adam.step(), Catch::Contains("step count is already"));
    CHECK(params[0] == 1.0f);
    CHECK(other[0] == 1.0f);
    CHECK(adam.steps(0) == 0);
    // A negative size was once registered silently by Sgd and reported as out of memory by Adam.
    Sgd<float> sgd(SgdOptions{0.1});
    CHECK_THROWS_WITH(sgd.add(Span<float>(params.data(), -1), Span<const float>(grads.data(), -1)),
                      Catch::Contains("params has -1 elements; sizes must be >= 0"));
    CHECK_THROWS_WITH(adam.add(Span<float>(params.data(), -1), Span<const float>(grads.data(), -1)),
                      Catch::Contains("params has -1 elements; sizes must be >= 0"));
}

TEST_CASE("Optimizers reject mismatched buffers and invalid options", "[nn]") {
    std::vector<float> params(5), grads(4);
    Sgd<float> sgd(SgdOptions{0.1});
    CHECK_THROWS_WITH(sgd.add(Span<float>(params), Span<const float>(grads)),
                      Catch::Contains("grads has 4 elements, but params has 5"));
    Adam<float> adam;
    CHECK_THROWS_WITH(adam.add(Span<float>(params), Span<const float>(grads)),
                      Catch::Contains("grads has 4 elements, but params has 5"));
    // Overlapping params and grads (the loops are vectorised assuming they do not overlap):
    // the same buffer, and grads starting one element into params.
    std::vector<float> both(6);
    CHECK_THROWS_WITH(sgd.add(Span<float>(both.data(), 5), Span<const float>(both.data(), 5)),
                      Catch::Contains("params and grads overlap (5 elements each, 0 bytes apart)"));
    CHECK_THROWS_WITH(adam.add(Span<float>(both.data(), 5), Span<const float>(both.data() + 1, 5)),
                      Catch::Contains("params and grads overlap (5 elements each, 4 bytes apart)"));
    CHECK(sgd.buffer_count() == 0);
    CHECK(adam.buffer_count() == 0);
    // Adjacent is not overlapping.
    adam.add(Span<float>(both.data(), 3), Span<const float>(both.data() + 3, 3));
    CHECK(adam.buffer_count() == 1);
    // A pair sharing memory with a registered one: the same pair twice updated each parameter
    // twice per step, and params over a registered pair's grads rewrote a gradient (PyTorch
    // refuses a parameter in two groups).
    std::vector<float> p2(4), g2(4), other(4);
    sgd.add(Span<float>(p2), Span<const float>(g2));
    CHECK_THROWS_WITH(sgd.add(Span<float>(p2), Span<const float>(g2)),
                      "Sgd::add: params overlap the params of registered buffer 0; each parameter "
                      "may be registered once");
    CHECK_THROWS_WITH(sgd.add(Span<float>(p2.data() + 3, 1), Span<const float>(other.data(), 1)),
                      Catch::Contains("params overlap the params of registered buffer 0"));
    CHECK_THROWS_WITH(adam.add(Span<float>(both.data() + 3, 3), Span<const float>(other.data(), 3)),
                      "Adam::add: params overlap the grads of registered buffer 0; a step would "
                      "rewrite a gradient it reads");
    CHECK_THROWS_WITH(adam.add(Span<float>(other.data(), 3), Span<const float>(both.data(), 3)),
                      "Adam::add: grads overlap the params of registered buffer 0; a step would "
                      "rewrite a gradient it reads");
    CHECK(sgd.buffer_count() == 1);
    CHECK(adam.buffer_count() == 1);
    // Two pairs may read the same gradients (as two optimizers may).
    adam.add(Span<float>(other.data(), 3), Span<const float>(both.data() + 3, 3));
    CHECK(adam.buffer_count() == 2);

    CHECK_THROWS_WITH(Sgd<float>(SgdOptions{-0.1}), Catch::Contains("lr must be >= 0, got -0.1"));
    CHECK_THROWS_WITH(Sgd<float>(SgdOptions{0.1, 0.9, 0.5, 0, true}),
                      Catch::Contains("nesterov needs momentum > 0 and dampening = 0"));
    CHECK_THROWS_WITH(Adam<float>(AdamOptions{1e-3, 1.0}),
                      Catch::Contains("beta1 must be in [0, 1), got 1"));
    CHECK_THROWS_WITH(Adam<float>(AdamOptions{1e-3, 0.9, -0.5}),
                      Catch::Contains("beta2 must be in [0, 1), got -0.5"));
    CHECK_THROWS_WITH(Adam<float>(AdamOptions{1e-3, 0.9, 0.999, -1.0}),
                      Catch::Contains("eps must be >= 0"));
    CHECK_THROWS_AS(adam.set_lr(-1.0), lstm::Error);
}
