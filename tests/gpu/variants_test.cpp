// Every registered CUDA variant against the double reference computed in this binary: the shapes
// of the CPU registry test plus Braun's four workloads (time shortened where the naive reference
// would take minutes, one full-size 1x320-CE-short case), training forward + backward on device
// memory with a cuda::Context. Also: inference forward == training forward, split backward ==
// all, a second identical call (graph replay where a variant captures one) == the first, and the
// "context must be given" error. One generic body: registering a variant is all it takes.

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/registry.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

// Inputs, outputs and buffers of one problem in device memory, for one variant and precision.
template <typename T>
class DeviceProblem {
public:
    DeviceProblem(const Variant& v, const LstmCase& c, cuda::Context& ctx)
        : v_(v), c_(c), ctx_(ctx) {
        const Config& cfg = c.in.config;
        seq_len_ = c.in.seq_len;
        batch_ = c.in.batch;
        state_ = cfg.num_cells() * batch_ * cfg.hidden_size;
        x_ = up(c.in.x);
        params_ = up(c.in.params);
        h0_ = up(c.in.h0);
        c0_ = up(c.in.c0);
        dy_ = up(c.out_grads.dy);
        dhn_ = up(c.out_grads.dhn);
        dcn_ = up(c.out_grads.dcn);
        const size_t out = size_t(seq_len_ * batch_ * cfg.output_size());
        for (Buffer* b : {&y_, &hn_, &cn_, &dh0_, &dc0_, &dx_, &dparams_})
            *b = Buffer(Device::cuda);
        y_.reserve(out * sizeof(T));
        hn_.reserve(state_ * sizeof(T));
        cn_.reserve(state_ * sizeof(T));
        dh0_.reserve(state_ * sizeof(T));
        dc0_.reserve(state_ * sizeof(T));
        dx_.reserve(c.in.x.size() * sizeof(T));
        dparams_.reserve(c.in.params.size() * sizeof(T));
        ws_bytes_ = v.workspace_bytes(cfg, dtype_of<T>(), seq_len_, batch_);
        rs_bytes_ = v.reserve_bytes(cfg, dtype_of<T>(), seq_len_, batch_);
        workspace_ = Buffer(Device::cuda, ws_bytes_);
        reserve_ = Buffer(Device::cuda, rs_bytes_);
    }

    ForwardArgs<T> forward_args(bool training) const {
        const Config& cfg = c_.in.config;
        ForwardArgs<T> f;
        f.x = view<const T>(x_, {seq_len_, batch_, cfg.input_size});
        f.lengths = Span<const int64_t>(c_.in.lengths.data(), int64_t(c_.in.lengths.size()));
        f.h0 = state_view<const T>(h0_);
        f.c0 = state_view<const T>(c0_);
        f.params = view<const T>(params_, {int64_t(c_.in.params.size())});
        f.y = view<T>(y_, {seq_len_, batch_, cfg.output_size()});
        f.hn = state_view<T>(hn_);
        f.cn = state_view<T>(cn_);
        f.workspace = workspace_.data();
        f.workspace_size = ws_bytes_;
        f.reserve = training ? reserve_.data() : nullptr;
        f.reserve_size = training ? rs_bytes_ : 0;
        f.context = &ctx_;
        return f;
    }

    BackwardArgs<T> backward_args(BackwardPart part) const {
        const Config& cfg = c_.in.config;
        const ForwardArgs<T> f = forward_args(true);
        BackwardArgs<T> b;
        b.x = f.x;
        b.lengths = f.lengths;
        b.h0 = f.h0;
        b.c0 = f.c0;
        b.params = f.params;
        b.y = f.y;
        b.dy = view<const T>(dy_, {seq_len_, batch_, cfg.output_size()});
        b.dhn = state_view<const T>(dhn_);
        b.dcn = state_view<const T>(dcn_);
        b.dx = view<T>(dx_, {seq_len_, batch_, cfg.input_size});
        b.dh0 = state_view<T>(dh0_);
        b.dc0 = state_view<T>(dc0_);
        b.dparams = view<T>(dparams_, {int64_t(c_.in.params.size())});
        b.workspace = workspace_.data();
        b.workspace_size = ws_bytes_;
        b.reserve = reserve_.data();
        b.reserve_size = rs_bytes_;
        b.context = &ctx_;
        b.part = part;
        return b;
    }

