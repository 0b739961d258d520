#pragma once

// lstm::Lstm: the owning layer training code uses. It holds parameters, gradients, outputs and
// buffers, and runs whichever registered variant was named, so the same training code runs on
// every variant. On Device::cuda every buffer is device memory (lstm::Buffer) and every call is
// queued on one cuda::Context's stream, owned by the layer or borrowed from the caller; nothing of
// it is global.

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/memory.hpp"
#include "lstm/registry.hpp"

#if LSTM_WITH_CUDA
#include <memory>

#include "lstm/cuda/context.hpp"
#endif

namespace lstm {

// A flat buffer of a layer (parameters or gradients, in parameters() order), tagged with the
// memory space it lives in. On the host it reads like Span<T> (iteration, indexing, conversion to
// Span); device memory cannot be read on the host, so those accessors throw for cuda: hand view()
// to device-aware code, or copy with Lstm::store_parameters() / store_gradients().
template <typename T>
struct FlatSpan {
    T* data = nullptr;
    int64_t size = 0;
    Device device = Device::cpu;

    bool empty() const { return size == 0; }
    T* begin() const { return host_data("begin()"); }
    T* end() const { return host_data("end()") + size; }
    T& operator[](int64_t i) const { return host_data("operator[]")[i]; }
    // The buffer as a rank-1 view (size) tagged with its device.
    TensorView<T> view() const { return TensorView<T>(data, {size}, device); }

    template <typename U,
              typename = std::enable_if_t<std::is_same_v<U, T> || std::is_same_v<U, const T>>>
    operator Span<U>() const {  // NOLINT: host buffers stay usable where a Span was expected
        return {host_data("conversion to Span"), size};
    }
    template <typename U = T, typename = std::enable_if_t<!std::is_const_v<U>>>
    operator FlatSpan<const U>() const {  // NOLINT: read-only views convert freely
        return {data, size, device};
    }

private:
    T* host_data(const char* what) const {
        check(device == Device::cpu, "FlatSpan::", what, ": the buffer lives on ",
              to_string(device),
              " and cannot be read on the host; use view() with device code "
              "or copy it with Lstm::store_parameters() / store_gradients()");
        return data;
    }
};

template <typename T>
class LstmT {
public:
    // A layer on `device`. A cuda layer creates and owns its cuda::Context (device 0).
    LstmT(const Config& config, std::string_view variant = "basic", Device device = Device::cpu)
        : LstmT(config, find_variant(variant, device), nullptr) {}

    // A cuda layer whose calls are queued on the caller's context (which must outlive the
    // layer), so that several layers and the rest of a model share one stream and its handles.
    LstmT(const Config& config, std::string_view variant, cuda::Context& context)
        : LstmT(config, find_variant(variant, Device::cuda), &context) {}

    const Config& config() const { return config_; }
    const Variant& variant() const { return *variant_; }
    Device device() const { return device_; }
    // The context every call is queued on; null on the host.
    cuda::Context* context() const { return context_; }

    // Flat buffers in PyTorch parameters() order (see param_entries()), on device().
    FlatSpan<T> parameters() { return {params_.template as<T>(), count(), device_}; }
    FlatSpan<T> gradients() { return {grads_.template as<T>(), count(), device_}; }
    FlatSpan<const T> parameters() const { return {params_.template as<T>(), count(), device_}; }
    FlatSpan<const T> gradients() const { return {grads_.template as<T>(), count(), device_}; }

    // Copies between the flat buffers and host memory (param_count(config) elements), whatever
    // device() is; they wait for the context's queued work.
    void load_parameters(Span<const T> host) {
        check_host_count("load_parameters", host.size);
        params_.copy_from(host.data, Device::cpu, bytes_of(count()), context_);
    }
    void store_parameters(Span<T> host) const {
        check_host_count("store_parameters", host.size);
        params_.copy_to(host.data, Device::cpu, bytes_of(count()), context_);
    }
    void store_gradients(Span<T> host) const {
        check_host_count("store_gradients", host.size);
        grads_.copy_to(host.data, Device::cpu, bytes_of(count()), context_);
    }

