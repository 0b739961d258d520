// Every registered CUDA variant against the double reference computed in this binary: the shapes
// of the CPU registry test plus Braun's four workloads (time shortened where the naive reference
// would take minutes, one full-size 1x320-CE-short case), training forward + backward on device
// memory with a cuda::Context. Also: inference forward == training forward, split backward ==
// all, a second identical call (graph replay where a variant captures one) == the first, and the
// "context must be given" error. One generic body, one generated test case per (variant, dtype,
// shape) (tests/gpu/case_registry.hpp): registering a variant is all it takes.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "case_registry.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/registry.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// small_shapes() (tests/variant_runner.hpp) plus Braun's (docs/benchmarks.md: I = 123,
// H = 320). The naive double reference is what costs: 1x320-CE-short runs at full size, the
// long ones with T cut to keep this executable within a few minutes; 4x320-CTC keeps its
// spread of lengths (linspace over [T/2, T]). Braun's shapes take PyTorch's initialization for
// the parameters (see braun_param_scale).
std::vector<Shape> shape_list() {
    const Config one_layer{123, 320, 1, false}, four_bi{123, 320, 4, true};
    std::vector<int64_t> ctc_lengths;
    const int64_t ctc_t = 24, ctc_n = 32;
    for (int64_t k = 0; k < ctc_n; ++k)
        ctc_lengths.push_back(ctc_t / 2 + (ctc_t / 2) * k / (ctc_n - 1));
    std::vector<Shape> shapes = small_shapes();
    const std::vector<Shape> braun = {
        {"braun 1x320-CE-short (full size)", one_layer, 100, 64, {}, false},
        {"braun 1x320-CE-long (T 1000 cut to 60)", one_layer, 60, 32, {}, false},
        {"braun 4x320-CE-long (T 1000 cut to 16)", four_bi, 16, 32, {}, false},
        {"braun 4x320-CTC-long (T 1000 cut to 24, lengths spread)", four_bi, ctc_t, ctc_n,
         ctc_lengths, false},
    };
    shapes.insert(shapes.end(), braun.begin(), braun.end());
    return shapes;
}

// The parameters of Braun's shapes are drawn from U(-k, k) with k = 1 / sqrt(H), PyTorch's
// initialization, instead of make_case's U(-1, 1). At U(-1, 1) and H 320 the recurrence is
// chaotic: a relative change of 1e-13 in one weight grows to a difference of order 1 in y within
// 100 steps, in double on the CPU as well, so no two correct implementations agree there (the
// CPU variants part from the reference exactly as the GPU ones did on an H200). At PyTorch's
// scale the same change stays at 2e-16.
double braun_param_scale(const Config& config) {
    return 1.0 / std::sqrt(static_cast<double>(config.hidden_size));
}

