#include "cuda_bench.hpp"

#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "deepbench_bench.hpp"
#include "flops.hpp"
#include "lstm/buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/registry.hpp"
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
    size_t workspace_bytes(const Config&, DType, int64_t, int64_t) const override { return 0; }
    size_t reserve_bytes(const Config&, DType, int64_t, int64_t) const override {
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

    template <typename T>
    void fwd(const Config& config, const ForwardArgs<T>& a) const {
        const DType dtype = dtype_of<T>();
        const int64_t seq_len = a.x.size(0), batch = a.x.size(1);
        ForwardArgs<T> d;
        d.x = upload(x_, a.x);
        d.lengths = a.lengths;
        d.h0 = upload(h0_, a.h0);
        d.c0 = upload(c0_, a.c0);
        d.params = upload(params_, a.params);
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
        d.x = upload(x_, a.x);
        d.lengths = a.lengths;
        d.h0 = upload(h0_, a.h0);
        d.c0 = upload(c0_, a.c0);
        d.params = upload(params_, a.params);
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

// --------------------------------------------------------------------------------------------
// DeepBench on cuda
// --------------------------------------------------------------------------------------------

namespace {

constexpr uint64_t kDeepBenchCudaSeed = 2016;  // any fixed value: identical work every run
constexpr double kFlopsPerGflop = 1e9;

enum class CudaPass { fwd, bwd_data, bwd_weights };

const char* pass_name(CudaPass p) {
    switch (p) {
        case CudaPass::fwd:
            return "fwd";
        case CudaPass::bwd_data:
            return "bwd_data";
        case CudaPass::bwd_weights:
            return "bwd_weights";
    }
    return "?";
}

struct CudaDeepBenchCase {
    DeepBenchShape shape;
    CudaPass pass;
    const Variant* variant;
    int warmup_chains;
};

std::string case_name(const CudaDeepBenchCase& c) {
    return "deepbench/" + deepbench_shape_name(c.shape) + "/" + pass_name(c.pass) + "/cuda/" +
           c.variant->name();
}

#if LSTM_WITH_CUDA

// One shape's data on the device: x, dy uniform in [-1, 1], parameters as PyTorch initialises
// them, zero initial states; dx wanted, dh0/dc0 not (DeepBench's backward data).
class DeviceProblem {
public:
    DeviceProblem(const DeepBenchShape& s, const Variant& v)
        : shape_(s), config_{s.hidden, s.hidden, 1, false}, variant_(v) {
        const int64_t elems = s.seq_len * s.batch * s.hidden;
        std::mt19937_64 rng(kDeepBenchCudaSeed);
        x_host_.resize(static_cast<size_t>(elems));
        std::vector<float> dy(x_host_.size());
        for (float& e : x_host_) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        for (float& e : dy) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.hidden));
        params_host_.resize(static_cast<size_t>(param_count(config_)));
        for (float& e : params_host_) e = static_cast<float>(detail::uniform(rng, -bound, bound));
        x_ = Buffer::upload(Device::cuda, x_host_, &context_);
        dy_ = Buffer::upload(Device::cuda, dy, &context_);
        params_ = Buffer::upload(Device::cuda, params_host_, &context_);
        y_ = Buffer(Device::cuda, x_host_.size() * sizeof(float));
        dx_ = Buffer(Device::cuda, x_host_.size() * sizeof(float));
        dparams_ = Buffer(Device::cuda, params_host_.size() * sizeof(float));
        dparams_.zero(dparams_.size(), &context_);
        workspace_bytes_ = v.workspace_bytes(config_, DType::f32, s.seq_len, s.batch);
        reserve_bytes_ = v.reserve_bytes(config_, DType::f32, s.seq_len, s.batch);
        workspace_ = Buffer(Device::cuda, workspace_bytes_);
        reserve_ = Buffer(Device::cuda, reserve_bytes_);
    }

    cuda::Context& context() { return context_; }
    const Config& config() const { return config_; }
    TensorView<const float> x_host() const { return host_view(x_host_); }
    Span<const float> params_host() const { return Span<const float>(params_host_); }
    size_t workspace_bytes() const { return workspace_bytes_; }
    size_t reserve_bytes() const { return reserve_bytes_; }

    void forward() {
        ForwardArgs<float> a;
        a.x = view(x_);
        a.params = params_view();
        a.y = mutable_view(y_);
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        a.context = &context_;
        variant_.forward(config_, a);
    }
    // data overwrites dx; weights ADDS into dparams (never zeroed: a gradient accumulating over
    // calls, as in the host fixture).
    void backward(BackwardPart part) {
        BackwardArgs<float> a;
        a.x = view(x_);
        a.params = params_view();
        a.y = view(y_);
        a.dy = view(dy_);
        a.dx = mutable_view(dx_);
        if (part != BackwardPart::data)
            a.dparams =
                TensorView<float>(dparams_.as<float>(), {param_count(config_)}, Device::cuda);
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        a.context = &context_;
        a.part = part;
        variant_.backward(config_, a);
    }
    void prerequisites(CudaPass p) {
        if (p != CudaPass::fwd) forward();
        if (p == CudaPass::bwd_weights) backward(BackwardPart::data);
    }
    void timed_call(CudaPass p) {
        if (p == CudaPass::fwd)
            forward();
        else
            backward(p == CudaPass::bwd_data ? BackwardPart::data : BackwardPart::weights);
    }

private:
    // x, y, dy, dx are all (T, N, H) on the device: input size = output size = H.
    TensorView<float> mutable_view(const Buffer& b) const {
        return TensorView<float>(b.as<float>(), {shape_.seq_len, shape_.batch, shape_.hidden},
                                 Device::cuda);
    }
    TensorView<const float> view(const Buffer& b) const { return mutable_view(b); }
    TensorView<const float> host_view(const std::vector<float>& v) const {
        return TensorView<const float>(v.data(), {shape_.seq_len, shape_.batch, shape_.hidden});
    }
    TensorView<const float> params_view() const {
        return TensorView<const float>(params_.as<float>(), {param_count(config_)}, Device::cuda);
    }

    DeepBenchShape shape_;
    Config config_;
    const Variant& variant_;
    cuda::Context context_;
    std::vector<float> x_host_, params_host_;
    Buffer x_{Device::cuda}, dy_{Device::cuda}, params_{Device::cuda}, y_{Device::cuda};
    Buffer dx_{Device::cuda}, dparams_{Device::cuda}, workspace_{Device::cuda},
        reserve_{Device::cuda};
    size_t workspace_bytes_ = 0, reserve_bytes_ = 0;
};

// Deterministic per (shape, variant): the three passes share the verdict.
std::optional<std::string> cached_check(const CudaDeepBenchCase& c, const DeviceProblem& p) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key = deepbench_shape_name(c.shape) + "/cuda/" + c.variant->name();
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    const bool split = !c.variant->supports_split_backward();
    auto verdict = check_on_device_against_reference(*c.variant, p.config(), p.x_host(), {},
                                                     p.params_host(), split);
    verdicts.emplace(key, verdict);
    return verdict;
}

