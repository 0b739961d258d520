#include "deepbench_bench.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "case_failures.hpp"
#include "cuda_bench.hpp"
#include "flops.hpp"
#include "host_context.hpp"
#include "lstm/buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/device_context.hpp"
#include "lstm/registry.hpp"
#include "threads.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#endif

namespace lstm::bench {

const std::vector<DeepBenchShape>& deepbench_shapes() {
    static const std::vector<DeepBenchShape> all = {
        {512, 16, 25},   {512, 64, 25},  {1024, 64, 25},
        {1024, 128, 25}, {2048, 32, 25}, {256, 16, 150},
    };
    return all;
}

std::string deepbench_shape_name(const DeepBenchShape& s) {
    return "H:" + std::to_string(s.hidden) + "/N:" + std::to_string(s.batch) +
           "/T:" + std::to_string(s.seq_len);
}

namespace {

// Any fixed values do; fixed so that every run and every variant times identical work.
constexpr uint64_t kDeepBenchSeed = 2016;
constexpr double kFlopsPerGflop = 1e9;

enum class Pass {
    fwd,          // training forward (reserve written)
    bwd_data,     // BackwardPart::data: dx, and the reserve for the weights part
    bwd_weights,  // BackwardPart::weights: the weight gradients
    bwd,          // BackwardPart::all: both in one call, which every variant can time
};
const char* pass_name(Pass p) {
    switch (p) {
        case Pass::fwd:
            return "fwd";
        case Pass::bwd_data:
            return "bwd_data";
        case Pass::bwd_weights:
            return "bwd_weights";
        case Pass::bwd:
            return "bwd";
    }
    return "?";
}

struct DeepBenchCase {
    DeepBenchShape shape;
    Pass pass;
    const Variant* variant;
    int threads;  // cpu cases only; a cuda case leaves the host thread count alone
    int warmup_chains;
};

bool on_cpu(const DeepBenchCase& c) { return c.variant->device() == Device::cpu; }

Config config_of(const DeepBenchShape& s) { return Config{s.hidden, s.hidden, 1, false}; }

// A cuda case runs once, not per thread count (host threads only feed its launches), so only cpu
// names carry "/threads:K".
std::string case_name(const DeepBenchCase& c) {
    std::string name = "deepbench/" + deepbench_shape_name(c.shape) + "/" + pass_name(c.pass) +
                       "/" + to_string(c.variant->device()) + "/" + c.variant->name();
    if (on_cpu(c)) name += "/threads:" + std::to_string(c.threads);
    return name;
}

// Why the case cannot run at all; reported with its reason, never dropped.
std::optional<std::string> why_not_runnable(const DeepBenchCase& c) {
    if (auto why = why_device_unavailable(*c.variant)) return *why;
    if (auto why = c.variant->supports(config_of(c.shape), DType::f32)) return *why;
    if (c.pass == Pass::bwd_data || c.pass == Pass::bwd_weights) {
        if (auto why = c.variant->supports_split_backward())
            return std::string("backward data and weights cannot be timed apart: ") + *why;
    }
    return std::nullopt;
}

// Inputs, parameters, outputs and buffers of one shape in the variant's memory space, with the
// argument structs that use them. x, dy uniform in [-1, 1]; parameters as PyTorch initialises
// them (uniform in +-1/sqrt(H)); zero initial states; dx wanted (DeepBench's backward data
// computes it), dh0/dc0 not. The data is drawn on the host, so every device times the same
// numbers, and x and the parameters stay there for the reference check.
class Problem {
public:
    Problem(const DeepBenchShape& s, const Variant& v)
        : config_(config_of(s)), shape_(s), variant_(v), device_(v.device()), context_(device_) {
        const int64_t elems = s.seq_len * s.batch * s.hidden;
        std::mt19937_64 rng(kDeepBenchSeed);
        x_host_.resize(static_cast<size_t>(elems));
        std::vector<float> dy(x_host_.size());
        for (float& e : x_host_) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        for (float& e : dy) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.hidden));
        params_host_.resize(static_cast<size_t>(param_count(config_)));
        for (float& e : params_host_) e = static_cast<float>(detail::uniform(rng, -bound, bound));

