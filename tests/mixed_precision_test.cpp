// Precision::bf16 (lstm/tensor.hpp, docs/precision.md): every CPU variant with a bf16 path, on
// every path it takes here, against the oracle that models its rounding points
// (lstm/reference/lstm_reference.hpp) and against the unrounded problem under the bf16 bound
// (lstm/reference/tolerance.hpp's bf16_rtol). These tests iterate the registry: a variant that
// gains a bf16 path is checked by them.

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "lstm/lstm.hpp"
#include "lstm/registry.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// A case as a model is trained in bf16: parameters of PyTorch's initial scale, U(-1/sqrt(H),
// 1/sqrt(H)), so a long sequence neither saturates nor explodes, and every value exactly a float,
// so the oracle rounds the inputs the library sees (not their double originals) to bf16.
LstmCase bf16_case(const Shape& s, uint64_t seed) {
    LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
    for (double& w : c.in.params) w /= std::sqrt(static_cast<double>(s.config.hidden_size));
    for (std::vector<double>* v : {&c.in.x, &c.in.params, &c.in.h0, &c.in.c0, &c.out_grads.dy,
                                   &c.out_grads.dhn, &c.out_grads.dcn})
        for (double& e : *v) e = static_cast<double>(static_cast<float>(e));
    return c;
}

// Calls fn(variant, path) for every CPU variant with a bf16 path for `config` (and per-sequence
// lengths, where the case has them: `variable`) and every path it takes on this host.
template <typename Fn>
void for_each_bf16_variant(const Config& config, bool variable, Fn&& fn) {
    for (const Variant* v : variants_on(Device::cpu)) {
        if (v->supports(config, DType::f32) ||
            v->supports_precision(config, DType::f32, Precision::bf16))
            continue;
        // Mixed lengths are the point of several cases; a variant without them runs the rest.
        if (variable && v->supports_variable_lengths()) continue;
        for (const std::string& path : v->paths(DType::f32)) fn(*v, path);
    }
}

bool has_lengths(const LstmCase& c) {
    return detail::has_variable_lengths(Span<const int64_t>(c.in.lengths), c.in.seq_len);
}

// The share of the rounding's effect a result may lie off the model where the model met near ties
// (reference::check_bf16_result): these cases are small enough for it to tell a skipped rounding
// point (about half or more) from rounding decisions that went the other way.
constexpr double kModelShare = 0.3;

// The cases of the model test: the small shapes, one step, odd sizes, and subnormal inputs.
std::vector<Shape> model_shapes() {
    std::vector<Shape> shapes = small_shapes();
    shapes.push_back({"T 1, H 3", {4, 3, 1, false}, 1, 2, {}, true});
    shapes.push_back({"T 1, H 33, bi 2 layers", {6, 33, 2, true}, 1, 4, {}, true});
    shapes.push_back({"T 1, proj 5, bi", {7, 9, 1, true, 5}, 1, 3, {}, true});
    return shapes;
}

}  // namespace

TEST_CASE("every bf16 path follows the rounding model", "[bf16_lstm]") {
    uint64_t seed = 5000;
    int64_t strict = 0, runs = 0;
    for (const Shape& s : model_shapes()) {
        LstmCase c = bf16_case(s, seed);
        if (std::string(s.name) == "uni 1 layer, no h0/c0") {
            // Subnormal floats among the inputs and the weights: the native bf16 instructions
            // read them as zero, the widening paths round them; either lies within the bounds.
            for (size_t k = 0; k < c.in.x.size(); k += 3) c.in.x[k] = 1e-40 * (k % 2 ? 1 : -1);
            for (size_t k = 0; k < c.in.params.size(); k += 5) c.in.params[k] = 3e-39;
        }
        reference::Bf16Oracles o = reference::bf16_oracles(c, pytorch_cell());
        // Backward adds into dparams: it starts from `before`.
        const std::vector<double> before = random_vector(o.model_grads.dparams.size(), seed + 99);
        o.model_grads.dparams = accumulated<float>(o.model_grads.dparams, before);
        o.unrounded_grads.dparams = accumulated<float>(o.unrounded_grads.dparams, before);
        for_each_bf16_variant(
            c.in.config, has_lengths(c), [&](const Variant& v, const std::string& path) {
                INFO("variant " << v.name() << ", path " << path << ", case: " << s.name << ", "
                                << o.near_ties << " near ties");
                const VariantResult got = reference::run_variant_parts<float>(
                    v, c, {BackwardPart::all}, before, false, path, Precision::bf16);
                ++runs;
                // Without near ties every rounding decision is the oracle's: fp32 agreement.
                if (o.near_ties == 0 && v.rounds_at_library_points(Precision::bf16)) ++strict;
                const auto why = reference::check_bf16_result(
                    got, c, o, "", kModelShare, v.rounds_at_library_points(Precision::bf16));
                INFO(why.value_or(""));
                CHECK_FALSE(why.has_value());
            });
        seed += 10;
    }
    REQUIRE(runs > 0);
    // Most cases must be judged at fp32 tolerance, or the test would have lost its edge.
    CHECK(strict * 4 >= runs * 3);
}

