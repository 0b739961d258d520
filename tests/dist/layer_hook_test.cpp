// Lstm::set_layer_gradients_ready, the hook DataParallel's per-layer overlap rides on: with it set,
// backward runs the stack one layer at a time from the top and reports each layer as its gradient
// slice becomes final. Checked against the whole-stack run of the same layer (the oracle: every
// output and gradient within the tolerance rule, on every CPU variant), for the order of the
// calls, for each slice being final (and the slices below untouched) when its call comes, and for
// dropout's masks being unaffected. No collectives: every rank runs these on its own.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/layer.hpp"
#include "lstm/registry.hpp"
#include "tolerance.hpp"

using namespace lstm;

namespace {

// Inputs of one training step of a layer, time-major, host.
struct Problem {
    int64_t seq_len = 0, batch = 0;
    std::vector<int64_t> lengths;
    std::vector<float> x, params, dy, dhn, dcn;
};

Problem make_problem(const Config& c, int64_t seq_len, int64_t batch, uint64_t seed) {
    Problem p;
    p.seq_len = seq_len;
    p.batch = batch;
    p.lengths = {seq_len, seq_len - 2, seq_len - 1};
    p.lengths.resize(static_cast<size_t>(batch), seq_len);
    const size_t h = static_cast<size_t>(c.num_cells() * batch * c.state_size());
    const size_t cc = static_cast<size_t>(c.num_cells() * batch * c.hidden_size);
    p.x = test::random_vector<float>(static_cast<size_t>(seq_len * batch * c.input_size), seed);
    p.params = test::random_vector<float>(static_cast<size_t>(param_count(c)), seed + 1, -0.6, 0.6);
    p.dy = test::random_vector<float>(static_cast<size_t>(seq_len * batch * c.output_size()),
                                      seed + 2);
    p.dhn = test::random_vector<float>(h, seed + 3);
    p.dcn = test::random_vector<float>(cc, seed + 4);
    return p;
}

std::vector<double> to_double(TensorView<const float> v) {
    return std::vector<double>(v.data(), v.data() + v.numel());
}

struct StepResult {
    std::vector<double> y, hn, cn, dx, dh0, dc0, grads;
};

// Forward and backward of `layer` on the problem (h0, c0 zero; dhn, dcn given); everything in
// double. x: (T, N, I) host.
StepResult run_step(Lstm& layer, const Problem& p) {
    const Config& c = layer.config();
    const int64_t N = p.batch, cells = c.num_cells();
    layer.load_parameters(Span<const float>(p.params));
    layer.zero_grad();
    StepResult r;
    r.y = to_double(layer.forward(TensorView<const float>(p.x.data(), {p.seq_len, N, c.input_size}),
                                  Span<const int64_t>(p.lengths)));
    r.hn = to_double(layer.hn());
    r.cn = to_double(layer.cn());
    r.dx = to_double(
        layer.backward(TensorView<const float>(p.dy.data(), {p.seq_len, N, c.output_size()}),
                       TensorView<const float>(p.dhn.data(), {cells, N, c.state_size()}),
                       TensorView<const float>(p.dcn.data(), {cells, N, c.hidden_size})));
    r.dh0 = to_double(layer.dh0());
    r.dc0 = to_double(layer.dc0());
    const auto g = layer.gradients();
    r.grads.assign(g.begin(), g.end());
    return r;
}

// Layer l's elements of the flat buffer: [begin, end).
std::pair<int64_t, int64_t> layer_range(const Config& c, int64_t l) {
    return {layer_param_offset(c, l),
            l + 1 < c.num_layers ? layer_param_offset(c, l + 1) : param_count(c)};
}

// What the hook saw: the layers in call order, a copy of the layer's slice at that moment, and
// whether every element of the layers below was still zero (their backward had not run).
struct HookLog {
    std::vector<int64_t> layers;
    std::vector<std::vector<float>> slices;
    std::vector<bool> below_untouched;
};

void record(Lstm& layer, HookLog& log) {
    layer.set_layer_gradients_ready([&layer, &log](int64_t l) {
        const auto g = layer.gradients();
        const auto [begin, end] = layer_range(layer.config(), l);
        log.layers.push_back(l);
        log.slices.emplace_back(g.begin() + begin, g.begin() + end);
        log.below_untouched.push_back(
            std::all_of(g.begin(), g.begin() + begin, [](float v) { return v == 0.0f; }));
    });
}

}  // namespace

