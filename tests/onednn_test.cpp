// What the registry tests (variants_test.cpp) do not cover for the `onednn` variant: its refusals,
// the gate order of its weight conversion, layer stacking across primitives, inference forward,
// omitted optional arguments and its plan cache, each also with projections (oneDNN's LSTM with
// projection, whose absence on a CPU or oneDNN build must come out as lstm::Unsupported).

#if LSTM_WITH_ONEDNN

#include <omp.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/host_info.hpp"
#include "lstm/layer.hpp"
#include "lstm/registry.hpp"
#include "lstm/threads.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;
using Catch::Contains;

namespace {

const Variant& onednn() { return find_variant("onednn", Device::cpu); }

Config projected(Config c, int64_t proj_size) {
    c.proj_size = proj_size;
    return c;
}
Config no_bias(Config c) {
    c.bias = false;
    return c;
}

// Null where oneDNN builds its LSTM with projection on this CPU (under DNNL_MAX_CPU_ISA, if set);
// else the variant's lstm::Unsupported message, which must say what is missing and what to use.
std::optional<std::string> projection_refusal() {
    try {
        onednn().workspace_bytes(projected({3, 5, 1, true}, 2), DType::f32, 3, 2);
        return std::nullopt;
    } catch (const Unsupported& e) {
        const std::string why = e.what();
        CHECK_THAT(why, Contains("no LSTM with projection") && Contains("'basic'"));
        return why;
    }
}

// Which optional arguments a run leaves out.
struct Omit {
    bool state_in = false;     // h0, c0
    bool state_grads = false;  // dhn, dcn
    bool outputs = false;      // hn, cn, dx, dh0, dc0
};

// Runs the variant in float on `c` without going through run_variant, so that optional
// arguments can be left out. Inference forward only when `inference`; otherwise training forward
// then backward, with dparams starting from zero. Left-out outputs come back empty.
VariantResult run_float(const Variant& v, const LstmCase& c, Omit omit, bool inference = false) {
    const Config& cfg = c.in.config;
    const int64_t seq_len = c.in.seq_len, batch = c.in.batch;
    // h is S = state_size() wide (proj_size with a projection), c always H.
    const int64_t cells = cfg.num_cells(), hidden = cfg.hidden_size, width = cfg.state_size();
    auto x = cast_vector<float>(c.in.x), params = cast_vector<float>(c.in.params);
    auto h0 = cast_vector<float>(c.in.h0), c0 = cast_vector<float>(c.in.c0);
    auto dy = cast_vector<float>(c.out_grads.dy);
    auto dhn = cast_vector<float>(c.out_grads.dhn), dcn = cast_vector<float>(c.out_grads.dcn);
    const size_t h_state = cells * batch * width, c_state = cells * batch * hidden;
    std::vector<float> y(seq_len * batch * cfg.output_size()), hn(h_state), cn(c_state),
        dx(x.size()), dh0(h_state), dc0(c_state), dparams(params.size(), 0.0f);
    detail::AlignedBuffer workspace, reserve;
    const size_t ws_bytes = v.workspace_bytes(cfg, DType::f32, seq_len, batch);
    const size_t rs_bytes = v.reserve_bytes(cfg, DType::f32, seq_len, batch);
    auto view = [&](std::vector<float>& data, bool omitted, int64_t features) {
        return omitted || data.empty() ? TensorView<float>()
                                       : TensorView<float>(data.data(), {cells, batch, features});
    };

    ForwardArgs<float> f;
    f.x = TensorView<const float>(x.data(), {seq_len, batch, cfg.input_size});
    f.h0 = view(h0, omit.state_in, width);
    f.c0 = view(c0, omit.state_in, hidden);
    f.params = TensorView<const float>(params.data(), {int64_t(params.size())});
    f.y = TensorView<float>(y.data(), {seq_len, batch, cfg.output_size()});
    f.hn = view(hn, omit.outputs, width);
    f.cn = view(cn, omit.outputs, hidden);
    f.workspace = workspace.reserve(ws_bytes);
    f.workspace_size = ws_bytes;
    if (!inference) {
        f.reserve = reserve.reserve(rs_bytes);
        f.reserve_size = rs_bytes;
    }
    v.forward(cfg, f);

    VariantResult r;
    r.y = cast_vector<double>(y);
    if (!omit.outputs) {
        r.hn = cast_vector<double>(hn);
        r.cn = cast_vector<double>(cn);
    }
    if (inference) return r;

    BackwardArgs<float> b = backward_args_from(f);
    b.dy = TensorView<const float>(dy.data(), {seq_len, batch, cfg.output_size()});
    b.dhn = view(dhn, omit.state_grads, width);
    b.dcn = view(dcn, omit.state_grads, hidden);
    if (!omit.outputs) b.dx = TensorView<float>(dx.data(), {seq_len, batch, cfg.input_size});
    b.dh0 = view(dh0, omit.outputs, width);
    b.dc0 = view(dc0, omit.outputs, hidden);
    b.dparams = TensorView<float>(dparams.data(), {int64_t(dparams.size())});
    v.backward(cfg, b);
    if (!omit.outputs) {
        r.dx = cast_vector<double>(dx);
        r.dh0 = cast_vector<double>(dh0);
        r.dc0 = cast_vector<double>(dc0);
    }
    r.dparams = cast_vector<double>(dparams);
    return r;
}

// Compares every non-empty field of `got` with the reference at float tolerance.
void check_with_reference(const LstmCase& c, const VariantResult& got) {
    const Config& cfg = c.in.config;
    const double fwd = lstm_rtol(DType::f32, cfg, c.in.seq_len, Pass::forward);
    const double bwd = lstm_rtol(DType::f32, cfg, c.in.seq_len, Pass::backward);
    const auto ref = reference::lstm_forward(c.in);
    LSTM_CHECK_CLOSE(compare_scaled("y", got.y, ref.y, fwd));
    if (!got.hn.empty()) LSTM_CHECK_CLOSE(compare_scaled("hn", got.hn, ref.hn, fwd));
    if (!got.cn.empty()) LSTM_CHECK_CLOSE(compare_scaled("cn", got.cn, ref.cn, fwd));
    if (got.dparams.empty()) return;
    const auto grads = reference::lstm_backward(c.in, c.out_grads);
    if (!got.dx.empty()) LSTM_CHECK_CLOSE(compare_scaled("dx", got.dx, grads.dx, bwd));
    if (!got.dh0.empty()) LSTM_CHECK_CLOSE(compare_scaled("dh0", got.dh0, grads.dh0, bwd));
    if (!got.dc0.empty()) LSTM_CHECK_CLOSE(compare_scaled("dc0", got.dc0, grads.dc0, bwd));
    LSTM_CHECK_CLOSE(compare_scaled("dparams", got.dparams, grads.dparams, bwd));
}

}  // namespace

