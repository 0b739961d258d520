// The host-device bodies behind the CUDA training step (optimizer updates, last-step and
// mean-pool gathers and their adjoints, the dense bias broadcast), run on the CPU over the same
// grid-stride index space as their kernels and compared with the CPU implementations; plus the
// device-tagged API of the layer and the optimizers, which needs no GPU to check.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/dense.hpp"
#include "kernels/cuda/optim.hpp"
#include "kernels/cuda/sequence.hpp"
#include "lstm/layer.hpp"
#include "lstm/nn/dense.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/optim.hpp"
#include "lstm/nn/sequence.hpp"
#include "test_util.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/nn/dense_cuda.hpp"
#endif

using namespace lstm;
using Catch::Contains;

namespace {

// Visits 0..total-1 as a grid-stride kernel of `blocks` x `threads` does: thread (b, t) takes
// b * threads + t, then steps by blocks * threads. A small grid makes every thread loop, so the
// stride arithmetic runs too. Each index must be visited exactly once.
void for_each_grid_index(int64_t total, int64_t blocks, int64_t threads,
                         const std::function<void(int64_t)>& body) {
    std::vector<int> visits(static_cast<size_t>(total), 0);
    for (int64_t b = 0; b < blocks; ++b)
        for (int64_t t = 0; t < threads; ++t)
            for (int64_t i = b * threads + t; i < total; i += blocks * threads) {
                ++visits[static_cast<size_t>(i)];
                body(i);
            }
    for (int64_t i = 0; i < total; ++i) REQUIRE(visits[static_cast<size_t>(i)] == 1);
}

constexpr int64_t kBlocks = 3, kThreads = 32;  // 96 lanes: fewer than the elements below

template <typename T>
void require_identical(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
    LSTM_REQUIRE_CLOSE(lstm::test::compare(what, got, want, 0.0, 0.0));
}

// decoupled: AdamW's weight decay instead of Adam's L2 term.
template <typename T>
void adam_body_matches_optimizer(bool decoupled) {
    nn::AdamOptions o;
    o.lr = 3e-3;
    o.weight_decay = 0.01;
    o.decoupled_weight_decay = decoupled;
    const int64_t n = 517;
    std::vector<T> p = lstm::test::random_vector<T>(n, 1), g(n);
    std::vector<T> p_body = p, m(n, T(0)), v(n, T(0));
    nn::Adam<T> adam(o);
    adam.add(Span<T>(p), Span<const T>(g));
    for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<T> fresh = lstm::test::random_vector<T>(n, 100 + uint64_t(step));
        std::copy(fresh.begin(), fresh.end(), g.begin());  // in place: the optimizer holds g
        adam.step();
        const auto c = kernels::adam_coefficients<T>(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                                     o.decoupled_weight_decay, step);
        for_each_grid_index(n, kBlocks, kThreads, [&](int64_t i) {
            kernels::adam_element(i, p_body.data(), g.data(), m.data(), v.data(), c);
        });
        INFO("Adam step " << step);
        require_identical("params", p_body, p);
    }
}

template <typename T>
void sgd_body_matches_optimizer(const nn::SgdOptions& o) {
    const int64_t n = 301;
    std::vector<T> p = lstm::test::random_vector<T>(n, 2), g(n);
    std::vector<T> p_body = p, buf(n, T(0));
    nn::Sgd<T> sgd(o);
    sgd.add(Span<T>(p), Span<const T>(g));
    for (int step = 0; step < 3; ++step) {
        const std::vector<T> fresh = lstm::test::random_vector<T>(n, 200 + uint64_t(step));
        std::copy(fresh.begin(), fresh.end(), g.begin());  // in place: the optimizer holds g
        sgd.step();
        kernels::SgdCoefficients<T> c;
        c.lr = static_cast<T>(o.lr);
        c.weight_decay = static_cast<T>(o.weight_decay);
        c.momentum = static_cast<T>(o.momentum);
        c.keep = static_cast<T>(1.0 - o.dampening);
        c.use_momentum = o.momentum != 0;
        c.nesterov = o.nesterov;
        c.first = step == 0;
        for_each_grid_index(n, kBlocks, kThreads, [&](int64_t i) {
            kernels::sgd_element(i, p_body.data(), g.data(), buf.data(), c);
        });
        INFO("SGD step " << step << ", momentum " << o.momentum << ", nesterov " << o.nesterov);
        require_identical("params", p_body, p);
    }
}