        cuda::Context* ctx = context_.get();
        x_ = Buffer::upload(device_, x_host_, ctx);
        dy_ = Buffer::upload(device_, dy, ctx);
        params_ = Buffer::upload(device_, params_host_, ctx);
        y_ = Buffer(device_, x_host_.size() * sizeof(float));
        dx_ = Buffer(device_, x_host_.size() * sizeof(float));
        dparams_ = Buffer(device_, params_host_.size() * sizeof(float));
        dparams_.zero(params_host_.size() * sizeof(float), ctx);
        workspace_bytes_ = v.workspace_bytes(config_, DType::f32, s.seq_len, s.batch);
        reserve_bytes_ = v.reserve_bytes(config_, DType::f32, s.seq_len, s.batch);
        workspace_ = Buffer(device_, workspace_bytes_);
        reserve_ = Buffer(device_, reserve_bytes_);
    }

    // Null for a cpu variant.
    cuda::Context* context() const { return context_.get(); }
    const Config& config() const { return config_; }
    // x (T, N, H) on the host, whatever the variant's device: what the reference check reads.
    TensorView<const float> x_host() const {
        return TensorView<const float>(x_host_.data(),
                                       {shape_.seq_len, shape_.batch, shape_.hidden});
    }
    // params (param_count(config)) on the host.
    Span<const float> params_host() const { return Span<const float>(params_host_); }
    size_t workspace_bytes() const { return workspace_bytes_; }
    size_t reserve_bytes() const { return reserve_bytes_; }

    // Training forward: y (T, N, H, variant's device) and the reserve overwritten.
    void forward() {
        ForwardArgs<float> a;
        a.x = view(x_);
        a.params = params_view();
        a.y = mutable_view(y_);
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        a.context = context_.get();
        variant_.forward(config_, a);
    }

    // One backward part, or both (all), after forward(): data overwrites dx (T, N, H, variant's
    // device); weights ADDS into dparams, which is never zeroed here (a gradient accumulating over
    // calls, as PyTorch's).
    void backward(BackwardPart part) {
        BackwardArgs<float> a;
        a.x = view(x_);
        a.params = params_view();
        a.y = view(y_);
        a.dy = view(dy_);
        a.dx = mutable_view(dx_);
        if (part != BackwardPart::data)
            a.dparams = TensorView<float>(dparams_.as<float>(), {param_count(config_)}, device_);
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        a.context = context_.get();
        a.part = part;
        variant_.backward(config_, a);
    }

    // What the timed call needs before it, untimed: nothing, forward, or forward + data.
    void prerequisites(Pass p) {
        if (p != Pass::fwd) forward();
        if (p == Pass::bwd_weights) backward(BackwardPart::data);
    }
    void timed_call(Pass p) {
        switch (p) {
            case Pass::fwd:
                forward();
                return;
            case Pass::bwd_data:
                backward(BackwardPart::data);
                return;
            case Pass::bwd_weights:
                backward(BackwardPart::weights);
                return;
            case Pass::bwd:
                backward(BackwardPart::all);
                return;
        }
    }

private:
    // x, y, dy, dx are all (T, N, H) in the variant's memory space: input size = output size = H.
    TensorView<float> mutable_view(const Buffer& b) const {
        return TensorView<float>(b.as<float>(), {shape_.seq_len, shape_.batch, shape_.hidden},
                                 device_);
    }
    // (T, N, H), variant's device.
    TensorView<const float> view(const Buffer& b) const { return mutable_view(b); }
    // params (param_count(config)), variant's device.
    TensorView<const float> params_view() const {
        return TensorView<const float>(params_.as<float>(), {param_count(config_)}, device_);
    }

    Config config_;
    DeepBenchShape shape_;
    const Variant& variant_;
    Device device_;
    DeviceContext context_;  // declared before the buffers, so it outlives them
    std::vector<float> x_host_, params_host_;
    Buffer x_, dy_, params_, y_, dx_, dparams_, workspace_, reserve_;
    size_t workspace_bytes_ = 0, reserve_bytes_ = 0;
};

// The variant against the reference on this shape's data, both backward forms when it can split;
// a cuda variant through device buffers (check_on_device_against_reference, cuda_bench.hpp).
// Deterministic per (shape, device, variant): the three passes and every thread count share the
// verdict.
std::optional<std::string> cached_reference_check(const DeepBenchCase& c, const Problem& p) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key = deepbench_shape_name(c.shape) + "/" + to_string(c.variant->device()) +
                            "/" + c.variant->name();
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    const bool split = !c.variant->supports_split_backward();
    auto verdict = check_on_device_against_reference(*c.variant, p.config(), p.x_host(), {},
                                                     p.params_host(), split);
    verdicts.emplace(key, verdict);
    return verdict;
}

