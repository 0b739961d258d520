// The owning layer and the whole training step on CUDA against the same on the CPU, in this
// binary: the optimizer kernels, the device dense layer and sequence heads, lstm::Lstm on cuda
// (every registered CUDA variant) and one SequenceModel step per head. Every comparison prints
// its worst elements when it fails. Generated cases (tests/gpu/case_registry.hpp): one per
// optimizer and dtype, per variant and layer shape, per variant and head.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "case_registry.hpp"
#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/io/checkpoint.hpp"
#include "lstm/layer.hpp"
#include "lstm/nn/dense_cuda.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/optim.hpp"
#include "lstm/nn/sequence_cuda.hpp"
#include "lstm/reference/tolerance.hpp"
#include "lstm/registry.hpp"
#include "test_util.hpp"

using namespace lstm;

namespace {

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// |got - want| <= rtol * (max|want| + |want|), the reference rule; prints the worst elements.
template <typename A, typename B>
void check_close(const std::string& what, const std::vector<A>& got, const std::vector<B>& want,
                 double rtol) {
    const std::vector<double> expected = widen(want);
    LSTM_CHECK_CLOSE(
        test::compare(what, widen(got), expected, rtol * reference::max_abs(expected), rtol));
}

// A device view of a Buffer holding `shape`.
template <typename T>
TensorView<T> device_view(const Buffer& b, std::initializer_list<int64_t> shape) {
    return TensorView<T>(b.as<T>(), shape, Device::cuda);
}

template <typename V>
std::vector<float> download(const V& view, cuda::Context& ctx) {
    std::vector<float> out(static_cast<size_t>(view.numel()));
    Buffer::copy(out.data(), Device::cpu, view.data(), Device::cuda, out.size() * sizeof(float),
                 &ctx);
    return out;
}

template <typename T>
void optimizer_kernels_match(bool adam, const nn::SgdOptions& sgd_options) {
    cuda::Context ctx;
    const int64_t n = 100003;  // odd, and beyond one grid pass of the capped launch
    std::vector<T> p = test::random_vector<T>(n, 1), g(n);
    Buffer p_dev = Buffer::upload(Device::cuda, p, &ctx);
    Buffer g_dev(Device::cuda, n * sizeof(T));
    nn::AdamOptions adam_options;
    adam_options.lr = 2e-3;
    adam_options.weight_decay = 0.01;
    nn::Adam<T> host_adam(adam_options), dev_adam(adam_options);
    nn::Sgd<T> host_sgd(sgd_options), dev_sgd(sgd_options);
    const TensorView<T> pv(p_dev.as<T>(), {n}, Device::cuda);
    const TensorView<const T> gv(g_dev.as<T>(), {n}, Device::cuda);
    if (adam) {
        host_adam.add(Span<T>(p), Span<const T>(g));
        dev_adam.add(pv, gv, &ctx);
    } else {
        host_sgd.add(Span<T>(p), Span<const T>(g));
        dev_sgd.add(pv, gv, &ctx);
    }
    for (int step = 0; step < 3; ++step) {
        const std::vector<T> fresh = test::random_vector<T>(n, 50 + uint64_t(step));
        std::copy(fresh.begin(), fresh.end(), g.begin());
        g_dev.copy_from(g.data(), Device::cpu, n * sizeof(T), &ctx);
        if (adam) {
            host_adam.step();
            dev_adam.step();
        } else {
            host_sgd.step();
            dev_sgd.step();
        }
        // The bodies are shared; only FMA contraction (on the device, and on the host where the
        // compiler contracts) may move the last bit of an intermediate. That bit is one of the
        // operands, |p| and lr * |d| up to about 1, not of the result: where SGD's p - lr * d
        // cancels to a small parameter, its last digits differ (seen on an H200: 2.7e-8 apart in
        // float at 3.5e-4). Hence the reference rule's absolute part, rtol * max |p|.
        const double rtol = std::is_same_v<T, float> ? 2.5e-7 : 1e-15;
        const std::vector<T> got = p_dev.download<T>(n, &ctx);
        INFO((adam ? "Adam" : "SGD") << " step " << step << ", " << to_string(dtype_of<T>()));
        LSTM_CHECK_CLOSE(
            test::compare("params", got, p, rtol * reference::max_abs(widen(p)), rtol));
    }
}

// Problem shapes of the layer and model comparisons: odd sizes, mixed lengths including 1 and T.
struct Shape {
    Config config;
    int64_t seq_len, batch;
    std::vector<int64_t> lengths;
};

std::vector<int64_t> lengths_for(const Variant& v, const Shape& s) {
    if (v.supports_variable_lengths()) return std::vector<int64_t>(s.batch, s.seq_len);
    return s.lengths;
}

void layer_matches_cpu(const Variant& v, const Shape& s) {
    const Config& cfg = s.config;
    const int64_t cells = cfg.num_cells(), hidden = cfg.hidden_size, hs = cfg.state_size();
    const std::vector<int64_t> lengths = lengths_for(v, s);
    const int64_t x_n = s.seq_len * s.batch * cfg.input_size;
    const int64_t y_n = s.seq_len * s.batch * cfg.output_size();
    const int64_t h_n = cells * s.batch * hs, c_n = cells * s.batch * hidden;
    const auto x = test::random_vector<float>(x_n, 21), dy = test::random_vector<float>(y_n, 22);
    const auto h0 = test::random_vector<float>(h_n, 23), c0 = test::random_vector<float>(c_n, 24);
    const auto dhn = test::random_vector<float>(h_n, 25), dcn = test::random_vector<float>(c_n, 26);

    Lstm host(cfg, "basic");
    cuda::Context ctx;
    Lstm dev(cfg, v.name(), ctx);  // the borrowing constructor
    REQUIRE(dev.context() == &ctx);
    REQUIRE(dev.parameters().device == Device::cuda);
    host.reset_parameters(11);
    dev.reset_parameters(11);

    auto up = [&](const std::vector<float>& h) { return Buffer::upload(Device::cuda, h, &ctx); };
    const Buffer xd = up(x), dyd = up(dy), h0d = up(h0), c0d = up(c0), dhnd = up(dhn),
                 dcnd = up(dcn);
    // batch_first layers take (N, T, F) x and dy; the same random data read either way.
    const int64_t d0 = cfg.batch_first ? s.batch : s.seq_len;
    const int64_t d1 = cfg.batch_first ? s.seq_len : s.batch;
    const std::initializer_list<int64_t> xs = {d0, d1, cfg.input_size};
    const std::initializer_list<int64_t> ys = {d0, d1, cfg.output_size()};
    const std::initializer_list<int64_t> ss = {cells, s.batch, hs};  // h-like states
    const std::initializer_list<int64_t> cs = {cells, s.batch, hidden};
    const Span<const int64_t> len(lengths);

    const auto y_h = host.forward(TensorView<const float>(x.data(), xs), len,
                                  TensorView<const float>(h0.data(), ss),
                                  TensorView<const float>(c0.data(), cs));
    const auto y_d =
        dev.forward(device_view<const float>(xd, xs), len, device_view<const float>(h0d, ss),
                    device_view<const float>(c0d, cs));
    REQUIRE(y_d.device() == Device::cuda);
    host.zero_grad();
    dev.zero_grad();
    const auto dx_h = host.backward(TensorView<const float>(dy.data(), ys),
                                    TensorView<const float>(dhn.data(), ss),
                                    TensorView<const float>(dcn.data(), cs));
    const auto dx_d =
        dev.backward(device_view<const float>(dyd, ys), device_view<const float>(dhnd, ss),
                     device_view<const float>(dcnd, cs));

    const double fwd =
        2 * reference::lstm_rtol(DType::f32, cfg, s.seq_len, reference::Pass::forward);
    const double bwd =
        2 * reference::lstm_rtol(DType::f32, cfg, s.seq_len, reference::Pass::backward);
    auto host_vec = [](TensorView<const float> t) {
        return std::vector<float>(t.data(), t.data() + t.numel());
    };
    INFO("variant " << v.name() << " (cuda) vs basic (cpu), config L" << cfg.num_layers
                    << (cfg.bidirectional ? " bi" : " uni") << ", proj " << cfg.proj_size
                    << (cfg.bias ? "" : ", no bias") << (cfg.batch_first ? ", batch_first" : "")
                    << ", dropout " << cfg.dropout);
    check_close("y", download(y_d, ctx), host_vec(y_h), fwd);
    check_close("hn", download(dev.hn(), ctx), host_vec(host.hn()), fwd);
    check_close("cn", download(dev.cn(), ctx), host_vec(host.cn()), fwd);
    check_close("dx", download(dx_d, ctx), host_vec(dx_h), bwd);
    check_close("dh0", download(dev.dh0(), ctx), host_vec(host.dh0()), bwd);
    check_close("dc0", download(dev.dc0(), ctx), host_vec(host.dc0()), bwd);
    std::vector<float> grads(static_cast<size_t>(param_count(cfg)));
    dev.store_gradients(Span<float>(grads));
    check_close("dparams", grads,
                std::vector<float>(host.gradients().begin(), host.gradients().end()), bwd);
}

struct ModelProblem {
    nn::Head head;
    Shape shape;
    int64_t classes;
    std::vector<int64_t> targets, target_lengths;
};

std::vector<ModelProblem> model_problems() {
    const Shape uni{Config{5, 8, 1, false}, 9, 4, {9, 4, 1, 7}};
    const Shape bi{Config{5, 6, 2, true}, 12, 3, {12, 7, 9}};
    std::vector<ModelProblem> out;
    out.push_back({nn::Head::ce_last_step, uni, 6, {0, 5, 2, 3}, {}});
    out.push_back({nn::Head::ce_mean_pool, uni, 6, {1, 1, 4, 0}, {}});
    std::vector<int64_t> frames(static_cast<size_t>(uni.seq_len * uni.batch));
    for (size_t k = 0; k < frames.size(); ++k) frames[k] = int64_t(k * 7 % 6);
    out.push_back({nn::Head::ce_every_frame, uni, 6, frames, {}});
    out.push_back({nn::Head::ctc, bi, 5, {1, 2, 2, 4, 3, 1}, {3, 2, 1}});
    out.push_back({nn::Head::ce_final_state, bi, 4, {3, 0, 2}, {}});
    return out;
}

void model_step_matches_cpu(const Variant& v, const ModelProblem& p) {
    const Shape& s = p.shape;
    nn::ModelConfig mc;
    mc.lstm = s.config;
    mc.classes = p.classes;
    mc.dense_bias = true;  // runs the bias broadcast and the bias GEMV
    mc.head = p.head;
    mc.adam.lr = 1e-2;
    const uint64_t seed = 5;
    nn::SequenceModel<float> host(mc, "basic", Device::cpu, seed);
    nn::SequenceModel<float> dev(mc, v.name(), Device::cuda, seed);
    const std::vector<int64_t> lengths = lengths_for(v, s);
    const auto x = test::random_vector<float>(s.seq_len * s.batch * s.config.input_size, 31);
    const TensorView<const float> xv(x.data(), {s.seq_len, s.batch, s.config.input_size});
    INFO("variant " << v.name() << " (cuda), head " << nn::to_string(p.head));

    const int64_t lstm_n = param_count(s.config), dense_n = host.dense().parameter_count();
    std::vector<float> lstm_p0(lstm_n), dense_p0(dense_n), lstm_p(lstm_n), dense_p(dense_n);
    std::vector<float> lstm_g(lstm_n), dense_g(dense_n);
    dev.lstm().store_parameters(Span<float>(lstm_p0));
    dev.dense_cuda().store_parameters(Span<float>(dense_p0));
    // The same seed gives the same model on both devices, bit for bit.
    CHECK(lstm_p0 ==
          std::vector<float>(host.lstm().parameters().begin(), host.lstm().parameters().end()));
    CHECK(dense_p0 ==
          std::vector<float>(host.dense().parameters().begin(), host.dense().parameters().end()));

    const float loss_h = host.compute_gradients(xv, lengths, p.targets, p.target_lengths);
    const float loss_d = dev.compute_gradients(xv, lengths, p.targets, p.target_lengths);
    INFO("loss cpu " << loss_h << ", cuda " << loss_d);
    CHECK(test::scalar_close("loss", loss_d, loss_h, 1e-6, 1e-5));
    dev.lstm().store_gradients(Span<float>(lstm_g));
    dev.dense_cuda().store_gradients(Span<float>(dense_g));
    const double bwd =
        4 * reference::lstm_rtol(DType::f32, s.config, s.seq_len, reference::Pass::backward);
    check_close("lstm gradients", lstm_g,
                std::vector<float>(host.lstm().gradients().begin(), host.lstm().gradients().end()),
                bwd);
    check_close(
        "dense gradients", dense_g,
        std::vector<float>(host.dense().gradients().begin(), host.dense().gradients().end()), bwd);

    // The device update equals the host Adam applied to the device's own gradients (a sharp
    // check of the update itself), and where gradients are well away from zero it equals the
    // host model's own step (Adam's first update is lr * g / (|g| + eps): near g = 0 it
    // amplifies rounding differences of g, elsewhere it does not).
    dev.optimizer().step();
    host.optimizer().step();
    dev.lstm().store_parameters(Span<float>(lstm_p));
    dev.dense_cuda().store_parameters(Span<float>(dense_p));
    nn::Adam<float> replay(mc.adam);
    replay.add(Span<float>(lstm_p0), Span<const float>(lstm_g));
    replay.add(Span<float>(dense_p0), Span<const float>(dense_g));
    replay.step();
    LSTM_CHECK_CLOSE(
        test::compare("lstm params vs host Adam on device grads", lstm_p, lstm_p0, 1e-9, 2.5e-7));
    LSTM_CHECK_CLOSE(test::compare("dense params vs host Adam on device grads", dense_p, dense_p0,
                                   1e-9, 2.5e-7));
    const auto host_lstm =
        std::vector<float>(host.lstm().parameters().begin(), host.lstm().parameters().end());
    const auto host_lstm_g =
        std::vector<float>(host.lstm().gradients().begin(), host.lstm().gradients().end());
    std::vector<float> got_far, want_far;
    const double far = 1e-3 * reference::max_abs(widen(host_lstm_g));
    for (size_t i = 0; i < host_lstm.size(); ++i)
        if (std::abs(host_lstm_g[i]) > far) {
            got_far.push_back(lstm_p[i]);
            want_far.push_back(host_lstm[i]);
        }
    LSTM_CHECK_CLOSE(test::compare("lstm params vs the host step (|grad| > 1e-3 max)", got_far,
                                   want_far, 1e-7, 1e-6));

    // A whole second step (train_step: host batch copied in, forward, loss, backward, update).
    const float second_h = host.train_step(xv, lengths, p.targets, p.target_lengths);
    const float second_d = dev.train_step(xv, lengths, p.targets, p.target_lengths);
    INFO("second loss cpu " << second_h << ", cuda " << second_d);
    CHECK(test::scalar_close("second step loss", second_d, second_h, 1e-6, 1e-4));
}

// The layer comparison's shapes. The layer-level options too: batch_first transposes and
// dropout masks run as device kernels, and a seed draws the same masks on both devices.
std::vector<std::pair<std::string, Shape>> layer_shapes() {
    Config options{5, 7, 3, true};
    options.batch_first = true;
    options.dropout = 0.3;
    options.bias = false;
    Config projected{5, 7, 2, true};
    projected.proj_size = 3;
    projected.dropout = 0.5;
    return {
        {"uni 1 layer", {Config{5, 7, 1, false}, 6, 4, {6, 3, 1, 5}}},
        {"bi 2 layers", {Config{5, 7, 2, true}, 6, 4, {6, 3, 1, 5}}},
        {"bi 3 layers batch_first dropout 0.3 no bias", {options, 6, 4, {6, 3, 1, 5}}},
        {"bi 2 layers proj 3 dropout 0.5", {projected, 6, 4, {6, 3, 1, 5}}},
    };
}

// A config a variant refuses in supports() gets no case.
const test::CaseGenerator generate_training_cases{[] {
    for (const bool adam : {true, false})
        for (const DType dt : {DType::f32, DType::f64}) {
            const std::string tags =
                adam && dt == DType::f32 ? "[gpu][optim][memcheck]" : "[gpu][optim]";
            test::add_case(CATCH_INTERNAL_LINEINFO,
                           std::string("gpu: optimizer ") + (adam ? "adam " : "sgd ") +
                               test::dtype_name(dt) + " kernel equals the host optimizer",
                           tags, [adam, dt] {
                               nn::SgdOptions sgd;
                               sgd.lr = 0.05;
                               sgd.momentum = 0.9;
                               sgd.nesterov = true;
                               sgd.weight_decay = 0.01;
                               if (dt == DType::f32)
                                   optimizer_kernels_match<float>(adam, sgd);
                               else
                                   optimizer_kernels_match<double>(adam, sgd);
                           });
        }
    for (const Variant* v : variants_on(Device::cuda)) {
        const std::string tags = std::string("[gpu][layer][") + v->name() + "]";
        for (const auto& [name, shape] : layer_shapes()) {
            if (v->supports(shape.config.core(), DType::f32)) continue;
            test::add_case(CATCH_INTERNAL_LINEINFO,
                           std::string("gpu: layer ") + v->name() +
                               " f32 on cuda equals the host layer: " + test::case_name_part(name),
                           tags, [v, s = shape] { layer_matches_cpu(*v, s); });
        }
        for (const ModelProblem& p : model_problems()) {
            if (v->supports(p.shape.config, DType::f32)) continue;
            test::add_case(CATCH_INTERNAL_LINEINFO,
                           std::string("gpu: model step ") + v->name() + " f32 head " +
                               test::case_name_part(nn::to_string(p.head)) +
                               " on cuda equals it on cpu",
                           std::string("[gpu][model][") + v->name() + "]",
                           [v, p] { model_step_matches_cpu(*v, p); });
        }
    }
}};

}  // namespace

