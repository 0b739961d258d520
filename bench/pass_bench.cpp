#include "pass_bench.hpp"

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
#include "lstm/detail/random.hpp"
#include "lstm/device_context.hpp"
#include "lstm/problem.hpp"
#include "lstm/registry.hpp"
#include "register_case.hpp"
#include "threads.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#endif

namespace lstm::bench {

namespace {

// Any fixed values do; fixed so that every run and every variant times identical work.
constexpr uint64_t kDataSeed = 2016;
constexpr double kFlopsPerGflop = 1e9;

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
        case Pass::fwd_bwd:
            return "fwd_bwd";
    }
    return "?";
}

// Forwards' worth of GEMMs in a pass under the FLOP convention (bench/flops.hpp): data =
// dgates times both weight matrices, weights = dgates times both partners, a whole backward both.
double forwards_in(Pass p) {
    switch (p) {
        case Pass::bwd:
            return 2.0;
        case Pass::fwd_bwd:
            return 3.0;
        default:
            return 1.0;
    }
}

struct PassCase {
    std::string family;
    PassShape shape;
    Pass pass;
    const Variant* variant;
    std::string path;  // one of variant->paths(f32); empty: its default path
    Precision precision;
    int threads;  // cpu cases only; a cuda case leaves the host thread count alone
    int warmup_chains;
};

bool on_cpu(const PassCase& c) { return c.variant->device() == Device::cpu; }

// A cuda case runs once, not per thread count (host threads only feed its launches), so only cpu
// names carry "/threads:K".
std::string case_name(const PassCase& c) {
    std::string name = c.family + "/" + c.shape.name + "/" + pass_name(c.pass) + "/" +
                       to_string(c.variant->device()) + "/" + c.variant->name();
    name += path_part(c.path) + precision_part(c.precision);
    if (on_cpu(c)) name += "/threads:" + std::to_string(c.threads);
    return name;
}

// Why the case cannot run at all; reported with its reason, never dropped.
std::optional<std::string> why_not_runnable(const PassCase& c) {
    if (auto why = why_device_unavailable(*c.variant)) return *why;
    if (auto why = c.variant->supports(c.shape.config, DType::f32)) return *why;
    if (c.pass == Pass::bwd_data || c.pass == Pass::bwd_weights) {
        if (auto why = c.variant->supports_split_backward())
            return std::string("backward data and weights cannot be timed apart: ") + *why;
    }
    return std::nullopt;
}

// One shape's problem (lstm/problem.hpp) in the variant's memory space, and the calls a pass
// times. x, dy uniform in [-1, 1]; parameters as PyTorch initialises them (uniform in
// +-1/sqrt(H)); zero initial states; dx wanted (DeepBench's backward data computes it), dh0/dc0
// not. The data is drawn on the host, so every device times the same numbers, and x and the
// parameters stay there for the reference check.
class Problem {
public:
    Problem(const PassShape& s, const Variant& v, const std::string& path, Precision precision)
        : context_(v.device()),
          problem_(s.config, s.seq_len, s.batch, v.device(), context_.get()),
          plan_(v.make_plan(PlanRequest{s.config, DType::f32, s.seq_len, s.batch, path,
                                        context_.get(), precision})) {
        std::mt19937_64 rng(kDataSeed);
        x_host_.resize(static_cast<size_t>(problem_.numel(ProblemTensor::x)));
        std::vector<float> dy(static_cast<size_t>(problem_.numel(ProblemTensor::dy)));
        for (float& e : x_host_) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        for (float& e : dy) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.config.hidden_size));
        params_host_.resize(static_cast<size_t>(problem_.numel(ProblemTensor::params)));
        for (float& e : params_host_) e = static_cast<float>(detail::uniform(rng, -bound, bound));

        problem_.set(ProblemTensor::x, x_host_);
        problem_.set(ProblemTensor::params, params_host_);
        problem_.set(ProblemTensor::dy, dy);
        problem_.allocate(ProblemTensor::y);
        problem_.allocate(ProblemTensor::dx);
        problem_.fill(ProblemTensor::dparams, 0.0f);
        problem_.allocate_scratch(*plan_);
    }

    // Null for a cpu variant.
    cuda::Context* context() const { return context_.get(); }
    const Config& config() const { return problem_.config(); }
    // x (T, N, I) on the host, whatever the variant's device: what the reference check reads.
    TensorView<const float> x_host() const {
        return TensorView<const float>(x_host_.data(),
                                       {problem_.seq_len(), problem_.batch(), config().input_size});
    }
    // params (param_count(config)) on the host.
    Span<const float> params_host() const { return Span<const float>(params_host_); }
    size_t workspace_bytes() const { return problem_.scratch().workspace_size; }
    size_t reserve_bytes() const { return problem_.scratch().reserve_size; }

    // Training forward: y (T, N, D*S, variant's device) and the reserve overwritten.
    void forward() { plan_->forward(problem_.forward_args()); }
    // One backward part, or both (all), after forward(): data overwrites dx (T, N, I, variant's
    // device); weights ADDS into dparams, which is never zeroed here (a gradient accumulating over
    // calls, as PyTorch's).
    void backward(BackwardPart part) { plan_->backward(problem_.backward_args(part)); }

    // What the timed call needs before it, untimed: nothing, forward, or forward + data.
    void prerequisites(Pass p) {
        if (p != Pass::fwd && p != Pass::fwd_bwd) forward();
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
            case Pass::fwd_bwd:
                forward();
                backward(BackwardPart::all);
                return;
        }
    }

