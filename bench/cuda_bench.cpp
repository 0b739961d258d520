#include "cuda_bench.hpp"

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "lstm/buffer.hpp"
#include "reference_check.hpp"

#if LSTM_WITH_CUDA
#include <cuda_runtime.h>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm::bench {

std::optional<std::string> why_device_unavailable(const Variant& variant) {
    if (variant.device() == Device::cpu) return std::nullopt;
#if LSTM_WITH_CUDA
    if (cuda::device_available()) return std::nullopt;
    return std::string("no CUDA device visible: the '") + variant.name() +
           "' variant is compiled in, but this process sees no GPU (driver or device missing)";
#else
    return std::string("no CUDA device visible: this build has no CUDA back-end");
#endif
}

// --------------------------------------------------------------------------------------------
// StepTimer
// --------------------------------------------------------------------------------------------

#if LSTM_WITH_CUDA

namespace {

void check_cuda(cudaError_t status, const char* what) {
    check(status == cudaSuccess, "lstm_bench: ", what, " failed: ", cudaGetErrorString(status));
}

cudaStream_t stream_of(cuda::Context* context) {
    return static_cast<cudaStream_t>(context->stream());
}

}  // namespace

StepTimer::StepTimer(cuda::Context* context) : context_(context) {
    if (context_ == nullptr) return;
    cudaEvent_t a = nullptr, b = nullptr;
    check_cuda(cudaEventCreate(&a), "cudaEventCreate");
    check_cuda(cudaEventCreate(&b), "cudaEventCreate");
    start_ = a;
    stop_ = b;
}

StepTimer::~StepTimer() {
    if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
    if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void StepTimer::start() {
    if (context_ == nullptr) return;
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), stream_of(context_)),
               "cudaEventRecord");
}

void StepTimer::stop(benchmark::State& state) {
    if (context_ == nullptr) return;
    const auto stop = static_cast<cudaEvent_t>(stop_);
    check_cuda(cudaEventRecord(stop, stream_of(context_)), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), stop),
               "cudaEventElapsedTime");
    constexpr double kSecondsPerMs = 1e-3;
    state.SetIterationTime(static_cast<double>(ms) * kSecondsPerMs);
}

#else

StepTimer::StepTimer(cuda::Context* context) : context_(context) {
    check(context == nullptr, "StepTimer: a CUDA context in a build without CUDA");
}
StepTimer::~StepTimer() = default;
void StepTimer::start() {}
void StepTimer::stop(benchmark::State&) {}

#endif

// --------------------------------------------------------------------------------------------
// The reference check through device buffers
// --------------------------------------------------------------------------------------------

#if LSTM_WITH_CUDA

namespace {

// A host-facing stand-in for a cuda variant: the Variant interface on host tensors, each call
// copying its inputs to device buffers, running the cuda variant there and copying the outputs
// back. The checks written for host variants (reference::check_variant and its split form, via
// check_against_reference) then run a cuda variant unchanged. A checking tool: it allocates,
// and keeps the device reserve between forward and backward itself (the host reserve it asks
// for is a token, so that backward sees a training forward).
class DeviceProxy final : public Variant {
public:
    explicit DeviceProxy(const Variant& inner) : inner_(inner) {}

    const char* name() const override { return inner_.name(); }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config& config, DType dtype) const override {
        return inner_.supports(config, dtype);
    }
    std::optional<std::string> supports_variable_lengths() const override {
        return inner_.supports_variable_lengths();
    }
    std::optional<std::string> supports_split_backward() const override {
        return inner_.supports_split_backward();
    }
    size_t run_workspace_bytes(const Config&, DType, int64_t, int64_t) const override { return 0; }
    size_t run_reserve_bytes(const Config&, DType, int64_t, int64_t) const override {
        return kReserveToken;
    }

protected:
    void run_forward(const Config& c, const ForwardArgs<float>& a) const override { fwd(c, a); }
    void run_forward(const Config& c, const ForwardArgs<double>& a) const override { fwd(c, a); }
    void run_backward(const Config& c, const BackwardArgs<float>& a) const override { bwd(c, a); }
    void run_backward(const Config& c, const BackwardArgs<double>& a) const override { bwd(c, a); }

private:
    static constexpr size_t kReserveToken = 1;

    // A device copy of a host view (same shape; empty stays empty).
    template <typename T>
    TensorView<const T> upload(Buffer& b, const TensorView<const T>& host) const {
        if (host.empty()) return {};
        const size_t bytes = static_cast<size_t>(host.numel()) * sizeof(T);
        b.reserve(bytes);
        b.copy_from(host.data(), Device::cpu, bytes, &context_);
        return like<const T>(host, b.as<T>());
    }
    // A device buffer shaped like a host output view (empty stays empty).
    template <typename T>
    TensorView<T> room_for(Buffer& b, const TensorView<T>& host) const {
        if (host.empty()) return {};
        b.reserve(static_cast<size_t>(host.numel()) * sizeof(T));
        return like<T>(host, b.as<T>());
    }
    template <typename T>
    void download(const TensorView<T>& device, const TensorView<T>& host) const {
        if (host.empty()) return;
        Buffer::copy(host.data(), Device::cpu, device.data(), Device::cuda,
                     static_cast<size_t>(host.numel()) * sizeof(T), &context_);
    }
    template <typename T, typename U>
    static TensorView<T> like(const TensorView<U>& v, T* data) {
        switch (v.rank()) {
            case 1:
                return TensorView<T>(data, {v.size(0)}, Device::cuda);
            case 2:
                return TensorView<T>(data, {v.size(0), v.size(1)}, Device::cuda);
            default:
                return TensorView<T>(data, {v.size(0), v.size(1), v.size(2)}, Device::cuda);
        }
    }