template <typename T>
void check_variant_on_device(const Variant& v, const LstmCase& c, const reference::LstmOutputs& ref,
                             const reference::LstmInputGrads& ref_grads, uint64_t seed,
                             cuda::Context& ctx, const std::string& label) {
    const std::vector<double> before = random_vector(ref_grads.dparams.size(), seed + 99);
    const Rtol rtol = rtol_for<T>(c);
    const double fwd = rtol.forward, bwd = rtol.backward;
    INFO(label << ", " << to_string(dtype_of<T>()));

    LstmProblem<T> p = case_problem<T>(c, Device::cuda, &ctx);
    p.allocate_scratch(v);
    auto train = [&](bool split) { return train_problem(v, p, split, before); };
    const reference::VariantResult got = train(false);
    check_close_to_reference(got, ref, ref_grads, accumulated<T>(ref_grads.dparams, before), rtol);

    // The same call again: same shape, lengths and pointers, so a variant that captured a graph
    // replays it now. Same work in the same order: the same bits.
    check_same_bits(train(false), got, true);

    // Inference computes the same forward without a reserve (a vendor library may pick other
    // kernels for it, so compare under the forward tolerance, not bit for bit).
    const reference::VariantResult inference = infer_problem(v, p);
    LSTM_CHECK_CLOSE(compare_scaled("inference y vs training y", inference.y, got.y, fwd));
    LSTM_CHECK_CLOSE(compare_scaled("inference hn vs training hn", inference.hn, got.hn, fwd));
    LSTM_CHECK_CLOSE(compare_scaled("inference cn vs training cn", inference.cn, got.cn, fwd));

    if (!v.supports_split_backward()) {
        const reference::VariantResult split = train(true);
        LSTM_CHECK_CLOSE(compare_scaled("split dx vs all", split.dx, got.dx, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dh0 vs all", split.dh0, got.dh0, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dc0 vs all", split.dc0, got.dc0, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dparams vs all", split.dparams, got.dparams, bwd));
    }
}

// One variant in one precision on one shape, with only the reference that variant needs: a
// variant that refuses variable lengths runs (and is compared) with every length equal to T.
// `param_scale`: the parameters are U(-param_scale, param_scale), the rest as make_case draws it.
void variant_matches_reference(const Variant& v, DType dt, const Shape& s, uint64_t seed,
                               double param_scale) {
    LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
    if (param_scale != 1.0)
        c.in.params = random_vector(c.in.params.size(), seed + 2, -param_scale, param_scale);
    if (detail::has_variable_lengths(Span<const int64_t>(c.in.lengths), c.in.seq_len) &&
        v.supports_variable_lengths().has_value())
        c.in.lengths.clear();
    const auto ref = reference::lstm_forward(c.in);
    const auto ref_grads = reference::lstm_backward(c.in, c.out_grads);
    cuda::Context ctx;
    const std::string label = std::string("variant ") + v.name() + ", case: " + s.name;
    if (dt == DType::f32)
        check_variant_on_device<float>(v, c, ref, ref_grads, seed, ctx, label);
    else
        check_variant_on_device<double>(v, c, ref, ref_grads, seed, ctx, label);
}

void context_is_required(const Variant& v) {
    const LstmCase c = make_case(Config{3, 5, 1, false}, 4, 2, {}, false, 11);
    cuda::Context ctx;
    LstmProblem<float> p = case_problem<float>(c, Device::cuda, &ctx);
    p.allocate_scratch(v);
    ForwardArgs<float> f = p.forward_args(true);
    f.context = nullptr;
    REQUIRE_THROWS_WITH(v.forward(c.in.config, f), Catch::Contains("context must be"));
    BackwardArgs<float> b = p.backward_args(BackwardPart::all);
    b.context = nullptr;
    REQUIRE_THROWS_WITH(v.backward(c.in.config, b), Catch::Contains("context must be"));
}

// Cases named "gpu: variant <name> <dtype> matches the reference: <shape>"; Braun's shapes are
// tagged [big] (their reference takes seconds), the first small shape in f32 [memcheck] (the
// case compute-sanitizer runs per variant).
const CaseGenerator generate_variant_cases{[] {
    const std::vector<Shape> shapes = shape_list();
    const size_t small = small_shapes().size();
    for (const Variant* v : variants_on(Device::cuda)) {
        for (size_t k = 0; k < shapes.size(); ++k) {
            const Shape& s = shapes[k];
            const uint64_t seed = 3000 + 10 * k;
            const double param_scale = k >= small ? braun_param_scale(s.config) : 1.0;
            for (DType dt : {DType::f32, DType::f64}) {
                if (v->supports(s.config, dt)) continue;
                std::string tags = std::string("[gpu][variants][") + v->name() + "]";
                if (k >= small) tags += "[big]";
                if (k == 0 && dt == DType::f32) tags += "[memcheck]";
                add_case(CATCH_INTERNAL_LINEINFO,
                         std::string("gpu: variant ") + v->name() + " " + dtype_name(dt) +
                             " matches the reference: " + case_name_part(s.name),
                         tags, [v, dt, s, seed, param_scale] {
                             variant_matches_reference(*v, dt, s, seed, param_scale);
                         });
            }
        }
        if (!v->supports(Config{3, 5, 1, false}, DType::f32))
            add_case(CATCH_INTERNAL_LINEINFO,
                     std::string("gpu: variant ") + v->name() + " called without a context says so",
                     std::string("[gpu][variants][") + v->name() + "]",
                     [v] { context_is_required(*v); });
    }
}};

}  // namespace

TEST_CASE("gpu: the registry has CUDA variants", "[gpu][variants]") {
    REQUIRE_FALSE(variants_on(Device::cuda).empty());
}
