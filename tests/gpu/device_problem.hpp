#pragma once

// One case of the GPU tests in device memory, so that each test file states only what it varies
// (where the scratch lies, the lengths of a call, graphs on or off) and not how a case reaches the
// device and comes back.

#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/reference/variant_check.hpp"
#include "variant_runner.hpp"

namespace lstm::test {

// A variant's workspace and reserve for `c` in `dtype`: device, the sizes the variant asks for,
// uninitialised; held for as long as repeated calls should repeat their pointers.
class VariantScratch {
public:
    VariantScratch(const Variant& v, const LstmCase& c, DType dtype) {
        const Config& cfg = c.in.config;
        buffers_.workspace_size = v.workspace_bytes(cfg, dtype, c.in.seq_len, c.in.batch);
        buffers_.reserve_size = v.reserve_bytes(cfg, dtype, c.in.seq_len, c.in.batch);
        workspace_ = Buffer(Device::cuda, buffers_.workspace_size);
        reserve_ = Buffer(Device::cuda, buffers_.reserve_size);
        buffers_.workspace = workspace_.data();
        buffers_.reserve = reserve_.data();
    }

    const reference::RunBuffers& buffers() const { return buffers_; }

private:
    Buffer workspace_, reserve_;
    reference::RunBuffers buffers_;
};

// The inputs, output gradients, outputs and gradients of one case in device memory in precision
// T, on one context. The buffers stay put, so repeated calls repeat their pointers.
template <typename T>
class DeviceProblem {
public:
    // Uploads x, params, h0, c0, dy, dhn, dcn (host double -> device T, on ctx's stream) and
    // allocates y, hn, cn, dx, dh0, dc0, dparams on the device, uninitialised.
    DeviceProblem(const LstmCase& c, cuda::Context& ctx) : c_(c), ctx_(ctx) {
        const Config& cfg = c.in.config;
        h_state_ = size_t(cfg.num_cells() * c.in.batch * cfg.state_size());
        c_state_ = size_t(cfg.num_cells() * c.in.batch * cfg.hidden_size);
        x_ = up(c.in.x);
        params_ = up(c.in.params);
        h0_ = up(c.in.h0);
        c0_ = up(c.in.c0);
        dy_ = up(c.out_grads.dy);
        dhn_ = up(c.out_grads.dhn);
        dcn_ = up(c.out_grads.dcn);
        y_ = device_elements(c.out_grads.dy.size());
        hn_ = device_elements(h_state_);
        cn_ = device_elements(c_state_);
        dh0_ = device_elements(h_state_);
        dc0_ = device_elements(c_state_);
        dx_ = device_elements(c.in.x.size());
        dparams_ = device_elements(c.in.params.size());
    }

    // Forward over the device buffers: x (T, N, I), params (P), y (T, N, D*S), h0/hn (L*D, N, S),
    // c0/cn (L*D, N, H); `lengths` host (N; empty: all T), kept by reference; `scratch` device;
    // without `training` the reserve is left out (inference). y, hn, cn are overwritten.
    ForwardArgs<T> forward_args(const std::vector<int64_t>& lengths,
                                const reference::RunBuffers& scratch, bool training) const {
        const Config& cfg = c_.in.config;
        const int64_t seq_len = c_.in.seq_len, batch = c_.in.batch;
        ForwardArgs<T> f;
        f.x = view<const T>(x_, {seq_len, batch, cfg.input_size});
        f.lengths = Span<const int64_t>(lengths.data(), int64_t(lengths.size()));
        f.h0 = state<const T>(h0_, cfg.state_size());
        f.c0 = state<const T>(c0_, cfg.hidden_size);
        f.params = view<const T>(params_, {int64_t(c_.in.params.size())});
        f.y = view<T>(y_, {seq_len, batch, cfg.output_size()});
        f.hn = state<T>(hn_, cfg.state_size());
        f.cn = state<T>(cn_, cfg.hidden_size);
        f.workspace = scratch.workspace;
        f.workspace_size = scratch.workspace_size;
        f.reserve = training ? scratch.reserve : nullptr;
        f.reserve_size = training ? scratch.reserve_size : 0;
        f.context = &ctx_;
        return f;
    }