    // Training forward, then backward as one call or as data + weights, with dparams starting
    // from `before`; returns everything in double.
    reference::VariantResult train(const std::vector<double>& before, bool split) {
        const std::vector<T> start = cast_vector<T>(before);
        dparams_.copy_from(start.data(), Device::cpu, start.size() * sizeof(T), &ctx_);
        v_.forward(c_.in.config, forward_args(true));
        if (split) {
            v_.backward(c_.in.config, backward_args(BackwardPart::data));
            v_.backward(c_.in.config, backward_args(BackwardPart::weights));
        } else {
            v_.backward(c_.in.config, backward_args(BackwardPart::all));
        }
        ctx_.synchronize();
        reference::VariantResult r;
        r.y = down(y_, c_.out_grads.dy.size());
        r.hn = down(hn_, state_);
        r.cn = down(cn_, state_);
        r.dx = down(dx_, c_.in.x.size());
        r.dh0 = down(dh0_, state_);
        r.dc0 = down(dc0_, state_);
        r.dparams = down(dparams_, c_.in.params.size());
        return r;
    }

    // Inference forward: y, hn, cn only.
    reference::VariantResult infer() {
        v_.forward(c_.in.config, forward_args(false));
        ctx_.synchronize();
        reference::VariantResult r;
        r.y = down(y_, c_.out_grads.dy.size());
        r.hn = down(hn_, state_);
        r.cn = down(cn_, state_);
        return r;
    }

private:
    Buffer up(const std::vector<double>& host) {
        return Buffer::upload(Device::cuda, cast_vector<T>(host), &ctx_);
    }
    std::vector<double> down(const Buffer& b, size_t count) {
        return cast_vector<double>(b.download<T>(count, &ctx_));
    }
    template <typename U>
    static TensorView<U> view(const Buffer& b, std::initializer_list<int64_t> shape) {
        return TensorView<U>(static_cast<U*>(b.data()), shape, Device::cuda);
    }
    template <typename U>
    TensorView<U> state_view(const Buffer& b) const {
        if (b.size() == 0) return TensorView<U>();
        const Config& cfg = c_.in.config;
        return view<U>(b, {cfg.num_cells(), batch_, cfg.hidden_size});
    }

    const Variant& v_;
    const LstmCase& c_;
    cuda::Context& ctx_;
    int64_t seq_len_ = 0, batch_ = 0;
    size_t state_ = 0, ws_bytes_ = 0, rs_bytes_ = 0;
    Buffer x_, params_, h0_, c0_, dy_, dhn_, dcn_;
    Buffer y_, hn_, cn_, dh0_, dc0_, dx_, dparams_, workspace_, reserve_;
};

// small_shapes() (tests/variant_runner.hpp) plus Braun's (docs/benchmarks.md: I = 123,
// H = 320). The naive double reference is what costs: 1x320-CE-short runs at full size, the
// long ones with T cut to keep this executable within a few minutes; 4x320-CTC keeps its
// spread of lengths (linspace over [T/2, T]).
std::vector<Shape> shape_list() {
    const Config one_layer{123, 320, 1, false}, four_bi{123, 320, 4, true};
    std::vector<int64_t> ctc_lengths;
    const int64_t ctc_t = 24, ctc_n = 32;
    for (int64_t k = 0; k < ctc_n; ++k)
        ctc_lengths.push_back(ctc_t / 2 + (ctc_t / 2) * k / (ctc_n - 1));
    std::vector<Shape> shapes = small_shapes();
    const std::vector<Shape> braun = {
        {"braun 1x320-CE-short (full size)", one_layer, 100, 64, {}, false},
        {"braun 1x320-CE-long (T 1000 -> 60)", one_layer, 60, 32, {}, false},
        {"braun 4x320-CE-long (T 1000 -> 16)", four_bi, 16, 32, {}, false},
        {"braun 4x320-CTC-long (T 1000 -> 24, lengths spread)", four_bi, ctc_t, ctc_n, ctc_lengths,
         false},
    };
    shapes.insert(shapes.end(), braun.begin(), braun.end());
    return shapes;
}