TEST_CASE("long sequences in bf16 stay within the bf16 bound", "[bf16_lstm]") {
    const std::vector<Shape> shapes = {
        {"T 300, N 4, H 32", {16, 32, 1, false}, 300, 4, {}, true},
        {"T 300, bi, mixed lengths", {40, 64, 1, true}, 300, 6, {300, 17, 250, 1, 299, 120}, true},
        {"T 300, 3 layers, proj 16", {20, 48, 3, false, 16}, 300, 3, {300, 200, 1}, true},
    };
    uint64_t seed = 7000;
    for (const Shape& s : shapes) {
        const LstmCase c = bf16_case(s, seed);
        const reference::Bf16Oracles o = reference::bf16_oracles(c, pytorch_cell());
        // Long sequences meet near ties: the model share is what tells the rounding points here.
        CHECK(o.near_ties > 0);
        for_each_bf16_variant(
            c.in.config, has_lengths(c), [&](const Variant& v, const std::string& path) {
                INFO("variant " << v.name() << ", path " << path << ", case: " << s.name);
                const VariantResult got = reference::run_variant_parts<float>(
                    v, c, {BackwardPart::all}, {}, false, path, Precision::bf16);
                const auto why = reference::check_bf16_result(
                    got, c, o, "", kModelShare, v.rounds_at_library_points(Precision::bf16));
                INFO(why.value_or(""));
                CHECK_FALSE(why.has_value());
            });
        seed += 10;
    }
}

TEST_CASE("bf16 backward split into data and weights gives the bits of one call", "[bf16_lstm]") {
    const Shape s{"bi 2 layers, proj 3, mixed lengths", {4, 6, 2, true, 3}, 5, 3, {5, 1, 3}, true};
    const LstmCase c = bf16_case(s, 8000);
    for_each_bf16_variant(c.in.config, has_lengths(c),
                          [&](const Variant& v, const std::string& path) {
                              if (v.supports_split_backward()) return;
                              INFO("variant " << v.name() << ", path " << path);
                              const VariantResult all = reference::run_variant_parts<float>(
                                  v, c, {BackwardPart::all}, {}, false, path, Precision::bf16);
                              const VariantResult split = reference::run_variant_parts<float>(
                                  v, c, {BackwardPart::data, BackwardPart::weights}, {}, false,
                                  path, Precision::bf16);
                              check_same_bits(split, all, true);
                          });
}

TEST_CASE("which variants compute in bf16, and what the others say", "[bf16_lstm]") {
    // Pinned, so that a variant gaining or losing its bf16 path shows here rather than only as
    // cases the tests above start or stop running.
    const std::set<std::string> with_bf16 = {"basic on cpu", "fused on cpu"};
    // oneDNN's bf16 LSTM exists where its build and this CPU (under DNNL_MAX_CPU_ISA) have it:
    // either answer, but a refusal says so by oneDNN's name, and an acceptance is run by the
    // cases above.
    const std::set<std::string> either = {"onednn on cpu"};
    const Config config{3, 5, 2, true};
    for (const Variant* v : variants()) {
        INFO("variant " << v->name() << " on " << to_string(v->device()));
        const auto why = v->supports_precision(config, DType::f32, Precision::bf16);
        const std::string who = std::string(v->name()) + " on " + to_string(v->device());
        if (either.count(who) == 0) CHECK(why.has_value() == (with_bf16.count(who) == 0));
        if (!why) continue;
        // A request it cannot take is refused by name, before anything runs.
        try {
            v->make_plan(PlanRequest{config, DType::f32, 3, 2, {}, nullptr, Precision::bf16});
            FAIL("make_plan accepted bf16");
        } catch (const Unsupported& e) {
            const std::string msg = e.what();
            CHECK(msg.find(v->name()) != std::string::npos);
            CHECK(msg.find("bf16") != std::string::npos);
        }
    }
    // oneDNN 2.6 has no bf16 LSTM with projection.
    for (const Variant* v : variants_on(Device::cpu))
        if (std::string(v->name()) == "onednn")
            CHECK_THAT(v->supports_precision(Config{3, 5, 1, false, 2}, DType::f32, Precision::bf16)
                           .value_or(""),
                       Catch::Contains("no bf16 LSTM with projection"));
}