// Times the call alone and hands it to Google Benchmark as manual time. cuda: CUDA events on the
// case's stream (StepTimer), since the host clock would see only the launches; cpu: a steady
// clock, since each call ends with its OpenMP team joined, so the clock sees the whole call.
class PassTimer {
public:
    explicit PassTimer(cuda::Context* context) : events_(context), on_device_(context != nullptr) {}

    void start() {
        if (on_device_)
            events_.start();
        else
            start_ = Clock::now();
    }
    void stop(benchmark::State& state) {
        if (on_device_) {
            events_.stop(state);
            return;
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
        state.SetIterationTime(seconds);
        host_seconds_ += seconds;
    }
    // The sum of the host clock's iteration times: the manual time a cpu case reports.
    double host_seconds() const { return host_seconds_; }

private:
    using Clock = std::chrono::steady_clock;
    StepTimer events_;
    bool on_device_;
    Clock::time_point start_;
    double host_seconds_ = 0;
};

void time_pass(benchmark::State& state, const DeepBenchCase& c) {
    Problem p(c.shape, *c.variant);
    if (auto why = cached_reference_check(c, p)) {
        fail_case(state, *why);
        return;
    }
    // Warm-up: the case's own chain (buffers faulted in, packed weights, plans and caches as in
    // the timed loop); a variant that cannot split never runs a backward part here.
    for (int k = 0; k < c.warmup_chains; ++k) {
        p.prerequisites(c.pass);
        p.timed_call(c.pass);
    }
    // Only the call itself is timed: its prerequisites run (cpu) or are queued (cuda) before the
    // clock starts.
    PassTimer timer(p.context());
    for (auto _ : state) {
        p.prerequisites(c.pass);
        timer.start();
        p.timed_call(c.pass);
        timer.stop(state);
    }
    // Each pass is one forward's worth of GEMMs under the FLOP convention (bench/flops.hpp):
    // data = dgates times both weight matrices, weights = dgates times both partners; the whole
    // backward is both.
    const std::vector<int64_t> lengths(static_cast<size_t>(c.shape.batch), c.shape.seq_len);
    const double forwards = c.pass == Pass::bwd ? 2.0 : 1.0;
    const double flops = forwards * lstm_forward_flops(p.config(), lengths);
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops / kFlopsPerGflop, benchmark::Counter::kIsIterationInvariantRate);
    // The host's FMA peak says nothing about a GPU's, so cuda cases get no fraction.
    if (on_cpu(c))
        state.counters["peak_frac"] =
            peak_fraction(flops, state.iterations(), timer.host_seconds(), c.threads);
    state.counters["reserve_bytes"] =
        benchmark::Counter(static_cast<double>(p.reserve_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
    state.counters["workspace_bytes"] =
        benchmark::Counter(static_cast<double>(p.workspace_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
}

void run_case(benchmark::State& state, const DeepBenchCase& c) {
    if (auto why = why_not_runnable(c)) {
        state.SkipWithError(why->c_str());
        return;
    }
    if (on_cpu(c)) set_cpu_threads(c.threads);
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_pass(state, c);
    } catch (const std::exception& e) {
        fail_case(state, e.what());
    }
}

}  // namespace

void register_deepbench_cases(const BenchFlags& flags) {
    // Device outermost keeps the established listing order (every cpu case, then every cuda
    // case), so filters and result files written against it still line up.
    for (const Device device : {Device::cpu, Device::cuda}) {
        // Host threads matter to a cuda case only for its launches: it runs once, leaving the host
        // thread count alone.
        const std::vector<int> thread_counts =
            device == Device::cpu ? flags.threads : std::vector<int>{0};
        for (const DeepBenchShape& s : deepbench_shapes())
            for (Pass pass : {Pass::fwd, Pass::bwd_data, Pass::bwd_weights, Pass::bwd})
                for (const Variant* v : variants_on(device))
                    for (int k : thread_counts) {
                        const DeepBenchCase c{s, pass, v, k, warmup_repeats(flags, device)};
                        benchmark::RegisterBenchmark(
                            case_name(c).c_str(),
                            [c](benchmark::State& state) { run_case(state, c); })
                            ->UseManualTime()
                            ->Unit(benchmark::kMillisecond);
                    }
    }
}

}  // namespace lstm::bench
