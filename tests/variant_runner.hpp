#pragma once

// Runs any registered variant on host data given in double and returns everything in double, so
// tests compare variants with lstm::reference element by element.

#include <cstdint>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/variant.hpp"
#include "test_util.hpp"

namespace lstm::test {

// One problem: inputs plus the output gradients backward is fed with.
struct LstmCase {
    reference::LstmInputs in;
    reference::LstmOutputGrads out_grads;
};

// Random inputs, parameters and output gradients for `config` on (T, N); `with_state` decides
// whether h0/c0 are given. Values uniform in [-scale, scale].
inline LstmCase make_case(const Config& config, int64_t seq_len, int64_t batch,
                          std::vector<int64_t> lengths, bool with_state, uint64_t seed,
                          double scale = 1.0) {
    LstmCase c;
    c.in.config = config;
    c.in.seq_len = seq_len;
    c.in.batch = batch;
    c.in.lengths = std::move(lengths);
    const size_t state = config.num_cells() * batch * config.hidden_size;
    c.in.x = random_vector(seq_len * batch * config.input_size, seed + 1, -scale, scale);
    c.in.params = random_vector(param_count(config), seed + 2, -scale, scale);
    if (with_state) {
        c.in.h0 = random_vector(state, seed + 3);
        c.in.c0 = random_vector(state, seed + 4);
    }
    c.out_grads.dy = random_vector(seq_len * batch * config.output_size(), seed + 5);
    c.out_grads.dhn = random_vector(state, seed + 6);
    c.out_grads.dcn = random_vector(state, seed + 7);
    return c;
}

// A variant's results in double. dparams is what backward added on top of `dparams_before`.
struct VariantResult {
    std::vector<double> y, hn, cn, dx, dh0, dc0, dparams;
};

// Runs training forward then backward of `variant` in precision T. dparams starts as
// `dparams_before` (to observe accumulation) or zeros.
template <typename T>
VariantResult run_variant(const Variant& variant, const LstmCase& c,
                          const std::vector<double>& dparams_before = {}) {
    const Config& cfg = c.in.config;
    const int64_t seq_len = c.in.seq_len, batch = c.in.batch;
    const int64_t cells = cfg.num_cells(), hidden = cfg.hidden_size;
    const DType dtype = dtype_of<T>();
    auto x = cast_vector<T>(c.in.x);
    auto params = cast_vector<T>(c.in.params);
    auto h0 = cast_vector<T>(c.in.h0), c0 = cast_vector<T>(c.in.c0);
    auto dy = cast_vector<T>(c.out_grads.dy);
    auto dhn = cast_vector<T>(c.out_grads.dhn), dcn = cast_vector<T>(c.out_grads.dcn);
    std::vector<T> y(seq_len * batch * cfg.output_size()), hn(cells * batch * hidden),
        cn(hn.size()), dx(x.size()), dh0(hn.size()), dc0(hn.size());
    std::vector<T> dparams = dparams_before.empty() ? std::vector<T>(params.size(), T(0))
                                                    : cast_vector<T>(dparams_before);
    detail::AlignedBuffer workspace, reserve;
    const size_t ws_bytes = variant.workspace_bytes(cfg, dtype, seq_len, batch);
    const size_t rs_bytes = variant.reserve_bytes(cfg, dtype, seq_len, batch);
    workspace.reserve(ws_bytes);
    reserve.reserve(rs_bytes);

    auto state_view = [&](std::vector<T>& v) {
        return v.empty() ? TensorView<T>() : TensorView<T>(v.data(), {cells, batch, hidden});
    };
    ForwardArgs<T> f;
    f.x = TensorView<const T>(x.data(), {seq_len, batch, cfg.input_size});
    f.lengths = Span<const int64_t>(c.in.lengths.data(), int64_t(c.in.lengths.size()));
    f.h0 = state_view(h0);
    f.c0 = state_view(c0);
    f.params = TensorView<const T>(params.data(), {int64_t(params.size())});
    f.y = TensorView<T>(y.data(), {seq_len, batch, cfg.output_size()});
    f.hn = state_view(hn);
    f.cn = state_view(cn);
    f.workspace = workspace.data();
    f.workspace_size = ws_bytes;
    f.reserve = reserve.data();
    f.reserve_size = rs_bytes;
    variant.forward(cfg, f);

    BackwardArgs<T> b;
    b.x = f.x;
    b.lengths = f.lengths;
    b.h0 = f.h0;
    b.c0 = f.c0;
    b.params = f.params;
    b.y = f.y;
    b.dy = TensorView<const T>(dy.data(), {seq_len, batch, cfg.output_size()});
    b.dhn = state_view(dhn);
    b.dcn = state_view(dcn);
    b.dx = TensorView<T>(dx.data(), {seq_len, batch, cfg.input_size});
    b.dh0 = state_view(dh0);
    b.dc0 = state_view(dc0);
    b.dparams = TensorView<T>(dparams.data(), {int64_t(dparams.size())});
    b.workspace = workspace.data();
    b.workspace_size = ws_bytes;
    b.reserve = reserve.data();
    b.reserve_size = rs_bytes;
    variant.backward(cfg, b);

    VariantResult r;
    r.y = cast_vector<double>(y);
    r.hn = cast_vector<double>(hn);
    r.cn = cast_vector<double>(cn);
    r.dx = cast_vector<double>(dx);
    r.dh0 = cast_vector<double>(dh0);
    r.dc0 = cast_vector<double>(dc0);
    r.dparams = cast_vector<double>(dparams);
    return r;
}

}  // namespace lstm::test
