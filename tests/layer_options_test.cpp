// nn.LSTM's layer-level options as lstm::Lstm applies them around any variant: batch_first (checked
// against the time-major run it must equal, transposed, bit for bit) and inter-layer dropout
// (checked against the double reference run one layer at a time through the layer's own masks,
// and for the statistics and reproducibility of the masks). Every CPU variant in the registry
// runs them, with per-sequence lengths where it takes them.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "lstm/layer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "tolerance.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// A problem for a layer: inputs time-major, output gradients, lengths (empty: all T).
struct Problem {
    Config config;
    int64_t seq_len, batch;
    std::vector<int64_t> lengths;
    std::vector<float> x, h0, c0, params, dy, dhn, dcn;
};

Problem make_problem(const Config& config, int64_t seq_len, int64_t batch,
                     std::vector<int64_t> lengths, uint64_t seed) {
    Problem p{config, seq_len, batch, std::move(lengths), {}, {}, {}, {}, {}, {}, {}};
    const size_t h_state = config.num_cells() * batch * config.state_size();
    const size_t c_state = config.num_cells() * batch * config.hidden_size;
    p.x = random_vector<float>(seq_len * batch * config.input_size, seed);
    p.h0 = random_vector<float>(h_state, seed + 1);
    p.c0 = random_vector<float>(c_state, seed + 2);
    p.params = random_vector<float>(param_count(config), seed + 3, -0.6, 0.6);
    p.dy = random_vector<float>(seq_len * batch * config.output_size(), seed + 4);
    p.dhn = random_vector<float>(h_state, seed + 5);
    p.dcn = random_vector<float>(c_state, seed + 6);
    return p;
}

// (a, b, c) -> (b, a, c).
std::vector<float> swap_leading(const std::vector<float>& v, int64_t a, int64_t b, int64_t c) {
    std::vector<float> out(v.size());
    for (int64_t i = 0; i < a; ++i)
        for (int64_t j = 0; j < b; ++j)
            std::copy_n(v.begin() + (i * b + j) * c, c, out.begin() + (j * a + i) * c);
    return out;
}

template <typename T>
std::vector<double> to_double(TensorView<const T> v) {
    return std::vector<double>(v.data(), v.data() + v.numel());
}

TensorView<const float> view(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return TensorView<const float>(v.data(), shape);
}

// Everything a training step of a layer produces, in double.
struct StepResult {
    std::vector<double> y, hn, cn, dx, dh0, dc0, grads;
};

// Forward (time-major or batch-first x, as the layer's config says) and backward with the
// problem's output gradients; y and dx come back in the layer's layout.
StepResult train_step(Lstm& layer, const Problem& p) {
    const bool bf = layer.config().batch_first;
    const int64_t T = p.seq_len, N = p.batch, I = p.config.input_size;
    const int64_t O = p.config.output_size(), cells = p.config.num_cells();
    const int64_t S = p.config.state_size(), H = p.config.hidden_size;
    const std::vector<float> x = bf ? swap_leading(p.x, T, N, I) : p.x;
    const std::vector<float> dy = bf ? swap_leading(p.dy, T, N, O) : p.dy;
    layer.load_parameters(Span<const float>(p.params));
    layer.zero_grad();
    StepResult r;
    r.y = to_double(layer.forward(bf ? view(x, {N, T, I}) : view(x, {T, N, I}),
                                  Span<const int64_t>(p.lengths), view(p.h0, {cells, N, S}),
                                  view(p.c0, {cells, N, H})));
    r.hn = to_double(layer.hn());
    r.cn = to_double(layer.cn());
    r.dx = to_double(layer.backward(bf ? view(dy, {N, T, O}) : view(dy, {T, N, O}),
                                    view(p.dhn, {cells, N, S}), view(p.dcn, {cells, N, H})));
    r.dh0 = to_double(layer.dh0());
    r.dc0 = to_double(layer.dc0());
    const auto g = layer.gradients();
    r.grads.assign(g.begin(), g.end());
    return r;
}