TEST_CASE("gpu: DenseCuda equals nn::Dense forward and backward", "[gpu][memcheck]") {
    cuda::Context ctx;
    const int64_t rows = 37, in = 13, out = 7;
    nn::Dense<float> host(in, out, true);
    host.reset_parameters(3);
    nn::DenseCuda<float> dev(in, out, true, ctx);
    dev.load_parameters(std::as_const(host).parameters());
    const auto x = test::random_vector<float>(rows * in, 1),
               dy = test::random_vector<float>(rows * out, 2);
    const Buffer xd = Buffer::upload(Device::cuda, x, &ctx),
                 dyd = Buffer::upload(Device::cuda, dy, &ctx);
    Buffer yd(Device::cuda, rows * out * sizeof(float)),
        dxd(Device::cuda, rows * in * sizeof(float));
    std::vector<float> y(rows * out), dx(rows * in);
    host.forward(TensorView<const float>(x.data(), {rows, in}),
                 TensorView<float>(y.data(), {rows, out}));
    dev.forward(device_view<const float>(xd, {rows, in}), device_view<float>(yd, {rows, out}));
    // Two backwards: gradients accumulate on both.
    for (int k = 0; k < 2; ++k) {
        host.backward(TensorView<const float>(x.data(), {rows, in}),
                      TensorView<const float>(dy.data(), {rows, out}),
                      TensorView<float>(dx.data(), {rows, in}));
        dev.backward(device_view<const float>(xd, {rows, in}),
                     device_view<const float>(dyd, {rows, out}),
                     device_view<float>(dxd, {rows, in}));
    }
    const double rtol = 1e-5;
    check_close("y", yd.download<float>(y.size(), &ctx), y, rtol);
    check_close("dx", dxd.download<float>(dx.size(), &ctx), dx, rtol);
    std::vector<float> grads(host.parameter_count());
    dev.store_gradients(Span<float>(grads));
    check_close("dparams", grads,
                std::vector<float>(host.gradients().begin(), host.gradients().end()), rtol);
}

