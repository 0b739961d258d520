#include "reference_check.hpp"

#include <algorithm>
#include <exception>
#include <random>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/reference/tolerance.hpp"

namespace lstm::bench {

namespace {

// Any fixed value; fixed so that a failure reproduces.
constexpr uint64_t kCheckDySeed = 7;

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The slice in fp32 (what the variant gets) and the very same values in double (what the
// reference gets), so the only difference left is the arithmetic.
struct Slice {
    Config config;
    int64_t seq_len = 0, batch = 0;
    std::vector<float> x, params, dy;
    std::vector<int64_t> lengths;
};

Slice make_slice(const Config& config, TensorView<const float> x, Span<const int64_t> lengths,
                 Span<const float> params) {
    const int64_t full_batch = x.size(1), width = config.input_size;
    Slice s;
    s.config = config;
    s.seq_len = std::min(x.size(0), kCheckSteps);
    s.batch = std::min(full_batch, kCheckSequences);
    s.x.reserve(static_cast<size_t>(s.seq_len * s.batch * width));
    for (int64_t t = 0; t < s.seq_len; ++t) {
        const float* row = x.data() + t * full_batch * width;
        s.x.insert(s.x.end(), row, row + s.batch * width);
    }
    for (int64_t n = 0; n < s.batch; ++n)
        s.lengths.push_back(lengths.empty() ? s.seq_len : std::min(lengths[n], s.seq_len));
    s.params.assign(params.begin(), params.end());
    std::mt19937_64 rng(kCheckDySeed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    s.dy.resize(static_cast<size_t>(s.seq_len * s.batch * config.output_size()));
    for (float& v : s.dy) v = static_cast<float>(uniform(rng));
    return s;
}

struct Outputs {
    std::vector<float> y, hn, cn, dx, dh0, dc0, dparams;
};

// One training forward and backward of the variant with zero initial states and no gradient
// arriving at hn/cn, as in the timed training step.
Outputs run_variant(const Variant& variant, const Slice& s) {
    const Config& cfg = s.config;
    const int64_t seq_len = s.seq_len, batch = s.batch;
    const int64_t cells = cfg.num_cells(), hidden = cfg.hidden_size;
    Outputs o;
    o.y.resize(static_cast<size_t>(seq_len * batch * cfg.output_size()));
    o.hn.resize(static_cast<size_t>(cells * batch * hidden));
    o.cn.resize(o.hn.size());
    o.dx.resize(s.x.size());
    o.dh0.resize(o.hn.size());
    o.dc0.resize(o.hn.size());
    // Backward accumulates into dparams, so it starts from zero to match the reference.
    o.dparams.assign(s.params.size(), 0.0f);

    const size_t workspace_size = variant.workspace_bytes(cfg, DType::f32, seq_len, batch);
    const size_t reserve_size = variant.reserve_bytes(cfg, DType::f32, seq_len, batch);
    detail::AlignedBuffer workspace, reserve;
    workspace.reserve(workspace_size);
    reserve.reserve(reserve_size);
    auto state = [&](std::vector<float>& v) {
        return TensorView<float>(v.data(), {cells, batch, hidden});
    };

    ForwardArgs<float> f;
    f.x = TensorView<const float>(s.x.data(), {seq_len, batch, cfg.input_size});
    f.lengths = Span<const int64_t>(s.lengths.data(), batch);
    f.params = TensorView<const float>(s.params.data(), {int64_t(s.params.size())});
    f.y = TensorView<float>(o.y.data(), {seq_len, batch, cfg.output_size()});
    f.hn = state(o.hn);
    f.cn = state(o.cn);
    f.workspace = workspace.data();
    f.workspace_size = workspace_size;
    f.reserve = reserve.data();
    f.reserve_size = reserve_size;
    variant.forward(cfg, f);

    BackwardArgs<float> b;
    b.x = f.x;
    b.lengths = f.lengths;
    b.params = f.params;
    b.y = f.y;
    b.dy = TensorView<const float>(s.dy.data(), {seq_len, batch, cfg.output_size()});
    b.dx = TensorView<float>(o.dx.data(), {seq_len, batch, cfg.input_size});
    b.dh0 = state(o.dh0);
    b.dc0 = state(o.dc0);
    b.dparams = TensorView<float>(o.dparams.data(), {int64_t(o.dparams.size())});
    b.workspace = workspace.data();
    b.workspace_size = workspace_size;
    b.reserve = reserve.data();
    b.reserve_size = reserve_size;
    variant.backward(cfg, b);
    return o;
}

std::optional<std::string> compare(const Slice& s, const Outputs& got) {
    reference::LstmInputs in;
    in.config = s.config;
    in.seq_len = s.seq_len;
    in.batch = s.batch;
    in.x = widen(s.x);
    in.lengths = s.lengths;
    in.params = widen(s.params);
    reference::LstmOutputGrads out_grads;
    out_grads.dy = widen(s.dy);
    const reference::LstmOutputs want = reference::lstm_forward(in);
    const reference::LstmInputGrads want_grads = reference::lstm_backward(in, out_grads);

    using reference::check_close;
    using reference::Pass;
    const double fwd = reference::lstm_rtol(DType::f32, s.config, s.seq_len, Pass::forward);
    const double bwd = reference::lstm_rtol(DType::f32, s.config, s.seq_len, Pass::backward);
    const std::optional<std::string> verdicts[] = {
        check_close("y", widen(got.y), want.y, fwd),
        check_close("hn", widen(got.hn), want.hn, fwd),
        check_close("cn", widen(got.cn), want.cn, fwd),
        check_close("dx", widen(got.dx), want_grads.dx, bwd),
        check_close("dh0", widen(got.dh0), want_grads.dh0, bwd),
        check_close("dc0", widen(got.dc0), want_grads.dc0, bwd),
        check_close("dparams", widen(got.dparams), want_grads.dparams, bwd),
    };
    for (const auto& why : verdicts)
        if (why) return why;
    return std::nullopt;
}

}  // namespace

std::optional<std::string> check_against_reference(const Variant& variant, const Config& config,
                                                   TensorView<const float> x,
                                                   Span<const int64_t> lengths,
                                                   Span<const float> params) {
    const Slice slice = make_slice(config, x, lengths, params);
    const std::string where = "reference check on the first " + std::to_string(slice.batch) +
                              " sequences x " + std::to_string(slice.seq_len) + " steps: ";
    try {
        if (auto why = compare(slice, run_variant(variant, slice))) return where + *why;
    } catch (const std::exception& e) {
        return where + "threw: " + e.what();
    }
    return std::nullopt;
}

}  // namespace lstm::bench