// The problem's lengths, or none for a variant that cannot take them.
Problem for_variant(Problem p, const Variant& v) {
    if (v.supports_variable_lengths()) p.lengths.clear();
    return p;
}

std::vector<double> as_double(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// Elements [layer * D * N * width, (layer + 1) * D * N * width) of an (L*D, N, width) state.
std::vector<double> layer_state(const std::vector<double>& v, const Config& c, int64_t batch,
                                int64_t layer, int64_t width) {
    const int64_t n = c.num_directions() * batch * width;
    return std::vector<double>(v.begin() + layer * n, v.begin() + (layer + 1) * n);
}

void put_layer_state(std::vector<double>& dst, const std::vector<double>& src, int64_t layer) {
    std::copy(src.begin(), src.end(), dst.begin() + layer * static_cast<int64_t>(src.size()));
}

}  // namespace

TEST_CASE("batch_first gives the time-major results transposed, on every CPU variant",
          "[layer_options]") {
    for (const Config& base : {Config{3, 5, 2, true}, Config{4, 6, 1, false}}) {
        for (const Variant* v : variants_on(Device::cpu)) {
            if (v->supports(base, DType::f32)) continue;
            INFO("variant " << v->name() << ", layers " << base.num_layers);
            const Problem p = for_variant(make_problem(base, 5, 3, {5, 2, 4}, 40), *v);
            Config bf_config = base;
            bf_config.batch_first = true;
            Lstm time_major(base, v->name()), batch_first(bf_config, v->name());
            const StepResult tm = train_step(time_major, p);
            const StepResult bf = train_step(batch_first, p);
            const int64_t T = p.seq_len, N = p.batch;
            // The same variant calls on the same time-major data: equal to the last bit.
            const std::vector<float> y_tm(tm.y.begin(), tm.y.end());
            const std::vector<float> dx_tm(tm.dx.begin(), tm.dx.end());
            CHECK(as_double(swap_leading(y_tm, T, N, base.output_size())) == bf.y);
            CHECK(as_double(swap_leading(dx_tm, T, N, base.input_size)) == bf.dx);
            CHECK(tm.hn == bf.hn);
            CHECK(tm.cn == bf.cn);
            CHECK(tm.dh0 == bf.dh0);
            CHECK(tm.dc0 == bf.dc0);
            CHECK(tm.grads == bf.grads);
        }
    }
}

// One sequence given unbatched, as nn.LSTM takes it: x (T, I), h0 (L*D, S), c0 (L*D, H), dy
// (T, D*S), dhn, dcn like h0, c0; everything it returns drops the batch dimension too.
StepResult train_step_unbatched(Lstm& layer, const Problem& p) {
    const int64_t T = p.seq_len, I = p.config.input_size, O = p.config.output_size();
    const int64_t cells = p.config.num_cells(), S = p.config.state_size(), H = p.config.hidden_size;
    layer.load_parameters(Span<const float>(p.params));
    layer.zero_grad();
    StepResult r;
    const TensorView<const float> y =
        layer.forward(view(p.x, {T, I}), Span<const int64_t>(p.lengths), view(p.h0, {cells, S}),
                      view(p.c0, {cells, H}));
    CHECK(y.has_shape({T, O}));
    CHECK(layer.hn().has_shape({cells, S}));
    CHECK(layer.cn().has_shape({cells, H}));
    r.y = to_double(y);
    r.hn = to_double(layer.hn());
    r.cn = to_double(layer.cn());
    const TensorView<const float> dx =
        layer.backward(view(p.dy, {T, O}), view(p.dhn, {cells, S}), view(p.dcn, {cells, H}));
    CHECK(dx.has_shape({T, I}));
    CHECK(layer.dh0().has_shape({cells, S}));
    CHECK(layer.dc0().has_shape({cells, H}));
    r.dx = to_double(dx);
    r.dh0 = to_double(layer.dh0());
    r.dc0 = to_double(layer.dc0());
    const auto g = layer.gradients();
    r.grads.assign(g.begin(), g.end());
    return r;
}

