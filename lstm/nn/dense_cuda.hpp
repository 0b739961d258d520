#pragma once

// nn::DenseCuda: torch.nn.Linear (y = x W^T + b) with its parameters, gradients and tensors in
// CUDA device memory, every call queued on one cuda::Context's stream. Same flat layout as
// nn::Dense (weight (out, in) row-major, then bias (out)), so a host Dense initialises it and
// both compare element by element. The GEMMs are cuBLAS calls in FP32 (FP64 for double) math,
// defined in dense_cuda.cpp (lstm_cuda, LSTM_WITH_CUDA builds only). No CUDA header.

#include <cstdint>

#include "lstm/buffer.hpp"
#include "lstm/cuda/link.hpp"
#include "lstm/error.hpp"
#include "lstm/memory.hpp"
#include "lstm/tensor.hpp"

namespace lstm::cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace lstm::cuda

namespace lstm::nn {

namespace detail {

// y (rows, out) = x (rows, in) W^T, plus bias (out) in every row when bias is non-null; W (out,
// in); all device, row-major; y overwritten. Queued on the context's stream.
template <typename T>
LSTM_CUDA_ENTRY void dense_forward_cuda(cuda::Context& context, int64_t rows, int64_t in,
                                        int64_t out, const T* x, const T* weight, const T* bias,
                                        T* y);

// ADDS dweight (out, in) += dy^T x and, when dbias is non-null, dbias (out) += dy^T ones, with
// ones (rows) a device vector of ones; dx (rows, in) = dy W overwritten when non-null. x (rows,
// in), dy (rows, out), W (out, in); all device, row-major. Queued on the context's stream.
template <typename T>
LSTM_CUDA_ENTRY void dense_backward_cuda(cuda::Context& context, int64_t rows, int64_t in,
                                         int64_t out, const T* x, const T* dy, const T* weight,
                                         T* dweight, T* dbias, const T* ones, T* dx);

// v (count, device) overwritten with value, queued on the context's stream.
template <typename T>
LSTM_CUDA_ENTRY void fill_cuda(cuda::Context& context, int64_t count, T value, T* v);

}  // namespace detail

template <typename T>
class DenseCuda {
public:
    // Parameters start at zero: load them from a host nn::Dense (load_parameters) so that both
    // start from PyTorch's initialisation. `context` must outlive the layer.
    DenseCuda(int64_t in_features, int64_t out_features, bool bias, cuda::Context& context)
        : in_(in_features),
          out_(out_features),
          bias_(bias),
          context_(&context),
          params_(Device::cuda),
          grads_(Device::cuda),
          ones_(Device::cuda) {
        check(in_features >= 1, "DenseCuda: in_features must be >= 1, got ", in_features);
        check(out_features >= 1, "DenseCuda: out_features must be >= 1, got ", out_features);
        // Parameters and gradients, checked for overflow before either is allocated: a byte
        // count past 2^64 would wrap parameter_count() into a small or negative size. Device
        // memory is not compared with the host's (MemoryRequest::check); cudaMalloc's own
        // failure reports a size that fits in 64 bits but not on the device.
        const uint64_t weight = MemoryRequest::bytes({out_features, in_features}, sizeof(T));
        const uint64_t bias_bytes = bias ? MemoryRequest::bytes({out_features}, sizeof(T)) : 0;
        const uint64_t total = MemoryRequest()
                                   .add("weight", weight)
                                   .add("bias", bias_bytes)
                                   .add("weight gradient", weight)
                                   .add("bias gradient", bias_bytes)
                                   .total();
        if (total == kUnknownMemory)
            fail_as<OutOfMemory>("DenseCuda (in_features ", in_features, ", out_features ",
                                 out_features,
                                 "): its parameters and gradients need more than 2^64 bytes, "
                                 "more than any device has");
        params_.reserve(bytes_of(parameter_count()));
        grads_.reserve(bytes_of(parameter_count()));
        params_.zero(bytes_of(parameter_count()), context_);
        zero_grad();
    }

    int64_t in_features() const { return in_; }
    int64_t out_features() const { return out_; }
    bool has_bias() const { return bias_; }
    int64_t parameter_count() const { return out_ * in_ + (bias_ ? out_ : 0); }

    // The flat device buffers (parameter_count()), nn::Dense's layout.
    TensorView<T> parameters() { return {params_.template as<T>(), {parameter_count()}, kDev}; }
    TensorView<T> gradients() { return {grads_.template as<T>(), {parameter_count()}, kDev}; }
    TensorView<const T> parameters() const {
        return {params_.template as<T>(), {parameter_count()}, kDev};
    }
    TensorView<const T> gradients() const {
        return {grads_.template as<T>(), {parameter_count()}, kDev};
    }

    // Copies between the flat buffers and host memory (parameter_count() elements); they wait
    // for the context's queued work.
    void load_parameters(Span<const T> host) {
        check_count("load_parameters", host.size);
        params_.copy_from(host.data, Device::cpu, bytes_of(parameter_count()), context_);
    }
    void store_parameters(Span<T> host) const {
        check_count("store_parameters", host.size);
        params_.copy_to(host.data, Device::cpu, bytes_of(parameter_count()), context_);
    }
    void store_gradients(Span<T> host) const {
        check_count("store_gradients", host.size);
        grads_.copy_to(host.data, Device::cpu, bytes_of(parameter_count()), context_);
    }

