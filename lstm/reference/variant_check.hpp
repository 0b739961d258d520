#pragma once

// Runs any registered variant on a problem given in double and returns everything in double, so
// the tests, the bench's pre-check and users compare a variant with the reference element by
// element (lstm/reference/tolerance.hpp has the rule).

#include <cstdint>
#include <limits>
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

// Where a run's scratch lives (sized by the code under test; host memory for run_case_parts).
struct RunBuffers {
    void* workspace = nullptr;
    size_t workspace_size = 0;
    void* reserve = nullptr;
    size_t reserve_size = 0;
};

// Runs anything with the variant call signature on `c` in precision T: forward(ForwardArgs<T>)
// (a training forward; inference when `parts` is empty, then only y, hn, cn come back), then
// backward(BackwardArgs<T>) once per entry of `parts`, all with the same arguments and reserve.
// dparams starts as `dparams_before` (or zeros); a data call gets an empty dparams view unless
// `data_sees_dparams` (the interface allows both; the data part must not touch it either way).
// Every output starts as NaN, so a call that should write an element and does not shows up in
// any comparison. Used for registered variants (run_variant_parts) and for the CUDA loop run on
// a host backend in the CPU tests.
template <typename T, typename Forward, typename Backward>
VariantResult run_case_parts(const LstmCase& c, const RunBuffers& buffers,
                             const std::vector<BackwardPart>& parts, Forward&& forward,
                             Backward&& backward, const std::vector<double>& dparams_before = {},
                             bool data_sees_dparams = false) {
    const Config& cfg = c.in.config;
    const int64_t seq_len = c.in.seq_len, batch = c.in.batch;
    const int64_t cells = cfg.num_cells(), hidden = cfg.hidden_size, hsize = cfg.state_size();
    auto x = detail::cast_all<T>(c.in.x);
    auto params = detail::cast_all<T>(c.in.params);
    auto h0 = detail::cast_all<T>(c.in.h0), c0 = detail::cast_all<T>(c.in.c0);
    auto dy = detail::cast_all<T>(c.out_grads.dy);
    auto dhn = detail::cast_all<T>(c.out_grads.dhn), dcn = detail::cast_all<T>(c.out_grads.dcn);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    const size_t h_state = static_cast<size_t>(cells * batch * hsize);
    const size_t c_state = static_cast<size_t>(cells * batch * hidden);
    std::vector<T> y(static_cast<size_t>(seq_len * batch * cfg.output_size()), nan),
        hn(h_state, nan), cn(c_state, nan), dx(x.size(), nan), dh0(h_state, nan), dc0(c_state, nan);
    std::vector<T> dparams = dparams_before.empty() ? std::vector<T>(params.size(), T(0))
                                                    : detail::cast_all<T>(dparams_before);
    const bool training = !parts.empty();

    // h-like states are (L*D, N, S), c-like ones (L*D, N, H).
    auto h_view = [&](std::vector<T>& v) {
        return v.empty() ? TensorView<T>() : TensorView<T>(v.data(), {cells, batch, hsize});
    };
    auto c_view = [&](std::vector<T>& v) {
        return v.empty() ? TensorView<T>() : TensorView<T>(v.data(), {cells, batch, hidden});
    };
    ForwardArgs<T> f;
    f.x = TensorView<const T>(x.data(), {seq_len, batch, cfg.input_size});
    f.lengths = Span<const int64_t>(c.in.lengths.data(), int64_t(c.in.lengths.size()));
    f.h0 = h_view(h0);
    f.c0 = c_view(c0);
    f.params = TensorView<const T>(params.data(), {int64_t(params.size())});
    f.y = TensorView<T>(y.data(), {seq_len, batch, cfg.output_size()});
    f.hn = h_view(hn);
    f.cn = c_view(cn);
    f.workspace = buffers.workspace;
    f.workspace_size = buffers.workspace_size;
    f.reserve = training ? buffers.reserve : nullptr;
    f.reserve_size = training ? buffers.reserve_size : 0;
    forward(f);

    VariantResult r;
    r.y = detail::cast_all<double>(y);
    r.hn = detail::cast_all<double>(hn);
    r.cn = detail::cast_all<double>(cn);
    if (!training) return r;

    // Only reached for training, where f carries the whole reserve.
    BackwardArgs<T> b = backward_args_from(f);
    b.dy = TensorView<const T>(dy.data(), {seq_len, batch, cfg.output_size()});
    b.dhn = h_view(dhn);
    b.dcn = c_view(dcn);
    b.dx = TensorView<T>(dx.data(), {seq_len, batch, cfg.input_size});
    b.dh0 = h_view(dh0);
    b.dc0 = c_view(dc0);
    for (BackwardPart part : parts) {
        b.part = part;
        const bool with_dparams = part != BackwardPart::data || data_sees_dparams;
        b.dparams = with_dparams ? TensorView<T>(dparams.data(), {int64_t(dparams.size())})
                                 : TensorView<T>();
        backward(b);
    }
    r.dx = detail::cast_all<double>(dx);
    r.dh0 = detail::cast_all<double>(dh0);
    r.dc0 = detail::cast_all<double>(dc0);
    r.dparams = detail::cast_all<double>(dparams);
    return r;
}