TEST_CASE("gpu: sequence head kernels equal the host gathers bit for bit", "[gpu][memcheck]") {
    cuda::Context ctx;
    const int64_t steps = 7, batch = 5, features = 11;
    const std::vector<int64_t> lengths = {7, 1, 4, 7, 2};
    const auto y = test::random_vector<float>(steps * batch * features, 3);
    const auto dout = test::random_vector<float>(batch * features, 4);
    const Buffer yd = Buffer::upload(Device::cuda, y, &ctx),
                 doutd = Buffer::upload(Device::cuda, dout, &ctx);
    const Buffer lend = Buffer::upload(Device::cuda, lengths, &ctx);
    Buffer outd(Device::cuda, y.size() * sizeof(float));
    const TensorView<const float> yv(y.data(), {steps, batch, features});
    const TensorView<const float> doutv(dout.data(), {batch, features});
    for (const int64_t* len :
         {static_cast<const int64_t*>(lend.as<int64_t>()), static_cast<const int64_t*>(nullptr)}) {
        const Span<const int64_t> host_len =
            len ? Span<const int64_t>(lengths) : Span<const int64_t>();
        INFO((len ? "with lengths" : "all full"));
        std::vector<float> want(batch * features), want_dy(y.size());
        nn::gather_last_step(yv, host_len, TensorView<float>(want.data(), {batch, features}));
        nn::detail::gather_last_step_cuda<float>(ctx, steps, batch, features, len, yd.as<float>(),
                                                 outd.as<float>());
        CHECK(outd.download<float>(want.size(), &ctx) == want);
        nn::mean_pool_steps(yv, host_len, TensorView<float>(want.data(), {batch, features}));
        nn::detail::mean_pool_steps_cuda<float>(ctx, steps, batch, features, len, yd.as<float>(),
                                                outd.as<float>());
        CHECK(outd.download<float>(want.size(), &ctx) == want);
        nn::scatter_last_step(doutv, host_len,
                              TensorView<float>(want_dy.data(), {steps, batch, features}));
        nn::detail::scatter_last_step_cuda<float>(ctx, steps, batch, features, len,
                                                  doutd.as<float>(), outd.as<float>());
        CHECK(outd.download<float>(want_dy.size(), &ctx) == want_dy);
        nn::scatter_mean_pool(doutv, host_len,
                              TensorView<float>(want_dy.data(), {steps, batch, features}));
        nn::detail::scatter_mean_pool_cuda<float>(ctx, steps, batch, features, len,
                                                  doutd.as<float>(), outd.as<float>());
        CHECK(outd.download<float>(want_dy.size(), &ctx) == want_dy);
    }
}