TEST_CASE("onednn refuses per-sequence lengths and float64, saying why", "[onednn]") {
    const Variant& v = onednn();
    const Config config{3, 5, 1, false};
    REQUIRE(v.supports_variable_lengths().has_value());
    CHECK_THAT(*v.supports_variable_lengths(), Contains("no sequence lengths"));
    REQUIRE(v.supports(config, DType::f64).has_value());
    CHECK_THAT(*v.supports(config, DType::f64), Contains("float32 only"));
    CHECK_FALSE(v.supports(config, DType::f32).has_value());

    // Mixed lengths: forward throws the refusal, naming the variant.
    LstmCase c = make_case(config, 4, 2, {4, 2}, true, 11);
    CHECK_THROWS_WITH(run_variant<float>(v, c),
                      Contains("variant 'onednn' (cpu) cannot take per-sequence lengths") &&
                          Contains("no sequence lengths"));
    CHECK_THROWS_WITH(run_variant<double>(v, make_case(config, 4, 2, {}, true, 11)),
                      Contains("cannot run this config in float64") && Contains("float32 only"));

    // Lengths that are all T are not variable: accepted, and equal to giving none.
    c.in.lengths = {4, 4};
    check_with_reference(c, run_variant<float>(v, c));
}

TEST_CASE("onednn keeps PyTorch's gate order i, f, g, o", "[onednn]") {
    // Only one gate block is non-zero in every weight and bias; a permuted block would feed the
    // wrong activation (a zero block gives sigma = 0.5 or tanh = 0, never what the live block
    // gives) and put its gradient in the wrong rows.
    const Config config{4, 6, 2, true};
    const int64_t hidden = config.hidden_size;
    const std::vector<ParamEntry> entries = param_entries(config);
    for (int64_t gate = 0; gate < 4; ++gate) {
        LstmCase c = make_case(config, 5, 3, {}, true, 300 + gate, 1.5);
        for (const ParamEntry& e : entries) {
            const int64_t width = e.cols == 0 ? 1 : e.cols;
            for (int64_t row = 0; row < e.rows; ++row)
                if (row / hidden != gate)
                    for (int64_t k = 0; k < width; ++k) c.in.params[e.offset + row * width + k] = 0;
        }
        INFO("only gate block "
             << "ifgo"[gate] << " is non-zero");
        check_with_reference(c, run_variant<float>(onednn(), c));
    }
}