TEST_CASE("unbatched (T, I) input gives the N = 1 results without N, on every CPU variant",
          "[layer_options]") {
    // PyTorch 1.13's nn.LSTM takes one sequence as (T, I) with (L*D, S) states and returns y
    // (T, D*S), hn (L*D, S); batch_first does not apply to it. Here it is the batched run at
    // N = 1 (itself checked against the reference), so every number must be equal to the bit.
    Config lstmp{4, 6, 2, true};
    lstmp.proj_size = 3;
    for (const Config& base : {Config{3, 5, 2, true}, Config{4, 6, 1, false}, lstmp}) {
        for (const bool batch_first : {false, true}) {
            Config config = base;
            config.batch_first = batch_first;
            for (const Variant* v : variants_on(Device::cpu)) {
                if (v->supports(base, DType::f32)) continue;
                INFO("variant " << v->name() << ", layers " << base.num_layers << ", proj_size "
                                << base.proj_size << (batch_first ? ", batch_first" : ""));
                const Problem p = for_variant(make_problem(base, 5, 1, {4}, 60), *v);
                Lstm batched(base, v->name()), unbatched(config, v->name());
                const StepResult want = train_step(batched, p);
                const StepResult got = train_step_unbatched(unbatched, p);
                CHECK(got.y == want.y);
                CHECK(got.hn == want.hn);
                CHECK(got.cn == want.cn);
                CHECK(got.dx == want.dx);
                CHECK(got.dh0 == want.dh0);
                CHECK(got.dc0 == want.dc0);
                CHECK(got.grads == want.grads);
                // infer() takes it too, and the next batched forward has N again.
                CHECK(unbatched.infer(view(p.x, {5, base.input_size}))
                          .has_shape({5, base.output_size()}));
                if (!batch_first) {
                    unbatched.infer(view(p.x, {5, 1, base.input_size}));
                    CHECK(unbatched.hn().has_shape({base.num_cells(), 1, base.state_size()}));
                }
            }
        }
    }
}

TEST_CASE("unbatched and batched tensors in one call are refused, naming the form",
          "[layer_options]") {
    const Config config{3, 4, 1, false};
    const std::vector<float> x(15, 0.25f), h(4, 0.5f), dy(20, 0.1f);
    Lstm layer(config, "basic");
    // PyTorch refuses the mix too ("For unbatched 2-D input, hx and cx should also be 2-D").
    CHECK_THROWS_WITH(layer.forward(view(x, {5, 3}), {}, view(h, {1, 1, 4})),
                      "h0: for one unbatched sequence (x of shape (T, I)) h0 must have shape (1, "
                      "4), got (1, 1, 4)");
    CHECK_THROWS_WITH(layer.forward(view(x, {5, 1, 3}), {}, view(h, {1, 4})),
                      "h0 must have shape (1, 1, 4), got (1, 4)");
    CHECK_THROWS_WITH(layer.forward(view(x, {5, 4})),
                      "x: for one unbatched sequence (x of shape (T, I)) x must have shape (5, 3), "
                      "got (5, 4)");
    CHECK_THROWS_WITH(layer.forward(view(x, {15})),
                      "x must have rank 3 (T, N, I) or 2 (T, I: one unbatched sequence), got "
                      "shape (15)");
    const std::vector<int64_t> two = {5, 5};
    CHECK_THROWS_AS(layer.forward(view(x, {5, 3}), Span<const int64_t>(two)), InvalidArgument);
    layer.forward(view(x, {5, 3}));
    CHECK_THROWS_WITH(layer.backward(view(dy, {5, 1, 4})),
                      "dy: for one unbatched sequence (x of shape (T, I)) dy must have shape (5, "
                      "4), got (5, 1, 4)");
    CHECK_THROWS_WITH(layer.backward(view(dy, {5, 4}), view(h, {1, 1, 4})),
                      "dhn: for one unbatched sequence (x of shape (T, I)) dhn must have shape "
                      "(1, 4), got (1, 1, 4)");
    CHECK(layer.backward(view(dy, {5, 4})).has_shape({5, 3}));
}