TEST_CASE("with the layer hook, backward runs layer by layer and matches the whole-stack run",
          "[layer_hook]") {
    Config plain{3, 5, 3, true};
    Config lstmp{4, 6, 2, true};  // projections without biases, for the variants that have them
    lstmp.proj_size = 3;
    lstmp.bias = false;
    for (const Config& config : {plain, lstmp}) {
        for (const Variant* v : variants_on(Device::cpu)) {
            if (v->supports(config, DType::f32)) continue;
            INFO("variant " << v->name() << ", layers " << config.num_layers << ", proj_size "
                            << config.proj_size);
            Problem p = make_problem(config, 6, 3, 70);
            if (v->supports_variable_lengths()) p.lengths.clear();
            Lstm whole(config, v->name()), hooked(config, v->name());
            HookLog log;
            record(hooked, log);
            const StepResult want = run_step(whole, p);
            const StepResult got = run_step(hooked, p);

            const double fwd = test::lstm_rtol(DType::f32, config, p.seq_len, test::Pass::forward);
            const double bwd = test::lstm_rtol(DType::f32, config, p.seq_len, test::Pass::backward);
            LSTM_CHECK_CLOSE(test::compare_scaled("y", got.y, want.y, fwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("hn", got.hn, want.hn, fwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("cn", got.cn, want.cn, fwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("dx", got.dx, want.dx, bwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("dh0", got.dh0, want.dh0, bwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("dc0", got.dc0, want.dc0, bwd));
            LSTM_CHECK_CLOSE(test::compare_scaled("gradients", got.grads, want.grads, bwd));

            // Top first, once per layer; each slice final when reported (nothing later writes
            // it) while the layers below were untouched: the stack ran one call per layer.
            std::vector<int64_t> order(static_cast<size_t>(config.num_layers));
            for (size_t k = 0; k < order.size(); ++k)
                order[k] = config.num_layers - 1 - static_cast<int64_t>(k);
            REQUIRE(log.layers == order);
            for (size_t k = 0; k < order.size(); ++k) {
                const auto [begin, end] = layer_range(config, order[k]);
                const std::vector<double> final_slice(got.grads.begin() + begin,
                                                      got.grads.begin() + end);
                CHECK(std::vector<double>(log.slices[k].begin(), log.slices[k].end()) ==
                      final_slice);
                CHECK(log.below_untouched[k]);
                // A slice of zeros would make both checks vacuous.
                CHECK(std::any_of(final_slice.begin(), final_slice.end(),
                                  [](double g) { return g != 0.0; }));
            }
            // Inference never calls it; unset, the layer is back to the whole-stack call
            // (bit-identical to `whole`).
            log = HookLog{};
            hooked.infer(
                TensorView<const float>(p.x.data(), {p.seq_len, p.batch, config.input_size}),
                Span<const int64_t>(p.lengths));
            CHECK(log.layers.empty());
            hooked.set_layer_gradients_ready({});
            const StepResult unhooked = run_step(hooked, p);
            CHECK(unhooked.grads == want.grads);
            CHECK(unhooked.dx == want.dx);
        }
    }
}

TEST_CASE("the layer hook leaves dropout's masks and results bit-identical", "[layer_hook]") {
    Config config{3, 5, 3, false};
    config.dropout = 0.3;
    const Variant& v = find_variant("basic", Device::cpu);
    const Problem p = make_problem(config, 5, 3, 90);
    Lstm plain(config, v.name()), hooked(config, v.name());
    plain.set_dropout_state(11);
    hooked.set_dropout_state(11);
    HookLog log;
    record(hooked, log);
    const StepResult want = run_step(plain, p);
    const StepResult got = run_step(hooked, p);
    CHECK(hooked.dropout_count() == plain.dropout_count());
    CHECK(to_double(hooked.dropout_mask(0)) == to_double(plain.dropout_mask(0)));
    CHECK(got.y == want.y);
    CHECK(got.dx == want.dx);
    CHECK(got.grads == want.grads);
    CHECK(log.layers == std::vector<int64_t>{2, 1, 0});
}

TEST_CASE("a one-layer stack stays one call and reports its layer after it", "[layer_hook]") {
    const Config config{3, 4, 1, false};
    for (const Variant* v : variants_on(Device::cpu)) {
        if (v->supports(config, DType::f32)) continue;
        INFO("variant " << v->name());
        Problem p = make_problem(config, 4, 3, 30);
        if (v->supports_variable_lengths()) p.lengths.clear();
        Lstm whole(config, v->name()), hooked(config, v->name());
        HookLog log;
        record(hooked, log);
        const StepResult want = run_step(whole, p);
        const StepResult got = run_step(hooked, p);
        CHECK(got.grads == want.grads);  // the same single call: bit-identical
        CHECK(got.dx == want.dx);
        CHECK(log.layers == std::vector<int64_t>{0});
    }
}