private:
    DeviceContext context_;  // declared before the problem, so it outlives its buffers
    LstmProblem<float> problem_;
    std::unique_ptr<Plan> plan_;
    std::vector<float> x_host_, params_host_;
};

// The variant against the reference on this shape's data, both backward forms when it can split;
// a cuda variant through device buffers (check_on_device_against_reference, cuda_bench.hpp).
// Deterministic per (family, shape, device, variant): the passes and every thread count share the
// verdict.
std::optional<std::string> cached_reference_check(const PassCase& c, const Problem& p) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key = c.family + "/" + c.shape.name + "/" + to_string(c.variant->device()) +
                            "/" + c.variant->name() + "/" + c.path + "/" + to_string(c.precision);
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    const bool split = !c.variant->supports_split_backward();
    auto verdict = check_on_device_against_reference(*c.variant, p.config(), p.x_host(), {},
                                                     p.params_host(), split, c.path, c.precision);
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

void time_pass(benchmark::State& state, const PassCase& c) {
    Problem p(c.shape, *c.variant, c.path, c.precision);
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
    const std::vector<int64_t> lengths(static_cast<size_t>(c.shape.batch), c.shape.seq_len);
    const double flops = forwards_in(c.pass) * lstm_forward_flops(p.config(), lengths);
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops / kFlopsPerGflop, benchmark::Counter::kIsIterationInvariantRate);
    // The host's FMA peak says nothing about a GPU's, so cuda cases get no fraction.
    if (on_cpu(c))
        state.counters["peak_frac"] =
            peak_fraction(flops, state.iterations(), timer.host_seconds(), c.threads, c.precision);
    state.counters["reserve_bytes"] =
        benchmark::Counter(static_cast<double>(p.reserve_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
    state.counters["workspace_bytes"] =
        benchmark::Counter(static_cast<double>(p.workspace_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
}

void run_case(benchmark::State& state, const PassCase& c) {
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

void register_pass_cases(const std::string& family, const std::vector<PassShape>& shapes,
                         const std::vector<Pass>& passes, const BenchFlags& flags) {
    for (const Device device : {Device::cpu, Device::cuda}) {
        // Host threads matter to a cuda case only for its launches: it runs once, leaving the host
        // thread count alone.
        const std::vector<int> thread_counts =
            device == Device::cpu ? flags.threads : std::vector<int>{0};
        for (const PassShape& s : shapes)
            for (Pass pass : passes)
                for (const Variant* v : variants_on(device))
                    for (const std::string& path : case_paths(*v, flags))
                        for (Precision precision : case_precisions(*v, s.config))
                            for (int k : thread_counts) {
                                const PassCase c{
                                    family, s,         pass, v,
                                    path,   precision, k,    warmup_repeats(flags, device)};
                                register_case(case_name(c),
                                              [c](benchmark::State& state) { run_case(state, c); })
                                    ->UseManualTime()
                                    ->Unit(benchmark::kMillisecond);
                            }
    }
}

}  // namespace lstm::bench