TEST_CASE("gpu: lstm::Lstm on cuda owns its context and zeroes gradients on the device", "[gpu]") {
    const Config cfg{3, 4, 1, false};
    Lstm layer(cfg, variants_on(Device::cuda).front()->name(), Device::cuda);
    REQUIRE(layer.context() != nullptr);
    std::vector<float> ones(static_cast<size_t>(param_count(cfg)), 1.0f), back(ones.size());
    layer.load_parameters(Span<const float>(ones));
    layer.store_parameters(Span<float>(back));
    CHECK(back == ones);
    layer.zero_grad();
    layer.store_gradients(Span<float>(back));
    CHECK(back == std::vector<float>(ones.size(), 0.0f));
}

TEST_CASE("gpu: a cuda model resumed from a checkpoint trains on bit for bit", "[gpu]") {
    // Dropout masks drawn on the device and the final-state head on the device, so the file must
    // carry the random state and every device buffer (LSTM, head, Adam's moments).
    nn::ModelConfig mc;
    mc.lstm = Config{5, 6, 2, true};
    mc.lstm.dropout = 0.3;
    mc.classes = 3;
    mc.dense_bias = true;
    mc.head = nn::Head::ce_final_state;
    const std::string variant = "basic";  // cuBLAS GEMMs: the same bits on every run
    const int64_t T = 6, N = 4, I = 5;
    auto train = [&](nn::SequenceModel<float>& m, int from, int to) {
        for (int b = from; b < to; ++b) {
            const auto x = test::random_vector<float>(T * N * I, 700 + b);
            const std::vector<int64_t> lengths = {6, 3, 5, 6};
            std::vector<int64_t> targets;
            for (int64_t n = 0; n < N; ++n) targets.push_back((n + b) % 3);
            m.train_step(TensorView<const float>(x.data(), {T, N, I}), Span<const int64_t>(lengths),
                         Span<const int64_t>(targets));
        }
    };
    auto params = [&](nn::SequenceModel<float>& m) {
        std::vector<float> lstm_p(static_cast<size_t>(param_count(mc.lstm)));
        m.lstm().store_parameters(Span<float>(lstm_p));
        std::vector<float> head(static_cast<size_t>(m.dense_cuda().parameter_count()));
        m.dense_cuda().store_parameters(Span<float>(head));
        lstm_p.insert(lstm_p.end(), head.begin(), head.end());
        return lstm_p;
    };
    nn::SequenceModel<float> straight(mc, variant, Device::cuda, 11);
    train(straight, 0, 5);
    nn::SequenceModel<float> first(mc, variant, Device::cuda, 11);
    train(first, 0, 2);
    io::TensorFile file;
    io::add_checkpoint(file, first);
    const io::TensorFile read = io::parse_safetensors(io::serialize_safetensors(file));
    nn::SequenceModel<float> resumed(mc, variant, Device::cuda, 99);
    io::load_checkpoint(read, resumed);
    CHECK(resumed.optimizer().steps(0) == 2);
    CHECK(resumed.lstm().dropout_count() == 2);
    train(resumed, 2, 5);
    const std::vector<float> want = params(straight), got = params(resumed);
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    INFO(differ << " of " << got.size() << " parameters differ");
    CHECK(differ == 0);

    // The streaming save (device buffers through the writer's staging chunk) writes the same
    // bytes, and the streaming load from the path restores the same model.
    const std::string path =
        (std::filesystem::temp_directory_path() / "lstm_gpu_checkpoint.safetensors").string();
    io::save_checkpoint(path, first);
    CHECK(io::serialize_safetensors(io::read_safetensors(path)) == io::serialize_safetensors(file));
    nn::SequenceModel<float> streamed(mc, variant, Device::cuda, 98);
    io::load_checkpoint(path, streamed);
    train(streamed, 2, 5);
    CHECK(params(streamed) == want);
    std::filesystem::remove(path);
}