TEST_CASE("onednn stacks layers across primitives like PyTorch", "[onednn]") {
    // One stacked primitive (I == H), layer 0 alone + a stack of two (I != H), and one primitive
    // per layer (bidirectional: three, so layer outputs alternate between two buffers). Each
    // checked in training (forward + backward) and in inference.
    const Config configs[] = {{5, 5, 3, false}, {3, 5, 3, false}, {3, 4, 3, true}};
    uint64_t seed = 700;
    for (const Config& config : configs) {
        const LstmCase c = make_case(config, 6, 4, {}, true, seed += 10);
        INFO("I " << config.input_size << ", H " << config.hidden_size << ", L "
                  << config.num_layers << (config.bidirectional ? ", bi" : ", uni"));
        check_with_reference(c, run_variant<float>(onednn(), c));
        check_with_reference(c, run_float(onednn(), c, Omit{}, true));
    }
}

TEST_CASE("onednn runs with every optional argument left out", "[onednn]") {
    const Config config{3, 5, 2, true};
    LstmCase c = make_case(config, 5, 3, {}, false, 900);
    c.out_grads.dhn.clear();
    c.out_grads.dcn.clear();
    // h0/c0/dhn/dcn absent mean zeros; hn, cn, dx, dh0, dc0 not requested.
    const VariantResult bare = run_float(onednn(), c, Omit{true, true, true});
    CHECK(bare.hn.empty());
    CHECK(bare.dx.empty());
    check_with_reference(c, bare);
    check_with_reference(c, run_float(onednn(), c, Omit{true, true, true}, true));
}

TEST_CASE("onednn plans survive cache eviction and keep their sizes", "[onednn]") {
    const Variant& v = onednn();
    const Config config{3, 5, 1, true};
    const size_t ws = v.workspace_bytes(config, DType::f32, 3, 2);
    const size_t rs = v.reserve_bytes(config, DType::f32, 3, 2);
    CHECK(v.workspace_bytes(config, DType::f32, 3, 2) == ws);
    // More shapes than the cache keeps: the first plan is dropped and rebuilt.
    for (int64_t seq_len = 4; seq_len < 24; ++seq_len)
        v.workspace_bytes(config, DType::f32, seq_len, 2);
    CHECK(v.workspace_bytes(config, DType::f32, 3, 2) == ws);
    CHECK(v.reserve_bytes(config, DType::f32, 3, 2) == rs);
    const LstmCase c = make_case(config, 3, 2, {}, true, 1234);
    check_with_reference(c, run_variant<float>(v, c));
}

TEST_CASE("onednn runs projections across its layer groups, or refuses them as Unsupported",
          "[onednn]") {
    // Run again under DNNL_MAX_CPU_ISA=AVX2 and SSE41 (tests/CMakeLists.txt), where oneDNN picks
    // other kernels and weight formats for the projection too.
    INFO("oneDNN path: " << variant_path(onednn()));
    if (const auto why = projection_refusal())
        LSTM_SKIP("onednn refuses projections here: " << *why);
    // h and the layer outputs are P wide, c stays H: one primitive stacks every layer when I == P,
    // else layer 0 runs alone; bidirectional layers run one primitive each, reading D*P features.
    const Config configs[] = {projected({3, 6, 3, false}, 3), projected({5, 6, 3, false}, 2),
                              projected({3, 5, 3, true}, 2),
                              no_bias(projected({4, 7, 2, true}, 4))};
    uint64_t seed = 1100;
    for (const Config& config : configs) {
        INFO("I " << config.input_size << ", H " << config.hidden_size << ", P " << config.proj_size
                  << ", L " << config.num_layers << (config.bidirectional ? ", bi" : ", uni")
                  << (config.bias ? "" : ", no biases"));
        const LstmCase c = make_case(config, 6, 4, {}, true, seed += 10);
        check_with_reference(c, run_variant<float>(onednn(), c));
        check_with_reference(c, run_float(onednn(), c, Omit{}, true));
        // Omitted arguments: zeros stand in for h0 (P wide) and c0 (H wide), sinks take the rest.
        LstmCase bare = make_case(config, 5, 3, {}, false, seed + 5);
        bare.out_grads.dhn.clear();
        bare.out_grads.dcn.clear();
        check_with_reference(bare, run_float(onednn(), bare, Omit{true, true, true}));
        check_with_reference(bare, run_float(onednn(), bare, Omit{true, true, true}, true));
    }
}