void time_pass(benchmark::State& state, const CudaDeepBenchCase& c) {
    DeviceProblem p(c.shape, *c.variant);
    if (auto why = cached_check(c, p)) {
        state.SkipWithError(why->c_str());
        return;
    }
    for (int k = 0; k < c.warmup_chains; ++k) {
        p.prerequisites(c.pass);
        p.timed_call(c.pass);
    }
    // Only the call itself is between the events; its prerequisites are queued before them.
    StepTimer timer(&p.context());
    for (auto _ : state) {
        p.prerequisites(c.pass);
        timer.start();
        p.timed_call(c.pass);
        timer.stop(state);
    }
    const std::vector<int64_t> lengths(static_cast<size_t>(c.shape.batch), c.shape.seq_len);
    state.counters["GFLOP/s"] =
        benchmark::Counter(lstm_forward_flops(p.config(), lengths) / kFlopsPerGflop,
                           benchmark::Counter::kIsIterationInvariantRate);
    state.counters["reserve_bytes"] =
        benchmark::Counter(static_cast<double>(p.reserve_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
    state.counters["workspace_bytes"] =
        benchmark::Counter(static_cast<double>(p.workspace_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
}

#endif

void run_case(benchmark::State& state, const CudaDeepBenchCase& c) {
    if (auto why = why_device_unavailable(*c.variant)) {
        state.SkipWithError(why->c_str());
        return;
    }
    const Config config{c.shape.hidden, c.shape.hidden, 1, false};
    if (auto why = c.variant->supports(config, DType::f32)) {
        state.SkipWithError(why->c_str());
        return;
    }
    if (c.pass != CudaPass::fwd) {
        if (auto why = c.variant->supports_split_backward()) {
            state.SkipWithError(
                ("backward data and weights cannot be timed apart: " + *why).c_str());
            return;
        }
    }
#if LSTM_WITH_CUDA
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_pass(state, c);
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
#endif
}

}  // namespace

void register_deepbench_cuda_cases(const BenchFlags& flags) {
    for (const DeepBenchShape& s : deepbench_shapes())
        for (CudaPass pass : {CudaPass::fwd, CudaPass::bwd_data, CudaPass::bwd_weights})
            for (const Variant* v : variants_on(Device::cuda)) {
                const CudaDeepBenchCase c{s, pass, v, flags.warmup_steps};
                benchmark::RegisterBenchmark(case_name(c).c_str(),
                                             [c](benchmark::State& state) { run_case(state, c); })
                    ->UseManualTime()
                    ->Unit(benchmark::kMillisecond);
            }
}

}  // namespace lstm::bench