template <typename T>
void check_variant_on_device(const Variant& v, const LstmCase& c, const reference::LstmOutputs& ref,
                             const reference::LstmInputGrads& ref_grads, uint64_t seed,
                             cuda::Context& ctx, const std::string& label) {
    const std::vector<double> before = random_vector(ref_grads.dparams.size(), seed + 99);
    const Rtol rtol = rtol_for<T>(c);
    const double fwd = rtol.forward, bwd = rtol.backward;
    INFO(label << ", " << to_string(dtype_of<T>()));

    DeviceProblem<T> p(v, c, ctx);
    const reference::VariantResult got = p.train(before, false);
    check_close_to_reference(got, ref, ref_grads, accumulated<T>(ref_grads.dparams, before), rtol);

    // The same call again: same shape, lengths and pointers, so a variant that captured a graph
    // replays it now. Same work in the same order: the same bits.
    const reference::VariantResult again = p.train(before, false);
    CHECK(again.y == got.y);
    CHECK(again.hn == got.hn);
    CHECK(again.cn == got.cn);
    CHECK(again.dx == got.dx);
    CHECK(again.dh0 == got.dh0);
    CHECK(again.dc0 == got.dc0);
    CHECK(again.dparams == got.dparams);

    // Inference computes the same forward without a reserve (a vendor library may pick other
    // kernels for it, so compare under the forward tolerance, not bit for bit).
    const reference::VariantResult inference = p.infer();
    LSTM_CHECK_CLOSE(compare_scaled("inference y vs training y", inference.y, got.y, fwd));
    LSTM_CHECK_CLOSE(compare_scaled("inference hn vs training hn", inference.hn, got.hn, fwd));
    LSTM_CHECK_CLOSE(compare_scaled("inference cn vs training cn", inference.cn, got.cn, fwd));

    if (!v.supports_split_backward()) {
        const reference::VariantResult split = p.train(before, true);
        LSTM_CHECK_CLOSE(compare_scaled("split dx vs all", split.dx, got.dx, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dh0 vs all", split.dh0, got.dh0, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dc0 vs all", split.dc0, got.dc0, bwd));
        LSTM_CHECK_CLOSE(compare_scaled("split dparams vs all", split.dparams, got.dparams, bwd));
    }
}

}  // namespace

TEST_CASE("gpu: every CUDA variant matches the reference", "[gpu][variants]") {
    const std::vector<const Variant*> on_gpu = variants_on(Device::cuda);
    REQUIRE_FALSE(on_gpu.empty());
    cuda::Context ctx;
    uint64_t seed = 3000;
    for (const Shape& s : shape_list()) {
        const LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
        LstmCase equalized = c;
        equalized.in.lengths.clear();
        const bool variable =
            detail::has_variable_lengths(Span<const int64_t>(c.in.lengths), c.in.seq_len);
        // The reference, computed once per case (and once more for equalized lengths if needed).
        const auto ref = reference::lstm_forward(c.in);
        const auto ref_grads = reference::lstm_backward(c.in, c.out_grads);
        bool need_equalized = false;
        for (const Variant* v : on_gpu)
            need_equalized |= variable && v->supports_variable_lengths().has_value();
        reference::LstmOutputs ref_eq;
        reference::LstmInputGrads ref_eq_grads;
        if (need_equalized) {
            ref_eq = reference::lstm_forward(equalized.in);
            ref_eq_grads = reference::lstm_backward(equalized.in, equalized.out_grads);
        }
        for (const Variant* v : on_gpu) {
            const bool refuses = variable && v->supports_variable_lengths().has_value();
            const LstmCase& used = refuses ? equalized : c;
            const std::string label = std::string("variant ") + v->name() + ", case: " + s.name;
            for (DType dt : {DType::f32, DType::f64}) {
                if (v->supports(s.config, dt)) continue;
                if (dt == DType::f32)
                    check_variant_on_device<float>(*v, used, refuses ? ref_eq : ref,
                                                   refuses ? ref_eq_grads : ref_grads, seed, ctx,
                                                   label);
                else
                    check_variant_on_device<double>(*v, used, refuses ? ref_eq : ref,
                                                    refuses ? ref_eq_grads : ref_grads, seed, ctx,
                                                    label);
            }
        }
        seed += 10;
    }
}

TEST_CASE("gpu: a CUDA variant called without a context says so", "[gpu][variants]") {
    const LstmCase c = make_case({3, 5, 1, false}, 4, 2, {}, false, 11);
    cuda::Context ctx;
    for (const Variant* v : variants_on(Device::cuda)) {
        if (v->supports(c.in.config, DType::f32)) continue;
        INFO("variant " << v->name());
        DeviceProblem<float> p(*v, c, ctx);
        ForwardArgs<float> f = p.forward_args(true);
        f.context = nullptr;
        REQUIRE_THROWS_WITH(v->forward(c.in.config, f), Catch::Contains("context must be"));
        BackwardArgs<float> b = p.backward_args(BackwardPart::all);
        b.context = nullptr;
        REQUIRE_THROWS_WITH(v->backward(c.in.config, b), Catch::Contains("context must be"));
    }
}