TEST_CASE("bf16 requests: float64 data is refused, plans are kept per precision", "[bf16_lstm]") {
    const Variant& basic = find_variant("basic", Device::cpu);
    const Config config{3, 5, 1, false};
    try {
        basic.make_plan(PlanRequest{config, DType::f64, 4, 2, {}, nullptr, Precision::bf16});
        FAIL("make_plan accepted bf16 on float64 data");
    } catch (const Unsupported& e) {
        const std::string msg = e.what();
        CHECK(msg.find("bf16") != std::string::npos);
        CHECK(msg.find("float64") != std::string::npos);
    }
    CHECK(precision_named("bf16", "--precision") == Precision::bf16);
    CHECK(precision_named("full", "--precision") == Precision::full);
    CHECK_THROWS_WITH(precision_named("fp16", "--precision"),
                      Catch::Contains("--precision") && Catch::Contains("'fp16'"));

    PlanCache cache;
    const PlanRequest full{config, DType::f32, 4, 2};
    PlanRequest bf16 = full;
    bf16.precision = Precision::bf16;
    const auto a = cache.get(basic, full);
    const auto b = cache.get(basic, bf16);
    CHECK(a != b);
    CHECK(cache.size() == 2);
    CHECK(a->precision() == Precision::full);
    CHECK(b->precision() == Precision::bf16);
    CHECK(cache.get(basic, bf16) == b);
    // The bf16 plan holds the rounded weights and operands in its workspace.
    CHECK(b->workspace_bytes() > a->workspace_bytes());
    CHECK(b->reserve_bytes() == a->reserve_bytes());
}

TEST_CASE("an Lstm layer set to bf16 runs its variant's bf16 plan on fp32 masters", "[bf16_lstm]") {
    const Shape s{"bi 2 layers, mixed lengths", {3, 5, 2, true}, 5, 3, {5, 2, 4}, true};
    const LstmCase c = bf16_case(s, 9000);
    const Config& config = c.in.config;
    const int64_t T = c.in.seq_len, N = c.in.batch, cells = config.num_cells();
    auto floats = [](const std::vector<double>& v) {
        return std::vector<float>(v.begin(), v.end());
    };
    const std::vector<float> x = floats(c.in.x), h0 = floats(c.in.h0), c0 = floats(c.in.c0);
    const std::vector<float> params = floats(c.in.params), dy = floats(c.out_grads.dy);
    const std::vector<float> dhn = floats(c.out_grads.dhn), dcn = floats(c.out_grads.dcn);
    auto view = [](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
        return TensorView<const float>(v.data(), shape);
    };

    Lstm layer(config, "basic");
    CHECK(layer.precision() == Precision::full);
    layer.set_precision(Precision::bf16);
    CHECK(layer.precision() == Precision::bf16);
    layer.load_parameters(Span<const float>(params));
    const TensorView<const float> y = layer.forward(
        view(x, {T, N, config.input_size}), Span<const int64_t>(c.in.lengths),
        view(h0, {cells, N, config.state_size()}), view(c0, {cells, N, config.hidden_size}));
    const std::vector<double> got_y(y.data(), y.data() + y.numel());
    const TensorView<const float> dx = layer.backward(view(dy, {T, N, config.output_size()}),
                                                      view(dhn, {cells, N, config.state_size()}),
                                                      view(dcn, {cells, N, config.hidden_size}));
    const std::vector<double> got_dx(dx.data(), dx.data() + dx.numel());
    const auto grads = layer.gradients();
    const std::vector<double> got_grads(grads.begin(), grads.end());

    const VariantResult want = reference::run_variant_parts<float>(
        find_variant("basic", Device::cpu), c, {BackwardPart::all}, {}, false, {}, Precision::bf16);
    CHECK(got_y == want.y);
    CHECK(got_dx == want.dx);
    CHECK(got_grads == want.dparams);
    // The masters are what was loaded: fp32, not rounded.
    const auto masters = layer.parameters();
    CHECK(std::vector<float>(masters.begin(), masters.end()) == params);

    Lstm concat(config, "concat");
    CHECK_THROWS_AS(concat.set_precision(Precision::bf16), Unsupported);
    CHECK(concat.precision() == Precision::full);
}