// A padded batch with lengths 1..T, including a full one, over odd sizes.
struct SequenceShape {
    int64_t steps = 7, batch = 5, features = 11;
    std::vector<int64_t> lengths = {7, 1, 4, 7, 2};
};

template <typename T>
void sequence_bodies_match(bool with_lengths) {
    const SequenceShape s;
    const Span<const int64_t> lengths =
        with_lengths ? Span<const int64_t>(s.lengths) : Span<const int64_t>();
    const int64_t* len = with_lengths ? s.lengths.data() : nullptr;
    const int64_t frames = s.steps * s.batch * s.features, rows = s.batch * s.features;
    const std::vector<T> y = lstm::test::random_vector<T>(frames, 3);
    const std::vector<T> dout = lstm::test::random_vector<T>(rows, 4);
    const TensorView<const T> yv(y.data(), {s.steps, s.batch, s.features});
    const TensorView<const T> doutv(dout.data(), {s.batch, s.features});
    INFO((with_lengths ? "with lengths" : "all full"));

    std::vector<T> want(rows), got(rows, T(-7));
    nn::gather_last_step(yv, lengths, TensorView<T>(want.data(), {s.batch, s.features}));
    for_each_grid_index(rows, kBlocks, kThreads, [&](int64_t i) {
        kernels::gather_last_step_element(i, s.steps, s.batch, s.features, len, y.data(),
                                          got.data());
    });
    require_identical("gather_last_step", got, want);

    nn::mean_pool_steps(yv, lengths, TensorView<T>(want.data(), {s.batch, s.features}));
    for_each_grid_index(rows, kBlocks, kThreads, [&](int64_t i) {
        kernels::mean_pool_element(i, s.steps, s.batch, s.features, len, y.data(), got.data());
    });
    require_identical("mean_pool_steps", got, want);

    std::vector<T> want_dy(frames), got_dy(frames, T(-7));  // -7: an unwritten element shows
    nn::scatter_last_step(doutv, lengths,
                          TensorView<T>(want_dy.data(), {s.steps, s.batch, s.features}));
    for_each_grid_index(frames, kBlocks, kThreads, [&](int64_t i) {
        kernels::scatter_last_step_element(i, s.steps, s.batch, s.features, len, dout.data(),
                                           got_dy.data());
    });
    require_identical("scatter_last_step", got_dy, want_dy);

    nn::scatter_mean_pool(doutv, lengths,
                          TensorView<T>(want_dy.data(), {s.steps, s.batch, s.features}));
    std::fill(got_dy.begin(), got_dy.end(), T(-7));
    for_each_grid_index(frames, kBlocks, kThreads, [&](int64_t i) {
        kernels::scatter_mean_pool_element(i, s.steps, s.batch, s.features, len, dout.data(),
                                           got_dy.data());
    });
    require_identical("scatter_mean_pool", got_dy, want_dy);
}

}  // namespace

TEST_CASE("cuda_nn: the Adam element body over a kernel grid equals nn::Adam", "[cuda_nn_host]") {
    for (bool decoupled : {false, true}) {
        INFO("decoupled weight decay: " << decoupled);
        adam_body_matches_optimizer<float>(decoupled);
        adam_body_matches_optimizer<double>(decoupled);
    }
}

TEST_CASE("cuda_nn: the SGD element body over a kernel grid equals nn::Sgd", "[cuda_nn_host]") {
    nn::SgdOptions plain;
    plain.lr = 0.05;
    nn::SgdOptions momentum = plain;
    momentum.momentum = 0.9;
    momentum.dampening = 0.1;
    momentum.weight_decay = 0.01;
    nn::SgdOptions nesterov = plain;
    nesterov.momentum = 0.8;
    nesterov.nesterov = true;
    for (const auto& o : {plain, momentum, nesterov}) {
        sgd_body_matches_optimizer<float>(o);
        sgd_body_matches_optimizer<double>(o);
    }
}

