#pragma once

// A fully connected layer with torch.nn.Linear's semantics (y = x W^T + b), owning its flat
// parameter and gradient buffers so that an optimizer can step them like any other buffer pair.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/error.hpp"
#include "lstm/memory.hpp"
#include "lstm/tensor.hpp"

namespace lstm::nn {

template <typename T>
class Dense {
public:
    // Layout of parameters() and gradients(): weight (out_features, in_features) row-major, then
    // bias (out_features) when `bias`; the same as PyTorch's Linear.parameters() order.
    // Parameters start as reset_parameters(0), so a fresh layer is usable and reproducible;
    // call reset_parameters with your own seed to decorrelate layers. Gradients start at zero.
    Dense(int64_t in_features, int64_t out_features, bool bias = true)
        : in_(in_features), out_(out_features), bias_(bias) {
        check(in_features >= 1, "Dense: in_features must be >= 1, got ", in_features);
        check(out_features >= 1, "Dense: out_features must be >= 1, got ", out_features);
        // Parameters and gradients, checked for overflow (a byte count past 2^64 is refused as
        // more than any machine has, before parameter_count() could wrap) and against the
        // memory the machine can give, before either is allocated.
        const uint64_t weight = MemoryRequest::bytes({out_features, in_features}, sizeof(T));
        const uint64_t bias_bytes = bias ? MemoryRequest::bytes({out_features}, sizeof(T)) : 0;
        MemoryRequest()
            .add("weight", weight)
            .add("bias", bias_bytes)
            .add("weight gradient", weight)
            .add("bias gradient", bias_bytes)
            .check([&] {
                return "Dense (in_features " + std::to_string(in_features) + ", out_features " +
                       std::to_string(out_features) + ")";
            });
        params_.assign(static_cast<size_t>(parameter_count()), T(0));
        grads_.assign(params_.size(), T(0));
        reset_parameters(0);
    }

    int64_t in_features() const { return in_; }
    int64_t out_features() const { return out_; }
    bool has_bias() const { return bias_; }
    int64_t parameter_count() const { return out_ * in_ + (bias_ ? out_ : 0); }

    // The flat buffers (host); gradients() has the layout of parameters().
    Span<T> parameters() { return {params_.data(), parameter_count()}; }
    Span<const T> parameters() const { return {params_.data(), parameter_count()}; }
    Span<T> gradients() { return {grads_.data(), parameter_count()}; }
    Span<const T> gradients() const { return {grads_.data(), parameter_count()}; }

    // Named pieces of the flat buffers: weight (out, in), bias (out); bias views are empty when
    // the layer has no bias.
    TensorView<T> weight() { return {params_.data(), {out_, in_}}; }
    TensorView<const T> weight() const { return {params_.data(), {out_, in_}}; }
    TensorView<T> bias() {
        return bias_ ? TensorView<T>{bias_ptr(params_), {out_}} : TensorView<T>{};
    }
    TensorView<const T> bias() const {
        return bias_ ? TensorView<const T>{bias_ptr(params_), {out_}} : TensorView<const T>{};
    }
    TensorView<T> weight_grad() { return {grads_.data(), {out_, in_}}; }
    TensorView<T> bias_grad() {
        return bias_ ? TensorView<T>{bias_ptr(grads_), {out_}} : TensorView<T>{};
    }
    TensorView<const T> weight_grad() const { return {grads_.data(), {out_, in_}}; }
    TensorView<const T> bias_grad() const {
        return bias_ ? TensorView<const T>{bias_ptr(grads_), {out_}} : TensorView<const T>{};
    }

    // PyTorch's default initialization: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) (the
    // kaiming_uniform_ with a = sqrt(5) that Linear uses reduces to this bound), drawn in
    // parameters() order through lstm::detail::uniform, so a seed gives the same layer everywhere.
    void reset_parameters(uint64_t seed) {
        std::mt19937_64 rng(seed);
        const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
        for (T& p : params_) p = static_cast<T>(lstm::detail::uniform(rng, -bound, bound));
    }

    // Sets every gradient to zero; backward only ever adds.
    void zero_grad() { std::fill(grads_.begin(), grads_.end(), T(0)); }