TEST_CASE("gpu: a batch-first cuda model with bias groups trains as the time-major one", "[gpu]") {
    nn::ModelConfig mc;
    mc.lstm = Config{5, 6, 2, true};
    mc.classes = 3;
    mc.dense_bias = true;
    mc.head = nn::Head::ce_every_frame;
    mc.adam = nn::adamw_options(0.01, 0.1);
    mc.bias_weight_decay = 0.0;
    nn::ModelConfig bf = mc;
    bf.lstm.batch_first = true;
    const int64_t T = 6, N = 4, I = 5;
    nn::SequenceModel<float> time_major(mc, "basic", Device::cuda, 5);
    nn::SequenceModel<float> batch_major(bf, "basic", Device::cuda, 5);
    for (int b = 0; b < 3; ++b) {
        const auto x = test::random_vector<float>(T * N * I, 800 + b);
        std::vector<float> xt(x.size());
        std::vector<int64_t> targets(static_cast<size_t>(T * N)), targets_t(targets.size());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                std::copy_n(x.begin() + (t * N + n) * I, I, xt.begin() + (n * T + t) * I);
                targets[static_cast<size_t>(t * N + n)] = (t + n + b) % 3;
                targets_t[static_cast<size_t>(n * T + t)] = (t + n + b) % 3;
            }
        const std::vector<int64_t> lengths = {6, 3, 5, 6};
        const float want =
            time_major.train_step(TensorView<const float>(x.data(), {T, N, I}),
                                  Span<const int64_t>(lengths), Span<const int64_t>(targets));
        const float got =
            batch_major.train_step(TensorView<const float>(xt.data(), {N, T, I}),
                                   Span<const int64_t>(lengths), Span<const int64_t>(targets_t));
        CHECK(got == want);
    }
    std::vector<float> a(static_cast<size_t>(param_count(mc.lstm))), b(a.size());
    time_major.lstm().store_parameters(Span<float>(a));
    batch_major.lstm().store_parameters(Span<float>(b));
    CHECK(a == b);
    CHECK(time_major.optimizer().buffer_count() == 2 * 2 * 2 + 2);
}