TEST_CASE("cuda_nn: sequence head bodies over a kernel grid equal nn:: gathers and scatters",
          "[cuda_nn_host]") {
    for (bool with_lengths : {true, false}) {
        sequence_bodies_match<float>(with_lengths);
        sequence_bodies_match<double>(with_lengths);
    }
}

TEST_CASE("cuda_nn: bias broadcast then GEMM onto it equals nn::Dense::forward", "[cuda_nn_host]") {
    const int64_t rows = 9, in = 6, out = 5;
    nn::Dense<double> dense(in, out, true);
    dense.reset_parameters(17);
    const std::vector<double> x = lstm::test::random_vector<double>(rows * in, 5);
    std::vector<double> want(rows * out), got(rows * out, -7.0);
    dense.forward(TensorView<const double>(x.data(), {rows, in}),
                  TensorView<double>(want.data(), {rows, out}));
    const double* w = std::as_const(dense).weight().data();
    const double* b = std::as_const(dense).bias().data();
    for_each_grid_index(rows * out, kBlocks, kThreads,
                        [&](int64_t i) { kernels::broadcast_bias_element(i, out, b, got.data()); });
    // What the cuBLAS GEMM with beta = 1 adds onto the broadcast rows.
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < out; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w[j * in + k];
            got[r * out + j] += acc;
        }
    LSTM_REQUIRE_CLOSE(lstm::test::compare("dense forward", got, want, 1e-14, 1e-13));

    std::vector<float> ones(7, 0.0f);
    for_each_grid_index(7, 2, 2, [&](int64_t i) { kernels::fill_element(i, 1.0f, ones.data()); });
    CHECK(ones == std::vector<float>(7, 1.0f));
}

TEST_CASE("cuda_nn: FlatSpan reads host buffers and refuses device ones on the host",
          "[cuda_nn_host]") {
    std::vector<float> host = {1, 2, 3};
    const FlatSpan<float> on_host{host.data(), 3, Device::cpu};
    CHECK(on_host[1] == 2.0f);
    CHECK(std::vector<float>(on_host.begin(), on_host.end()) == host);
    const Span<const float> as_span = on_host;
    CHECK(as_span.size == 3);
    const FlatSpan<const float> read_only = on_host;
    CHECK(read_only.view().device() == Device::cpu);
    CHECK(read_only.view().numel() == 3);

    // A pointer tagged cuda is never dereferenced on the host: every host accessor throws first.
    const FlatSpan<float> on_device{host.data(), 3, Device::cuda};
    CHECK_THROWS_WITH(on_device.begin(), Contains("lives on cuda"));
    CHECK_THROWS_WITH(on_device[0], Contains("cannot be read on the host"));
    CHECK_THROWS_WITH(Span<float>(on_device), Contains("conversion to Span"));
    CHECK(on_device.view().device() == Device::cuda);
}

TEST_CASE("cuda_nn: the host layer's flat buffers, loads and stores", "[cuda_nn_host]") {
    const Config config{3, 5, 2, true};
    Lstm layer(config, "basic");
    CHECK(layer.device() == Device::cpu);
    CHECK(layer.context() == nullptr);
    CHECK(layer.parameters().device == Device::cpu);
    CHECK(layer.parameters().size == param_count(config));
    for (float g : layer.gradients()) CHECK(g == 0.0f);  // a fresh layer's gradients are zero

    std::vector<float> stored(static_cast<size_t>(param_count(config)));
    layer.store_parameters(Span<float>(stored));
    CHECK(stored == std::vector<float>(layer.parameters().begin(), layer.parameters().end()));
    const std::vector<float> loaded = lstm::test::random_vector<float>(stored.size(), 9);
    layer.load_parameters(Span<const float>(loaded));
    CHECK(std::vector<float>(layer.parameters().begin(), layer.parameters().end()) == loaded);
    std::vector<float> short_buffer(3);
    CHECK_THROWS_WITH(layer.store_parameters(Span<float>(short_buffer)),
                      Contains("has 3 elements, expected param_count(config) = "));

    // The seed alone decides the initialisation (the cuda layer draws the same values).
    Lstm again(config, "basic");
    layer.reset_parameters(42);
    again.reset_parameters(42);
    CHECK(std::vector<float>(layer.parameters().begin(), layer.parameters().end()) ==
          std::vector<float>(again.parameters().begin(), again.parameters().end()));
}

