// The mean-pooling head of Bahrampour's IMDB model (nn::Head::ce_mean_pool): the pooling and its
// adjoint against hand-written double loops, the model's loss against a double reference built
// from the LSTM oracle, and its gradients against central finite differences of that loss.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "lstm/nn/model.hpp"
#include "lstm/nn/sequence.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/registry.hpp"
#include "test_util.hpp"

using namespace lstm;
using namespace lstm::test;
using Catch::Contains;

namespace {

// A small model with every piece of the IMDB one: one LSTM layer, mean over valid steps, dense
// with bias, softmax CE over 2 classes, batch mean. Lengths vary, one sequence has a single step.
struct PoolProblem {
    Config lstm{3, 4, 1, false};
    int64_t seq_len = 6, batch = 3, classes = 2;
    std::vector<int64_t> lengths = {6, 3, 1};
    std::vector<int64_t> targets = {0, 1, 1};
    std::vector<double> x = random_vector(6 * 3 * 3, 4100);

    nn::ModelConfig model_config() const {
        nn::ModelConfig m;
        m.lstm = lstm;
        m.classes = classes;
        m.dense_bias = true;
        m.head = nn::Head::ce_mean_pool;
        return m;
    }
};

// The model's batch-mean loss in double from the LSTM oracle, the pooling and the dense layer
// written out here: lstm_params (param_count), dense_params (classes * H weight then classes
// bias).
double reference_loss(const PoolProblem& p, const std::vector<double>& lstm_params,
                      const std::vector<double>& dense_params) {
    reference::LstmInputs in;
    in.config = p.lstm;
    in.seq_len = p.seq_len;
    in.batch = p.batch;
    in.x = p.x;
    in.lengths = p.lengths;
    in.params = lstm_params;
    const std::vector<double> y = reference::lstm_forward(in).y;
    const int64_t hidden = p.lstm.hidden_size;
    double total = 0;
    for (int64_t n = 0; n < p.batch; ++n) {
        std::vector<double> pooled(hidden, 0.0);
        for (int64_t t = 0; t < p.lengths[n]; ++t)
            for (int64_t k = 0; k < hidden; ++k) pooled[k] += y[(t * p.batch + n) * hidden + k];
        for (double& v : pooled) v /= static_cast<double>(p.lengths[n]);
        std::vector<double> logits(p.classes);
        for (int64_t c = 0; c < p.classes; ++c) {
            logits[c] = dense_params[p.classes * hidden + c];
            for (int64_t k = 0; k < hidden; ++k)
                logits[c] += dense_params[c * hidden + k] * pooled[k];
        }
        double sum = 0;
        for (double v : logits) sum += std::exp(v);
        total += std::log(sum) - logits[p.targets[n]];
    }
    return total / static_cast<double>(p.batch);
}

// A host buffer (Span, or the layer's flat parameter view) widened to double.
template <typename Range>
std::vector<double> to_double(const Range& r) {
    return std::vector<double>(r.begin(), r.end());
}

// Variants that run the problem in `dtype`, variable lengths included.
std::vector<const Variant*> pool_variants(const PoolProblem& p, DType dtype) {
    std::vector<const Variant*> out;
    for (const Variant* v : variants_on(Device::cpu))
        if (!v->supports(p.lstm, dtype) && !v->supports_variable_lengths()) out.push_back(v);
    return out;
}

}  // namespace

TEST_CASE("mean_pool_steps averages the valid steps and scatter_mean_pool is its adjoint",
          "[mean_pool]") {
    const int64_t steps = 5, batch = 3, features = 4;
    const std::vector<int64_t> lengths = {5, 2, 1};
    std::vector<float> y = random_vector<float>(steps * batch * features, 4000);
    // Padded steps hold NaN: a pooling that reads them cannot pass.
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t t = lengths[n]; t < steps; ++t)
            for (int64_t f = 0; f < features; ++f)
                y[(t * batch + n) * features + f] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> pooled(batch * features);
    nn::mean_pool_steps(TensorView<const float>(y.data(), {steps, batch, features}),
                        Span<const int64_t>(lengths),
                        TensorView<float>(pooled.data(), {batch, features}));
    std::vector<double> want(batch * features, 0.0);
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t f = 0; f < features; ++f) {
            for (int64_t t = 0; t < lengths[n]; ++t)
                want[n * features + f] += y[(t * batch + n) * features + f];
            want[n * features + f] /= static_cast<double>(lengths[n]);
        }
    LSTM_CHECK_CLOSE(compare("pooled", pooled, want, 1e-7, 1e-6));

    // <pool(y), d> == <y, scatter(d)> over the valid steps; scatter leaves padded steps at zero.
    const std::vector<float> d = random_vector<float>(batch * features, 4001);
    std::vector<float> dy(y.size(), 123.0f);
    nn::scatter_mean_pool(TensorView<const float>(d.data(), {batch, features}),
                          Span<const int64_t>(lengths),
                          TensorView<float>(dy.data(), {steps, batch, features}));
    double lhs = 0, rhs = 0;
    for (size_t k = 0; k < d.size(); ++k) lhs += double(pooled[k]) * double(d[k]);
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t t = 0; t < steps; ++t)
            for (int64_t f = 0; f < features; ++f) {
                const size_t e = static_cast<size_t>((t * batch + n) * features + f);
                if (t < lengths[n])
                    rhs += double(y[e]) * double(dy[e]);
                else
                    CHECK(dy[e] == 0.0f);
            }
    CHECK(lhs == Approx(rhs).epsilon(1e-6));

    // Bad lengths are named.
    const std::vector<int64_t> bad = {5, 0, 1};
    CHECK_THROWS_AS(nn::mean_pool_steps(TensorView<const float>(y.data(), {steps, batch, features}),
                                        Span<const int64_t>(bad),
                                        TensorView<float>(pooled.data(), {batch, features})),
                    Error);
    CHECK_THROWS_WITH(nn::scatter_mean_pool(TensorView<const float>(d.data(), {batch, features}),
                                            Span<const int64_t>(bad),
                                            TensorView<float>(dy.data(), {steps, batch, features})),
                      Contains("lengths[1] = 0 must be >= 1"));
}