    // Backward of the training forward_args(lengths, scratch, true), device: reads dy (T, N, D*S),
    // dhn (L*D, N, S), dcn (L*D, N, H); overwrites dx, dh0, dc0; accumulates into dparams (P).
    BackwardArgs<T> backward_args(const std::vector<int64_t>& lengths,
                                  const reference::RunBuffers& scratch, BackwardPart part) const {
        const Config& cfg = c_.in.config;
        const int64_t seq_len = c_.in.seq_len, batch = c_.in.batch;
        BackwardArgs<T> b = backward_args_from(forward_args(lengths, scratch, true));
        b.dy = view<const T>(dy_, {seq_len, batch, cfg.output_size()});
        b.dhn = state<const T>(dhn_, cfg.state_size());
        b.dcn = state<const T>(dcn_, cfg.hidden_size);
        b.dx = view<T>(dx_, {seq_len, batch, cfg.input_size});
        b.dh0 = state<T>(dh0_, cfg.state_size());
        b.dc0 = state<T>(dc0_, cfg.hidden_size);
        b.dparams = view<T>(dparams_, {int64_t(c_.in.params.size())});
        b.part = part;
        return b;
    }

    // Training forward, then backward whole or as data + weights (`split`), with dparams (device,
    // P) overwritten first by `before` (host, P) or by zeros when it is empty; waits for the
    // context and returns every output and gradient read back to the host in double.
    VariantResult train(const Variant& v, const std::vector<int64_t>& lengths,
                        const reference::RunBuffers& scratch, bool split,
                        const std::vector<double>& before = {}) {
        const size_t dparams_bytes = c_.in.params.size() * sizeof(T);
        if (before.empty()) {
            dparams_.zero(dparams_bytes, &ctx_);
        } else {
            const std::vector<T> start = cast_vector<T>(before);
            dparams_.copy_from(start.data(), Device::cpu, dparams_bytes, &ctx_);
        }
        v.forward(c_.in.config, forward_args(lengths, scratch, true));
        if (split) {
            v.backward(c_.in.config, backward_args(lengths, scratch, BackwardPart::data));
            v.backward(c_.in.config, backward_args(lengths, scratch, BackwardPart::weights));
        } else {
            v.backward(c_.in.config, backward_args(lengths, scratch, BackwardPart::all));
        }
        ctx_.synchronize();
        VariantResult r = outputs();
        r.dx = down(dx_, c_.in.x.size());
        r.dh0 = down(dh0_, h_state_);
        r.dc0 = down(dc0_, c_state_);
        r.dparams = down(dparams_, c_.in.params.size());
        return r;
    }

    // Inference forward; waits for the context and returns y, hn, cn read back to the host in
    // double.
    VariantResult infer(const Variant& v, const std::vector<int64_t>& lengths,
                        const reference::RunBuffers& scratch) {
        v.forward(c_.in.config, forward_args(lengths, scratch, false));
        ctx_.synchronize();
        return outputs();
    }

private:
    VariantResult outputs() {
        VariantResult r;
        r.y = down(y_, c_.out_grads.dy.size());
        r.hn = down(hn_, h_state_);
        r.cn = down(cn_, c_state_);
        return r;
    }

    Buffer up(const std::vector<double>& host) {
        return Buffer::upload(Device::cuda, cast_vector<T>(host), &ctx_);
    }
    static Buffer device_elements(size_t count) { return Buffer(Device::cuda, count * sizeof(T)); }
    std::vector<double> down(const Buffer& b, size_t count) {
        return cast_vector<double>(b.download<T>(count, &ctx_));
    }
    template <typename U>
    static TensorView<U> view(const Buffer& b, std::initializer_list<int64_t> shape) {
        return TensorView<U>(static_cast<U*>(b.data()), shape, Device::cuda);
    }
    // A (L*D, N, width) state, or an empty view for a state the case leaves out.
    template <typename U>
    TensorView<U> state(const Buffer& b, int64_t width) const {
        if (b.size() == 0) return TensorView<U>();
        return view<U>(b, {c_.in.config.num_cells(), c_.in.batch, width});
    }

    const LstmCase& c_;
    cuda::Context& ctx_;
    size_t h_state_ = 0, c_state_ = 0;
    Buffer x_, params_, h0_, c0_, dy_, dhn_, dcn_;
    Buffer y_, hn_, cn_, dh0_, dc0_, dx_, dparams_;
};

// Bit equality of two runs: y, hn, cn, and with `training` dx, dh0, dc0, dparams as well.
inline void check_same_bits(const VariantResult& got, const VariantResult& want, bool training) {
    CHECK(got.y == want.y);
    CHECK(got.hn == want.hn);
    CHECK(got.cn == want.cn);
    if (!training) return;
    CHECK(got.dx == want.dx);
    CHECK(got.dh0 == want.dh0);
    CHECK(got.dc0 == want.dc0);
    CHECK(got.dparams == want.dparams);
}

}  // namespace lstm::test