TEST_CASE("cuda_nn: optimizers take device-tagged views and check them", "[cuda_nn_host]") {
    const int64_t n = 40;
    std::vector<float> p1 = lstm::test::random_vector<float>(n, 6),
                       g = lstm::test::random_vector<float>(n, 7);
    std::vector<float> p2 = p1;
    nn::Adam<float> by_span, by_view;
    by_span.add(Span<float>(p1), Span<const float>(g));
    by_view.add(TensorView<float>(p2.data(), {n}), TensorView<const float>(g.data(), {n}));
    by_span.step();
    by_view.step();
    CHECK(p1 == p2);

    std::vector<float> g_short(n - 1);
    CHECK_THROWS_WITH(by_view.add(TensorView<float>(p2.data(), {n}),
                                  TensorView<const float>(g_short.data(), {n - 1})),
                      Contains("grads has 39 elements, but params has 40"));
    CHECK_THROWS_WITH(by_view.add(TensorView<float>(p2.data(), {n}, Device::cuda),
                                  TensorView<const float>(g.data(), {n})),
                      Contains("params is on cuda but grads is on cpu"));
    nn::Sgd<float> sgd(nn::SgdOptions{});
    CHECK_THROWS_WITH(sgd.add(TensorView<float>(p2.data(), {n}, Device::cuda),
                              TensorView<const float>(g.data(), {n}, Device::cuda)),
                      Contains("need the lstm::cuda::Context"));
}

TEST_CASE("cuda_nn: a host model's dense() and optimizer()", "[cuda_nn_host]") {
    nn::ModelConfig mc;
    mc.lstm = Config{2, 4, 1, false};
    mc.classes = 3;
    nn::SequenceModel<float> model(mc, "basic");
    CHECK(model.device() == Device::cpu);
    CHECK(model.dense().out_features() == 3);
    CHECK(model.optimizer().buffer_count() == 2);
}

#if LSTM_WITH_CUDA
TEST_CASE("cuda_nn: DenseCuda refuses sizes past 64 bits before allocating", "[cuda_nn_host]") {
    // The refusal comes before the context or the device is used: zeroed storage of a Context's
    // size stands in for one, so no device is needed.
    alignas(cuda::Context) static unsigned char storage[sizeof(cuda::Context)] = {};
    cuda::Context& context = *reinterpret_cast<cuda::Context*>(storage);
    // out * in once wrapped parameter_count() (signed overflow) after the device allocation had
    // been asked for with the wrapped size.
    using Dense = nn::DenseCuda<float>;
    const int64_t big = int64_t(1) << 40;
    CHECK_THROWS_AS(Dense(big, big, true, context), OutOfMemory);
    CHECK_THROWS_WITH(Dense(big, big, true, context),
                      Contains("DenseCuda (in_features 1099511627776, out_features "
                               "1099511627776): its parameters and gradients need more than "
                               "2^64 bytes"));
    CHECK_THROWS_AS(Dense(int64_t(1) << 62, 4, false, context), OutOfMemory);
    // 2^63 bytes of weight and as many of gradient: each fits in 64 bits, together they do not.
    CHECK_THROWS_AS(Dense(int64_t(1) << 31, int64_t(1) << 30, false, context), OutOfMemory);
    CHECK_THROWS_WITH(Dense(0, 4, true, context), Contains("in_features must be >= 1, got 0"));
}
#endif