    // d's x, h0, c0 and params <- device copies of a's (host); lengths stay on the host.
    template <typename Args>
    void upload_inputs(const Args& a, Args& d) const {
        d.x = upload(x_, a.x);
        d.lengths = a.lengths;
        d.h0 = upload(h0_, a.h0);
        d.c0 = upload(c0_, a.c0);
        d.params = upload(params_, a.params);
    }

    template <typename T>
    void fwd(const Config& config, const ForwardArgs<T>& a) const {
        const DType dtype = dtype_of<T>();
        const int64_t seq_len = a.x.size(0), batch = a.x.size(1);
        ForwardArgs<T> d;
        upload_inputs(a, d);
        d.y = room_for(y_, a.y);
        d.hn = room_for(hn_, a.hn);
        d.cn = room_for(cn_, a.cn);
        d.workspace_size = inner_.workspace_bytes(config, dtype, seq_len, batch);
        d.workspace = workspace_.reserve(d.workspace_size);
        if (a.reserve != nullptr) {
            d.reserve_size = inner_.reserve_bytes(config, dtype, seq_len, batch);
            d.reserve = reserve_.reserve(d.reserve_size);
        }
        d.context = &context_;
        inner_.forward(config, d);
        download(d.y, a.y);
        download(d.hn, a.hn);
        download(d.cn, a.cn);
    }

    // x, h0, c0, params and y are the forward's (the interface requires it): their device
    // copies from fwd() are reused; dparams is uploaded, since backward adds into it.
    template <typename T>
    void bwd(const Config& config, const BackwardArgs<T>& a) const {
        const DType dtype = dtype_of<T>();
        const int64_t seq_len = a.x.size(0), batch = a.x.size(1);
        BackwardArgs<T> d;
        upload_inputs(a, d);
        d.y = like<const T>(a.y, y_.as<T>());
        d.dy = upload(dy_, a.dy);
        d.dhn = upload(dhn_, a.dhn);
        d.dcn = upload(dcn_, a.dcn);
        d.dx = room_for(dx_, a.dx);
        d.dh0 = room_for(dh0_, a.dh0);
        d.dc0 = room_for(dc0_, a.dc0);
        if (!a.dparams.empty()) {
            const TensorView<const T> before = upload(dparams_, TensorView<const T>(a.dparams));
            d.dparams =
                TensorView<T>(const_cast<T*>(before.data()), {a.dparams.numel()}, Device::cuda);
        }
        d.workspace_size = inner_.workspace_bytes(config, dtype, seq_len, batch);
        d.workspace = workspace_.reserve(d.workspace_size);
        d.reserve_size = inner_.reserve_bytes(config, dtype, seq_len, batch);
        d.reserve = reserve_.data();
        d.context = &context_;
        d.part = a.part;
        inner_.backward(config, d);
        download(d.dx, a.dx);
        download(d.dh0, a.dh0);
        download(d.dc0, a.dc0);
        if (!a.dparams.empty()) download(d.dparams, a.dparams);
    }

    const Variant& inner_;
    mutable cuda::Context context_;
    mutable Buffer x_{Device::cuda}, h0_{Device::cuda}, c0_{Device::cuda}, params_{Device::cuda};
    mutable Buffer y_{Device::cuda}, hn_{Device::cuda}, cn_{Device::cuda};
    mutable Buffer dy_{Device::cuda}, dhn_{Device::cuda}, dcn_{Device::cuda};
    mutable Buffer dx_{Device::cuda}, dh0_{Device::cuda}, dc0_{Device::cuda};
    mutable Buffer dparams_{Device::cuda}, workspace_{Device::cuda}, reserve_{Device::cuda};
};

}  // namespace

#endif

std::optional<std::string> check_on_device_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, Span<const float> params, bool with_split) {
    if (variant.device() == Device::cpu)
        return check_against_reference(variant, config, x, lengths, params, with_split);
#if LSTM_WITH_CUDA
    try {
        const DeviceProxy proxy(variant);
        return check_against_reference(proxy, config, x, lengths, params, with_split);
    } catch (const std::exception& e) {
        return std::string("reference check through device buffers threw: ") + e.what();
    }
#else
    return std::string("variant on cuda in a build without CUDA");
#endif
}

std::optional<std::string> check_layer_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, const LstmT<float>& layer, bool with_split) {
    std::vector<float> params(static_cast<size_t>(param_count(config)));
    layer.store_parameters(Span<float>(params));
    return check_on_device_against_reference(variant, config, x, lengths, Span<const float>(params),
                                             with_split);
}

}  // namespace lstm::bench
