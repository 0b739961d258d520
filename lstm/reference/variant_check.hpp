#pragma once

// Runs any registered variant on a problem given in double and returns everything in double, so
// the tests, the bench's pre-check and users compare a variant with the reference element by
// element (lstm/reference/tolerance.hpp has the rule).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/reference/tolerance.hpp"
#include "lstm/variant.hpp"

namespace lstm::reference {

// One problem: the inputs plus the output gradients backward is fed with.
struct LstmCase {
    LstmInputs in;
    LstmOutputGrads out_grads;
};

namespace detail {

template <typename To, typename From>
std::vector<To> cast_all(const std::vector<From>& in) {
    return std::vector<To>(in.begin(), in.end());
}

}  // namespace detail

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
    auto x = detail::cast_all<T>(c.in.x);
    auto params = detail::cast_all<T>(c.in.params);
    auto h0 = detail::cast_all<T>(c.in.h0), c0 = detail::cast_all<T>(c.in.c0);
    auto dy = detail::cast_all<T>(c.out_grads.dy);
    auto dhn = detail::cast_all<T>(c.out_grads.dhn), dcn = detail::cast_all<T>(c.out_grads.dcn);
    std::vector<T> y(seq_len * batch * cfg.output_size()), hn(cells * batch * hidden),
        cn(hn.size()), dx(x.size()), dh0(hn.size()), dc0(hn.size());
    std::vector<T> dparams = dparams_before.empty() ? std::vector<T>(params.size(), T(0))
                                                    : detail::cast_all<T>(dparams_before);
    lstm::detail::AlignedBuffer workspace, reserve;
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
    r.y = detail::cast_all<double>(y);
    r.hn = detail::cast_all<double>(hn);
    r.cn = detail::cast_all<double>(cn);
    r.dx = detail::cast_all<double>(dx);
    r.dh0 = detail::cast_all<double>(dh0);
    r.dc0 = detail::cast_all<double>(dc0);
    r.dparams = detail::cast_all<double>(dparams);
    return r;
}

// Runs `variant` in precision T on `c` (training forward, then backward) and compares y, hn, cn,
// dx, dh0, dc0 and dparams with the reference under lstm_rtol(). Returns why it disagrees (the
// worst element) or std::nullopt.
template <typename T>
std::optional<std::string> check_variant(const Variant& variant, const LstmCase& c) {
    const VariantResult got = run_variant<T>(variant, c);
    const LstmOutputs want = lstm_forward(c.in);
    const LstmInputGrads want_grads = lstm_backward(c.in, c.out_grads);
    const DType dt = dtype_of<T>();
    const double fwd = lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::forward);
    const double bwd = lstm_rtol(dt, c.in.config, c.in.seq_len, Pass::backward);
    const std::optional<std::string> verdicts[] = {
        check_close("y", got.y, want.y, fwd),
        check_close("hn", got.hn, want.hn, fwd),
        check_close("cn", got.cn, want.cn, fwd),
        check_close("dx", got.dx, want_grads.dx, bwd),
        check_close("dh0", got.dh0, want_grads.dh0, bwd),
        check_close("dc0", got.dc0, want_grads.dc0, bwd),
        check_close("dparams", got.dparams, want_grads.dparams, bwd),
    };
    for (const auto& why : verdicts)
        if (why) return why;
    return std::nullopt;
}

}  // namespace lstm::reference