TEST_CASE("dropout between layers is the reference run layer by layer through the layer's masks",
          "[layer_options]") {
    Config plain{3, 5, 3, true};
    plain.dropout = 0.4;
    Config lstmp{4, 6, 2, true};  // projections without biases, for the variants that have them
    lstmp.proj_size = 3;
    lstmp.bias = false;
    lstmp.dropout = 0.25;
    for (const Config& config : {plain, lstmp}) {
        for (const Variant* v : variants_on(Device::cpu)) {
            if (v->supports(config.core(), DType::f32)) continue;
            INFO("variant " << v->name() << ", proj_size " << config.proj_size);
            const Problem p = for_variant(make_problem(config, 6, 3, {6, 3, 5}, 50), *v);
            Lstm layer(config, v->name());
            layer.set_dropout_state(7);
            const StepResult got = train_step(layer, p);
            REQUIRE(layer.dropout_count() == 1);

            // The reference, one layer at a time: layer l reads x or the masked output of l - 1.
            const int64_t L = config.num_layers, N = p.batch, T = p.seq_len;
            const int64_t S = config.state_size(), H = config.hidden_size;
            std::vector<reference::LstmInputs> inputs;
            std::vector<std::vector<double>> masks;
            StepResult want;
            want.hn.assign(got.hn.size(), 0.0);
            want.cn.assign(got.cn.size(), 0.0);
            std::vector<double> input = as_double(p.x);
            const std::vector<double> params = as_double(p.params);
            for (int64_t l = 0; l < L; ++l) {
                reference::LstmInputs in;
                in.config = config.single_layer(l);
                in.seq_len = T;
                in.batch = N;
                in.x = input;
                in.lengths = p.lengths;
                in.h0 = layer_state(as_double(p.h0), config, N, l, S);
                in.c0 = layer_state(as_double(p.c0), config, N, l, H);
                const int64_t begin = layer_param_offset(config, l);
                in.params.assign(params.begin() + begin,
                                 params.begin() + begin + param_count(in.config));
                const reference::LstmOutputs out = reference::lstm_forward(in);
                put_layer_state(want.hn, out.hn, l);
                put_layer_state(want.cn, out.cn, l);
                inputs.push_back(in);
                if (l + 1 == L) {
                    want.y = out.y;
                    break;
                }
                masks.push_back(to_double(layer.dropout_mask(l)));
                input = out.y;
                for (size_t k = 0; k < input.size(); ++k) input[k] *= masks.back()[k];
            }
            want.dh0.assign(got.dh0.size(), 0.0);
            want.dc0.assign(got.dc0.size(), 0.0);
            want.grads.assign(params.size(), 0.0);
            std::vector<double> d_out = as_double(p.dy);
            for (int64_t l = L - 1; l >= 0; --l) {
                const reference::LstmInputGrads g = reference::lstm_backward(
                    inputs[l], {d_out, layer_state(as_double(p.dhn), config, N, l, S),
                                layer_state(as_double(p.dcn), config, N, l, H)});
                put_layer_state(want.dh0, g.dh0, l);
                put_layer_state(want.dc0, g.dc0, l);
                std::copy(g.dparams.begin(), g.dparams.end(),
                          want.grads.begin() + layer_param_offset(config, l));
                d_out = g.dx;
                if (l > 0)
                    for (size_t k = 0; k < d_out.size(); ++k) d_out[k] *= masks[l - 1][k];
            }
            want.dx = d_out;

            const double fwd = lstm_rtol(DType::f32, config, T, Pass::forward);
            const double bwd = lstm_rtol(DType::f32, config, T, Pass::backward);
            LSTM_CHECK_CLOSE(compare_scaled("y", got.y, want.y, fwd));
            LSTM_CHECK_CLOSE(compare_scaled("hn", got.hn, want.hn, fwd));
            LSTM_CHECK_CLOSE(compare_scaled("cn", got.cn, want.cn, fwd));
            LSTM_CHECK_CLOSE(compare_scaled("dx", got.dx, want.dx, bwd));
            LSTM_CHECK_CLOSE(compare_scaled("dh0", got.dh0, want.dh0, bwd));
            LSTM_CHECK_CLOSE(compare_scaled("dc0", got.dc0, want.dc0, bwd));
            LSTM_CHECK_CLOSE(compare_scaled("gradients", got.grads, want.grads, bwd));
            // A vacuous pass (every mask zero, or none) would make the masks irrelevant.
            for (const auto& m : masks) {
                const auto zeros = std::count(m.begin(), m.end(), 0.0);
                CHECK(zeros > 0);
                CHECK(zeros < static_cast<long>(m.size()));
            }
        }
    }
}