    // PyTorch's nn.LSTM initialisation: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)),
    // drawn on the host in parameters() order, so a seed gives the same layer on every device.
    void reset_parameters(uint64_t seed) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
        std::mt19937_64 rng(seed);
        if (device_ == Device::cpu) {
            for (T& p : parameters()) p = static_cast<T>(detail::uniform(rng, -bound, bound));
            return;
        }
        std::vector<T> host(static_cast<size_t>(count()));
        for (T& p : host) p = static_cast<T>(detail::uniform(rng, -bound, bound));
        load_parameters(Span<const T>(host));
    }

    // Backward adds into the gradients (PyTorch's .grad semantics); call this between steps. On
    // cuda it is queued on the context's stream.
    void zero_grad() { grads_.zero(bytes_of(count()), context_); }

    // Training forward. x (T, N, I) on device(); lengths host (N) or empty; h0/c0 (L*D, N, H) on
    // device() or empty. x, h0 and c0 must stay alive and unchanged until backward() (they are
    // not copied). Returns y (T, N, D*H) on device(), owned by the layer and valid until the next
    // forward. On cuda the work is queued on context() and not waited for.
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

    // dy (T, N, D*H) on device(); dhn/dcn (L*D, N, H) on device() or empty. ADDS into
    // gradients(); returns dx (T, N, I) on device(), or an empty view when compute_dx is false
    // (x is data, as in the first layer of a model: skipping it saves a GEMM over all steps);
    // dh0()/dc0() hold the initial-state gradients afterwards.
    TensorView<const T> backward(TensorView<const T> dy, TensorView<const T> dhn = {},
                                 TensorView<const T> dcn = {}, bool compute_dx = true) {
        check(trained_, "Lstm::backward needs a training forward() first (got none, or infer())");
        const int64_t seq_len = x_.size(0), batch = x_.size(1);
        const int64_t state_elems = config_.num_cells() * batch * config_.hidden_size;
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("dx", bytes_of({seq_len, batch, config_.input_size}), dx_.size())
                .add("dh0", bytes_of({state_elems}), dh0_.size())
                .add("dc0", bytes_of({state_elems}), dc0_.size())
                .check([&] { return describe("Lstm::backward", seq_len, batch); });
        dx_.reserve(bytes_of(seq_len * batch * config_.input_size));
        dh0_.reserve(bytes_of(state_elems));
        dc0_.reserve(bytes_of(state_elems));
        BackwardArgs<T> a;
        a.x = x_;
        a.lengths = Span<const int64_t>(lengths_);
        a.h0 = h0_;
        a.c0 = c0_;
        a.params = parameters().view();
        a.y = y_view_;
        a.dy = dy;
        a.dhn = dhn;
        a.dcn = dcn;
        if (compute_dx)
            a.dx =
                TensorView<T>(dx_.template as<T>(), {seq_len, batch, config_.input_size}, device_);
        a.dh0 = state_view_mut(dh0_, batch);
        a.dc0 = state_view_mut(dc0_, batch);
        a.dparams = gradients().view();
        a.workspace = workspace_.data();
        a.workspace_size = workspace_.size();
        a.reserve = reserve_.data();
        a.reserve_size = reserve_.size();
        a.context = context_;
        variant_->backward(config_, a);
        return a.dx;  // empty unless compute_dx
    }

    TensorView<const T> dh0() const { return state_view(dh0_); }
    TensorView<const T> dc0() const { return state_view(dc0_); }