    // Sets every gradient to zero (queued); backward only ever adds.
    void zero_grad() { grads_.zero(bytes_of(parameter_count()), context_); }

    // Sizes the helper the bias gradient needs for up to `rows` rows, so that backward() over as
    // many rows allocates nothing; forward() calls it too.
    void reserve_rows(int64_t rows) {
        if (!bias_ || rows <= ones_rows_) return;
        ones_.reserve(bytes_of(rows));
        detail::fill_cuda<T>(*context_, rows, T(1), ones_.template as<T>());
        ones_rows_ = rows;
    }

    // y = x W^T + b; x (M, in), y (M, out) overwritten; both cuda, row-major, not overlapping.
    void forward(TensorView<const T> x, TensorView<T> y) {
        constexpr const char* fn = "DenseCuda::forward";
        check(x.rank() == 2, fn, ": x must have rank 2 (M, in_features), got shape ",
              x.shape_string());
        const int64_t rows = x.size(0);
        check_shape(x, "DenseCuda::forward: x", {rows, in_});
        check_shape(y, "DenseCuda::forward: y", {rows, out_});
        check_on_device(x, fn, "x");
        check_on_device(y, fn, "y");
        // y is written (the bias first) while x is still read: in place would be wrong silently.
        check(!lstm::detail::overlaps(y, x), fn, ": y must not overlap x");
        check_apart_from_own(y, fn, "y");
        reserve_rows(rows);
        if (rows == 0) return;
        const T* w = params_.template as<T>();
        detail::dense_forward_cuda<T>(*context_, rows, in_, out_, x.data(), w,
                                      bias_ ? w + out_ * in_ : nullptr, y.data());
    }

    // Backward of forward(x): ADDS dL/dW = dy^T x and dL/db = the column sums of dy into
    // gradients(); dx = dy W is overwritten when given. x (M, in), dy (M, out), dx (M, in)
    // optional; all cuda, row-major; dx must not overlap x or dy.
    void backward(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx = {}) {
        constexpr const char* fn = "DenseCuda::backward";
        check(x.rank() == 2, fn, ": x must have rank 2 (M, in_features), got shape ",
              x.shape_string());
        const int64_t rows = x.size(0);
        check_shape(x, "DenseCuda::backward: x", {rows, in_});
        check_shape(dy, "DenseCuda::backward: dy", {rows, out_});
        if (!dx.empty()) check_shape(dx, "DenseCuda::backward: dx", {rows, in_});
        check_on_device(x, fn, "x");
        check_on_device(dy, fn, "dy");
        if (!dx.empty()) check_on_device(dx, fn, "dx");
        // dx is written last, by a GEMM that reads dy: overlapping dy would corrupt dx silently,
        // overlapping x would overwrite an input the caller passed as const.
        check(!lstm::detail::overlaps(dx, x), fn, ": dx must not overlap x");
        check(!lstm::detail::overlaps(dx, dy), fn, ": dx must not overlap dy");
        // The weight-gradient GEMM adds into gradients() while it reads x and dy, and dx is
        // computed from the weights.
        check_apart_from_own(x, fn, "x");
        check_apart_from_own(dy, fn, "dy");
        check_apart_from_own(dx, fn, "dx");
        reserve_rows(rows);
        if (rows == 0) return;
        T* g = grads_.template as<T>();
        detail::dense_backward_cuda<T>(*context_, rows, in_, out_, x.data(), dy.data(),
                                       params_.template as<T>(), g,
                                       bias_ ? g + out_ * in_ : nullptr, ones_.template as<T>(),
                                       dx.empty() ? nullptr : dx.data());
    }

private:
    static constexpr Device kDev = Device::cuda;
    template <typename U>
    void check_apart_from_own(const TensorView<U>& view, const char* fn, const char* name) const {
        lstm::detail::check_apart_from_own(view, fn, name, parameters(), "parameters()");
        lstm::detail::check_apart_from_own(view, fn, name, gradients(), "gradients()");
    }
    static size_t bytes_of(int64_t elements) { return static_cast<size_t>(elements) * sizeof(T); }
    void check_count(const char* fn, int64_t size) const {
        check(size == parameter_count(), "DenseCuda::", fn, ": the host buffer has ", size,
              " elements, expected parameter_count() = ", parameter_count());
    }
    template <typename U>
    static void check_on_device(const TensorView<U>& view, const char* fn, const char* name) {
        check(view.device() == Device::cuda, fn, ": ", name, " is on ", to_string(view.device()),
              ", but DenseCuda runs on cuda tensors");
        check(view.numel() == 0 || !view.empty(), fn, ": ", name, " has no data");
    }

    int64_t in_, out_;
    bool bias_;
    cuda::Context* context_;
    Buffer params_, grads_;
    Buffer ones_;  // (rows) ones: the bias gradient is the GEMV dy^T ones
    int64_t ones_rows_ = 0;
};

}  // namespace lstm::nn