TEST_CASE("onednn keeps a plan per proj_size and bias of one shape", "[onednn]") {
    // Equal I, H, L, T and N, but other primitives, weight buffers and layer groups (P 4 == I
    // stacks both layers in one primitive); a cache keyed on the shape alone would mix them up.
    if (const auto why = projection_refusal())
        LSTM_SKIP("onednn refuses projections here: " << *why);
    const Variant& v = onednn();
    const Config base{4, 6, 2, false};
    const Config configs[] = {base, projected(base, 4), projected(base, 3),
                              no_bias(projected(base, 4)), no_bias(base)};
    for (int round = 0; round < 2; ++round) {  // the second round runs on the cached plans
        uint64_t seed = 1300;
        for (const Config& config : configs) {
            INFO("round " << round << ", P " << config.proj_size
                          << (config.bias ? "" : ", no biases"));
            const LstmCase c = make_case(config, 5, 3, {}, true, seed += 10);
            check_with_reference(c, run_variant<float>(v, c));
        }
    }
}

TEST_CASE("onednn gives the reference's numbers whatever team OpenMP grants the call",
          "[onednn][threads]") {
    // oneDNN's OpenMP build splits a primitive's work for the thread count it was built under.
    // With OMP_DYNAMIC (or omp_set_dynamic), with OMP_THREAD_LIMIT below the count, or with a
    // plan built under another count, a call ran on fewer or more threads than that and y came
    // out off by 10-20x, the error growing call after call. tests/CMakeLists.txt runs this case
    // a second time under OMP_THREAD_LIMIT=1.
    const int saved_threads = omp_get_max_threads(), saved_dynamic = omp_get_dynamic();
    const int many = 2 * omp_get_num_procs() + 1;  // more than dynamic adjustment grants
    const Config config{16, 40, 1, true};
    const LstmCase c = make_case(config, 12, 8, {}, true, 2024);
    SECTION("dynamic adjustment on, more threads than cores") {
        omp_set_dynamic(1);
        set_num_threads(many);
        for (int call = 0; call < 3; ++call)
            check_with_reference(c, run_variant<float>(onednn(), c));
    }
    SECTION("one shape at several counts in turn") {
        for (const int threads : {many, 1, 2, many}) {
            INFO(threads << " threads");
            set_num_threads(threads);
            check_with_reference(c, run_variant<float>(onednn(), c));
        }
    }
    SECTION("a layer's forward at one count, its backward at another") {
        Config layer_config = config;
        layer_config.num_layers = 2;
        const LstmCase two = make_case(layer_config, 12, 8, {}, true, 2025);
        Lstm layer(layer_config, "onednn");
        const auto x = cast_vector<float>(two.in.x), params = cast_vector<float>(two.in.params);
        const auto dy = cast_vector<float>(two.out_grads.dy);
        layer.load_parameters(Span<const float>(params));
        set_num_threads(many);
        const TensorView<const float> y =
            layer.forward(TensorView<const float>(x.data(), {12, 8, config.input_size}));
        VariantResult got;
        got.y = std::vector<double>(y.data(), y.data() + y.numel());
        set_num_threads(1);
        layer.backward(TensorView<const float>(dy.data(), {12, 8, layer_config.output_size()}), {},
                       {}, false);
        got.dparams.assign(layer.gradients().begin(), layer.gradients().end());
        LstmCase without_states = two;
        without_states.in.h0.assign(without_states.in.h0.size(), 0.0);
        without_states.in.c0.assign(without_states.in.c0.size(), 0.0);
        without_states.out_grads.dhn.assign(without_states.out_grads.dhn.size(), 0.0);
        without_states.out_grads.dcn.assign(without_states.out_grads.dcn.size(), 0.0);
        check_with_reference(without_states, got);
    }
    omp_set_dynamic(saved_dynamic);
    set_num_threads(saved_threads);
}

#endif  // LSTM_WITH_ONEDNN