TEST_CASE("dropout masks: PyTorch's scaling, the asked rate, reproducible from seed and count",
          "[layer_options]") {
    Config config{4, 64, 3, false};
    config.dropout = 0.3;
    const Problem p = make_problem(config, 50, 8, {}, 60);
    Lstm layer(config, "basic");
    layer.load_parameters(Span<const float>(p.params));
    const int64_t T = p.seq_len, N = p.batch;
    const auto x = view(p.x, {T, N, config.input_size});
    layer.forward(x);
    const std::vector<double> first = to_double(layer.dropout_mask(0));
    const std::vector<double> second_layer = to_double(layer.dropout_mask(1));
    // Kept elements are scaled by 1 / (1 - p) rounded to float once; the rest are zero.
    const double scale = static_cast<float>(1.0 / 0.7);
    const auto zeros = std::count(first.begin(), first.end(), 0.0);
    const auto kept = std::count(first.begin(), first.end(), scale);
    CHECK(zeros + kept == static_cast<long>(first.size()));
    // 25600 Bernoulli(0.3) draws: the standard deviation of the rate is 0.0029; 0.02 is ~7 of it.
    CHECK(std::abs(double(zeros) / double(first.size()) - 0.3) < 0.02);
    CHECK(first != second_layer);  // each layer draws its own mask
    const std::vector<double> y_first = to_double(layer.y());

    layer.forward(x);  // the next forward draws new masks
    CHECK(layer.dropout_count() == 2);
    CHECK(to_double(layer.dropout_mask(0)) != first);
    layer.set_dropout_state(0, 0);  // back to the first forward's state: the same masks and y
    layer.forward(x);
    CHECK(to_double(layer.dropout_mask(0)) == first);
    CHECK(to_double(layer.y()) == y_first);
    layer.set_dropout_state(1, 0);  // another seed, other masks
    layer.forward(x);
    CHECK(to_double(layer.dropout_mask(0)) != first);

    // Inference has no dropout: infer() equals a dropout-free layer's, and so does a forward with
    // dropout = 0, which runs the stack as one call.
    Config off = config;
    off.dropout = 0.0;
    Lstm plain(off, "basic");
    plain.load_parameters(Span<const float>(p.params));
    const std::vector<double> clean = to_double(plain.forward(x));
    CHECK(plain.dropout_mask(0).empty());
    CHECK(to_double(layer.infer(x)) == clean);
    CHECK(to_double(plain.infer(x)) == clean);
    CHECK(clean != y_first);

    // dropout = 1 zeroes every element (PyTorch gives zeros, not 0 * inf).
    Config all = config;
    all.dropout = 1.0;
    Lstm dropped(all, "basic");
    dropped.forward(x);
    const std::vector<double> mask = to_double(dropped.dropout_mask(1));
    CHECK(std::count(mask.begin(), mask.end(), 0.0) == static_cast<long>(mask.size()));
}