// Training forward of `variant` in precision T on `c`, then one backward call per entry of
// `parts` (see run_case_parts), with a workspace and reserve of the sizes the variant asks for.
template <typename T>
VariantResult run_variant_parts(const Variant& variant, const LstmCase& c,
                                const std::vector<BackwardPart>& parts,
                                const std::vector<double>& dparams_before = {},
                                bool data_sees_dparams = false) {
    const Config& cfg = c.in.config;
    const DType dtype = dtype_of<T>();
    lstm::detail::AlignedBuffer workspace, reserve;
    RunBuffers buffers;
    buffers.workspace_size = variant.workspace_bytes(cfg, dtype, c.in.seq_len, c.in.batch);
    buffers.reserve_size = variant.reserve_bytes(cfg, dtype, c.in.seq_len, c.in.batch);
    buffers.workspace = workspace.reserve(buffers.workspace_size);
    buffers.reserve = reserve.reserve(buffers.reserve_size);
    return run_case_parts<T>(
        c, buffers, parts, [&](const ForwardArgs<T>& f) { variant.forward(cfg, f); },
        [&](const BackwardArgs<T>& b) { variant.backward(cfg, b); }, dparams_before,
        data_sees_dparams);
}

// Runs training forward then one whole backward (BackwardPart::all) of `variant` in precision T.
// dparams starts as `dparams_before` (to observe accumulation) or zeros.
template <typename T>
VariantResult run_variant(const Variant& variant, const LstmCase& c,
                          const std::vector<double>& dparams_before = {}) {
    return run_variant_parts<T>(variant, c, {BackwardPart::all}, dparams_before);
}

// Compares `got` with the reference under lstm_rtol(); `label` prefixes the verdict. Returns why
// it disagrees (the worst element) or std::nullopt.
template <typename T>
std::optional<std::string> check_result(const VariantResult& got, const LstmCase& c,
                                        const LstmOutputs& want, const LstmInputGrads& want_grads,
                                        const std::string& label) {
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
        if (why) return label + *why;
    return std::nullopt;
}

// Runs `variant` in precision T on `c` (training forward, then backward) and compares y, hn, cn,
// dx, dh0, dc0 and dparams with the reference under lstm_rtol(). Returns why it disagrees (the
// worst element) or std::nullopt.
template <typename T>
std::optional<std::string> check_variant(const Variant& variant, const LstmCase& c) {
    return check_result<T>(run_variant<T>(variant, c), c, lstm_forward(c.in),
                           lstm_backward(c.in, c.out_grads), "");
}

}  // namespace lstm::reference