    // Bytes of the buffers the last forward needed (reserve + workspace of the training step).
    size_t workspace_bytes() const { return workspace_need_; }
    size_t reserve_bytes() const { return reserve_need_; }

private:
    LstmT(const Config& config, const Variant& variant, cuda::Context* borrowed)
        : config_(config),
          variant_(&variant),
          device_(variant.device()),
          context_(borrowed),
          params_(device_),
          grads_(device_),
          y_(device_),
          hn_(device_),
          cn_(device_),
          dx_(device_),
          dh0_(device_),
          dc0_(device_),
          workspace_(device_),
          reserve_(device_) {
        variant_->require(config_, dtype_of<T>(), false);
        if (device_ == Device::cuda) {
#if LSTM_WITH_CUDA
            if (context_ == nullptr) {
                owned_context_ = std::make_unique<cuda::Context>();
                context_ = owned_context_.get();
            }
#else
            fail_as<Unsupported>(
                "Lstm on device cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
        }
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("parameters", bytes_of({count()}))
                .add("gradients", bytes_of({count()}))
                .check([&] { return "Lstm (" + std::to_string(count()) + " parameters)"; });
        params_.reserve(bytes_of(count()));
        grads_.reserve(bytes_of(count()));
        zero_grad();
        reset_parameters(0);
    }

    TensorView<const T> run(TensorView<const T> x, Span<const int64_t> lengths,
                            TensorView<const T> h0, TensorView<const T> c0, bool training) {
        check(x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", x.shape_string());
        const int64_t seq_len = x.size(0), batch = x.size(1);
        const DType dtype = dtype_of<T>();
        workspace_need_ = variant_->workspace_bytes(config_, dtype, seq_len, batch);
        reserve_need_ = training ? variant_->reserve_bytes(config_, dtype, seq_len, batch) : 0;
        const int64_t state_elems = config_.num_cells() * batch * config_.hidden_size;
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("y", bytes_of({seq_len, batch, config_.output_size()}), y_.size())
                .add("hn", bytes_of({state_elems}), hn_.size())
                .add("cn", bytes_of({state_elems}), cn_.size())
                .add("workspace", workspace_need_, workspace_.size())
                .add("reserve", reserve_need_, reserve_.size())
                .check([&] {
                    return describe(training ? "Lstm::forward" : "Lstm::infer", seq_len, batch);
                });
        y_.reserve(bytes_of(seq_len * batch * config_.output_size()));
        hn_.reserve(bytes_of(state_elems));
        cn_.reserve(bytes_of(state_elems));
        ForwardArgs<T> a;
        a.x = x;
        a.lengths = lengths;
        a.h0 = h0;
        a.c0 = c0;
        a.params = parameters().view();
        a.y = TensorView<T>(y_.template as<T>(), {seq_len, batch, config_.output_size()}, device_);
        a.hn = state_view_mut(hn_, batch);
        a.cn = state_view_mut(cn_, batch);
        a.workspace = workspace_.reserve(workspace_need_);
        a.workspace_size = workspace_.size();
        a.reserve = training ? reserve_.reserve(reserve_need_) : nullptr;
        a.reserve_size = training ? reserve_.size() : 0;
        a.context = context_;
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

    int64_t count() const { return param_count(config_); }
    static size_t bytes_of(int64_t elements) { return static_cast<size_t>(elements) * sizeof(T); }
    // The same for a product of sizes, kUnknownMemory on overflow (for MemoryRequest).
    static uint64_t bytes_of(std::initializer_list<int64_t> sizes) {
        return MemoryRequest::bytes(sizes, sizeof(T));
    }
    // "Lstm::forward (fused, T 100, N 32, H 256)", naming a call in a memory error.
    std::string describe(const char* call, int64_t seq_len, int64_t batch) const {
        return std::string(call) + " (" + variant_->name() + ", T " + std::to_string(seq_len) +
               ", N " + std::to_string(batch) + ", H " + std::to_string(config_.hidden_size) + ")";
    }
    void check_host_count(const char* fn, int64_t size) const {
        check(size == count(), "Lstm::", fn, ": the host buffer has ", size,
              " elements, expected param_count(config) = ", count());
    }
    TensorView<T> state_view_mut(Buffer& b, int64_t batch) {
        return TensorView<T>(b.template as<T>(), {config_.num_cells(), batch, config_.hidden_size},
                             device_);
    }
    TensorView<const T> state_view(const Buffer& b) const {
        return TensorView<const T>(b.template as<T>(),
                                   {config_.num_cells(), batch_, config_.hidden_size}, device_);
    }

    Config config_;
    const Variant* variant_;
    Device device_;
    cuda::Context* context_;  // the owned or the borrowed one; null on the host
#if LSTM_WITH_CUDA
    // Declared before the buffers, so it is destroyed after them.
    std::unique_ptr<cuda::Context> owned_context_;
#endif
    Buffer params_, grads_;
    Buffer y_, hn_, cn_, dx_, dh0_, dc0_;
    Buffer workspace_, reserve_;
    std::vector<int64_t> lengths_;
    size_t workspace_need_ = 0, reserve_need_ = 0;
    TensorView<const T> x_, h0_, c0_, y_view_;
    int64_t batch_ = 0;
    bool trained_ = false;
};

using Lstm = LstmT<float>;

}  // namespace lstm