TEST_CASE(
    "ce_mean_pool model: loss matches a double reference, gradients match finite "
    "differences",
    "[mean_pool]") {
    const PoolProblem p;
    const TensorView<const double> x(p.x.data(), {p.seq_len, p.batch, p.lstm.input_size});
    const Span<const int64_t> lengths(p.lengths), targets(p.targets);
    const auto variants = pool_variants(p, DType::f64);
    REQUIRE_FALSE(variants.empty());
    for (const Variant* v : variants) {
        INFO("variant " << v->name());
        nn::SequenceModel<double> model(p.model_config(), v->name(), Device::cpu, 11);
        const std::vector<double> lstm_params = to_double(std::as_const(model.lstm()).parameters());
        const std::vector<double> dense_params =
            to_double(std::as_const(model.dense()).parameters());
        const double want = reference_loss(p, lstm_params, dense_params);
        CHECK(model.evaluate(x, lengths, targets) == Approx(want).epsilon(1e-12));
        CHECK(model.compute_gradients(x, lengths, targets) == Approx(want).epsilon(1e-12));
        // compute_gradients leaves the parameters alone (no optimizer step).
        CHECK(to_double(std::as_const(model.lstm()).parameters()) == lstm_params);
        CHECK(to_double(std::as_const(model.dense()).parameters()) == dense_params);

        // Central differences of the reference loss over every parameter of both layers.
        constexpr double kStep = 1e-6;
        auto finite_differences = [&](bool dense) {
            std::vector<double> lp = lstm_params, dp = dense_params;
            std::vector<double>& target = dense ? dp : lp;
            std::vector<double> out(target.size());
            for (size_t k = 0; k < target.size(); ++k) {
                const double saved = target[k];
                target[k] = saved + kStep;
                const double up = reference_loss(p, lp, dp);
                target[k] = saved - kStep;
                const double down = reference_loss(p, lp, dp);
                target[k] = saved;
                out[k] = (up - down) / (2 * kStep);
            }
            return out;
        };
        LSTM_CHECK_CLOSE(compare("LSTM gradients",
                                 to_double(std::as_const(model.lstm()).gradients()),
                                 finite_differences(false), 1e-8, 1e-6));
        LSTM_CHECK_CLOSE(compare("dense gradients",
                                 to_double(std::as_const(model.dense()).gradients()),
                                 finite_differences(true), 1e-8, 1e-6));
    }
}

TEST_CASE("ce_mean_pool model in fp32 matches fp64 on every CPU variant", "[mean_pool]") {
    const PoolProblem p;
    const std::vector<float> xf = cast_vector<float>(p.x);
    const Span<const int64_t> lengths(p.lengths), targets(p.targets);
    // fp64 from the first variant that has it (the previous test checks it against finite
    // differences); fp32 parameters are the same draws rounded.
    const auto doubles = pool_variants(p, DType::f64);
    REQUIRE_FALSE(doubles.empty());
    nn::SequenceModel<double> want(p.model_config(), doubles.front()->name(), Device::cpu, 11);
    const double want_loss = want.compute_gradients(
        TensorView<const double>(p.x.data(), {p.seq_len, p.batch, p.lstm.input_size}), lengths,
        targets);
    const std::vector<double> want_lstm = to_double(std::as_const(want.lstm()).gradients());
    const std::vector<double> want_dense = to_double(std::as_const(want.dense()).gradients());
    for (const Variant* v : pool_variants(p, DType::f32)) {
        INFO("variant " << v->name());
        nn::SequenceModel<float> model(p.model_config(), v->name(), Device::cpu, 11);
        const float loss = model.compute_gradients(
            TensorView<const float>(xf.data(), {p.seq_len, p.batch, p.lstm.input_size}), lengths,
            targets);
        CHECK(loss == Approx(want_loss).epsilon(1e-5));
        LSTM_CHECK_CLOSE(compare("LSTM gradients",
                                 to_double(std::as_const(model.lstm()).gradients()), want_lstm,
                                 1e-6, 1e-4));
        LSTM_CHECK_CLOSE(compare("dense gradients",
                                 to_double(std::as_const(model.dense()).gradients()), want_dense,
                                 1e-6, 1e-4));
    }
}