    // y = x W^T + b; x (M, in), y (M, out) overwritten, both host, row-major, not overlapping.
    void forward(TensorView<const T> x, TensorView<T> y) const {
        constexpr const char* fn = "Dense::forward";
        check(x.rank() == 2, fn, ": x must have rank 2 (M, in_features), got shape ",
              x.shape_string());
        const int64_t rows = x.size(0);
        check_shape(x, "Dense::forward: x", {rows, in_});
        check_shape(y, "Dense::forward: y", {rows, out_});
        check_host(x, fn, "x");
        check_host(y, fn, "y");
        check_data(x, fn, "x");
        check_data(y, fn, "y");
        // y is written (the bias first) while x is still read: in place would be wrong silently.
        check(!lstm::detail::overlaps(y, x), fn, ": y must not overlap x");
        check_apart_from_own(y, fn, "y");
        if (rows == 0) return;
        // Broadcasting the bias into y first lets the GEMM add onto it, saving a pass over y.
        if (bias_) {
            const T* b = bias_ptr(params_);
            for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out_, y.data() + r * out_);
        }
        kernels::cpu::gemm<T>(false, true, rows, out_, in_, T(1), x.data(), in_, params_.data(),
                              in_, bias_ ? T(1) : T(0), y.data(), out_);
    }

    // Backward of forward(x): ADDS dL/dW = dy^T x and dL/db = sum over rows of dy into
    // gradients() (the caller zeroes them, as in PyTorch); dx = dy W is overwritten when given.
    // x (M, in), dy (M, out), dx (M, in) optional (empty view = not wanted); all host, row-major;
    // dx must not overlap x or dy.
    void backward(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx = {}) {
        constexpr const char* fn = "Dense::backward";
        check(x.rank() == 2, fn, ": x must have rank 2 (M, in_features), got shape ",
              x.shape_string());
        const int64_t rows = x.size(0);
        check_shape(x, "Dense::backward: x", {rows, in_});
        check_shape(dy, "Dense::backward: dy", {rows, out_});
        if (!dx.empty()) check_shape(dx, "Dense::backward: dx", {rows, in_});
        check_host(x, fn, "x");
        check_host(dy, fn, "dy");
        if (!dx.empty()) check_host(dx, fn, "dx");
        check_data(x, fn, "x");
        check_data(dy, fn, "dy");
        // dx is written last, by a GEMM that reads dy: overlapping dy would corrupt dx silently,
        // overlapping x would overwrite an input the caller passed as const.
        check(!lstm::detail::overlaps(dx, x), fn, ": dx must not overlap x");
        check(!lstm::detail::overlaps(dx, dy), fn, ": dx must not overlap dy");
        // The weight-gradient GEMM adds into gradients() while it reads x and dy, and dx is
        // computed from the weights.
        check_apart_from_own(x, fn, "x");
        check_apart_from_own(dy, fn, "dy");
        check_apart_from_own(dx, fn, "dx");
        if (rows == 0) return;
        kernels::cpu::gemm<T>(true, false, out_, in_, rows, T(1), dy.data(), out_, x.data(), in_,
                              T(1), grads_.data(), in_);
        if (bias_) {
            T* db = bias_ptr(grads_);
            for (int64_t r = 0; r < rows; ++r) {
                const T* dy_row = dy.data() + r * out_;
                for (int64_t j = 0; j < out_; ++j) db[j] += dy_row[j];
            }
        }
        if (!dx.empty()) {
            kernels::cpu::gemm<T>(false, false, rows, in_, out_, T(1), dy.data(), out_,
                                  params_.data(), in_, T(0), dx.data(), in_);
        }
    }

private:
    template <typename Buffer>
    auto bias_ptr(Buffer& buffer) const {
        return buffer.data() + out_ * in_;
    }
    template <typename U>
    static void check_host(const TensorView<U>& view, const char* fn, const char* name) {
        check(view.device() == Device::cpu, fn, ": ", name, " is on ", to_string(view.device()),
              ", but Dense runs on cpu tensors only so far");
    }
    template <typename U>
    static void check_data(const TensorView<U>& view, const char* fn, const char* name) {
        check(view.numel() == 0 || !view.empty(), fn, ": ", name, " has no data");
    }

    template <typename U>
    void check_apart_from_own(const TensorView<U>& view, const char* fn, const char* name) const {
        const TensorView<const T> params(params_.data(), {parameter_count()});
        const TensorView<const T> grads(grads_.data(), {parameter_count()});
        lstm::detail::check_apart_from_own(view, fn, name, params, "parameters()");
        lstm::detail::check_apart_from_own(view, fn, name, grads, "gradients()");
    }

    int64_t in_, out_;
    bool bias_;
    std::vector<T> params_;
    std::vector<T> grads_;
};

// Compiled once, for float and double, in lstm_variants (lstm/templates.cpp): a program that uses
// them compiles only what the compiler chooses to inline.
extern template class Dense<float>;
extern template class Dense<double>;

}  // namespace lstm::nn
