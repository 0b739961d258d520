#pragma once

// lstm::Lstm: the owning layer training code uses. It holds parameters, gradients, outputs and
// buffers, and runs whichever registered variant was named, so the same training code runs on
// every variant.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/registry.hpp"

namespace lstm {

template <typename T>
class LstmT {
public:
    LstmT(const Config& config, std::string_view variant = "basic", Device device = Device::cpu)
        : config_(config), variant_(&find_variant(variant, device)) {
        check(device == Device::cpu, "Lstm: device ", to_string(device),
              " has no owning layer in this build yet (host buffers only)");
        variant_->require(config_, dtype_of<T>(), false);
        params_.assign(param_count(config_), T(0));
        grads_.assign(params_.size(), T(0));
        reset_parameters(0);
    }

    const Config& config() const { return config_; }
    const Variant& variant() const { return *variant_; }

    // Flat buffers in PyTorch parameters() order (see param_entries()).
    Span<T> parameters() { return Span<T>(params_); }
    Span<T> gradients() { return Span<T>(grads_); }
    Span<const T> parameters() const { return {params_.data(), int64_t(params_.size())}; }
    Span<const T> gradients() const { return {grads_.data(), int64_t(grads_.size())}; }

    // PyTorch's nn.LSTM initialisation: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)).
    void reset_parameters(uint64_t seed) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
        std::mt19937_64 rng(seed);
        for (T& p : params_) p = static_cast<T>(detail::uniform(rng, -bound, bound));
    }

    // Backward adds into the gradients (PyTorch's .grad semantics); call this between steps.
    void zero_grad() { std::fill(grads_.begin(), grads_.end(), T(0)); }

    // Training forward. x (T, N, I) host; lengths host (N) or empty; h0/c0 (L*D, N, H) or empty.
    // x, h0 and c0 must stay alive and unchanged until backward() (they are not copied).
    // Returns y (T, N, D*H), owned by the layer and valid until the next forward.
    TensorView<const T> forward(TensorView<const T> x, Span<const int64_t> lengths = {},
                                TensorView<const T> h0 = {}, TensorView<const T> c0 = {}) {
        return run(x, lengths, h0, c0, true);
    }

    // Inference forward: no reserve is written, so backward() is not allowed after it.
    TensorView<const T> infer(TensorView<const T> x, Span<const int64_t> lengths = {},
                              TensorView<const T> h0 = {}, TensorView<const T> c0 = {}) {
        return run(x, lengths, h0, c0, false);
    }

    TensorView<const T> y() const { return y_view_; }
    TensorView<const T> hn() const { return state_view(hn_); }
    TensorView<const T> cn() const { return state_view(cn_); }

    // dy (T, N, D*H) host; dhn/dcn (L*D, N, H) or empty. ADDS into gradients(); returns dx
    // (T, N, I), or an empty view when compute_dx is false (x is data, as in the first layer of
    // a model: skipping it saves a GEMM over all steps); dh0()/dc0() hold the initial-state
    // gradients afterwards.
    TensorView<const T> backward(TensorView<const T> dy, TensorView<const T> dhn = {},
                                 TensorView<const T> dcn = {}, bool compute_dx = true) {
        check(trained_, "Lstm::backward needs a training forward() first (got none, or infer())");
        const int64_t seq_len = x_.size(0), batch = x_.size(1);
        resize(dx_, seq_len * batch * config_.input_size);
        resize(dh0_, hn_.size());
        resize(dc0_, hn_.size());
        BackwardArgs<T> a;
        a.x = x_;
        a.lengths = Span<const int64_t>(lengths_);
        a.h0 = h0_;
        a.c0 = c0_;
        a.params = view_of(params_);
        a.y = y_view_;
        a.dy = dy;
        a.dhn = dhn;
        a.dcn = dcn;
        if (compute_dx) a.dx = TensorView<T>(dx_.data(), {seq_len, batch, config_.input_size});
        a.dh0 = state_view_mut(dh0_, batch);
        a.dc0 = state_view_mut(dc0_, batch);
        a.dparams = TensorView<T>(grads_.data(), {int64_t(grads_.size())});
        a.workspace = workspace_.data();
        a.workspace_size = workspace_.capacity();
        a.reserve = reserve_.data();
        a.reserve_size = reserve_.capacity();
        variant_->backward(config_, a);
        return a.dx;  // empty unless compute_dx
    }

    TensorView<const T> dh0() const { return state_view(dh0_); }
    TensorView<const T> dc0() const { return state_view(dc0_); }

    // Bytes of the buffers the last forward needed (reserve + workspace of the training step).
    size_t workspace_bytes() const { return workspace_need_; }
    size_t reserve_bytes() const { return reserve_need_; }

private:
    TensorView<const T> run(TensorView<const T> x, Span<const int64_t> lengths,
                            TensorView<const T> h0, TensorView<const T> c0, bool training) {
        check(x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", x.shape_string());
        const int64_t seq_len = x.size(0), batch = x.size(1);
        const DType dtype = dtype_of<T>();
        workspace_need_ = variant_->workspace_bytes(config_, dtype, seq_len, batch);
        reserve_need_ = training ? variant_->reserve_bytes(config_, dtype, seq_len, batch) : 0;
        resize(y_, seq_len * batch * config_.output_size());
        resize(hn_, config_.num_cells() * batch * config_.hidden_size);
        resize(cn_, hn_.size());
        ForwardArgs<T> a;
        a.x = x;
        a.lengths = lengths;
        a.h0 = h0;
        a.c0 = c0;
        a.params = view_of(params_);
        a.y = TensorView<T>(y_.data(), {seq_len, batch, config_.output_size()});
        a.hn = state_view_mut(hn_, batch);
        a.cn = state_view_mut(cn_, batch);
        a.workspace = workspace_.reserve(workspace_need_);
        a.workspace_size = workspace_.capacity();
        a.reserve = training ? reserve_.reserve(reserve_need_) : nullptr;
        a.reserve_size = training ? reserve_.capacity() : 0;
        trained_ = false;
        variant_->forward(config_, a);
        trained_ = training;
        x_ = x;
        lengths_.assign(lengths.begin(), lengths.end());
        h0_ = h0;
        c0_ = c0;
        batch_ = batch;
        y_view_ = a.y;
        return y_view_;
    }

    static void resize(std::vector<T>& v, size_t n) {
        if (v.size() != n) v.resize(n);
    }
    static TensorView<const T> view_of(const std::vector<T>& v) {
        return TensorView<const T>(v.data(), {int64_t(v.size())});
    }
    TensorView<T> state_view_mut(std::vector<T>& v, int64_t batch) {
        return TensorView<T>(v.data(), {config_.num_cells(), batch, config_.hidden_size});
    }
    TensorView<const T> state_view(const std::vector<T>& v) const {
        return TensorView<const T>(v.data(), {config_.num_cells(), batch_, config_.hidden_size});
    }

    Config config_;
    const Variant* variant_;
    std::vector<T> params_, grads_;
    std::vector<T> y_, hn_, cn_, dx_, dh0_, dc0_;
    std::vector<int64_t> lengths_;
    detail::AlignedBuffer workspace_, reserve_;
    size_t workspace_need_ = 0, reserve_need_ = 0;
    TensorView<const T> x_, h0_, c0_, y_view_;
    int64_t batch_ = 0;
    bool trained_ = false;
};

using Lstm = LstmT<float>;

}  // namespace lstm
