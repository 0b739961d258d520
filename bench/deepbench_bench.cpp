#include "deepbench_bench.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flops.hpp"
#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/registry.hpp"
#include "reference_check.hpp"
#include "threads.hpp"

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
};
const char* pass_name(Pass p) {
    switch (p) {
        case Pass::fwd:
            return "fwd";
        case Pass::bwd_data:
            return "bwd_data";
        case Pass::bwd_weights:
            return "bwd_weights";
    }
    return "?";
}

struct DeepBenchCase {
    DeepBenchShape shape;
    Pass pass;
    const Variant* variant;
    int threads;
    int warmup_chains;
};

Config config_of(const DeepBenchShape& s) { return Config{s.hidden, s.hidden, 1, false}; }

std::string shape_name(const DeepBenchShape& s) { return deepbench_shape_name(s); }

std::string case_name(const DeepBenchCase& c) {
    return "deepbench/" + shape_name(c.shape) + "/" + pass_name(c.pass) + "/" +
           to_string(c.variant->device()) + "/" + c.variant->name() +
           "/threads:" + std::to_string(c.threads);
}

// Why the case cannot run at all; reported with its reason, never dropped.
std::optional<std::string> why_not_runnable(const DeepBenchCase& c) {
    if (auto why = c.variant->supports(config_of(c.shape), DType::f32)) return *why;
    if (c.pass != Pass::fwd) {
        if (auto why = c.variant->supports_split_backward())
            return std::string("backward data and weights cannot be timed apart: ") + *why;
    }
    return std::nullopt;
}

// Inputs, parameters, outputs and buffers of one shape, with the argument structs that use them.
// x, dy uniform in [-1, 1]; parameters as PyTorch initialises them (uniform in +-1/sqrt(H));
// zero initial states; dx wanted (DeepBench's backward data computes it), dh0/dc0 not.
class Problem {
public:
    Problem(const DeepBenchShape& s, const Variant& v)
        : config_(config_of(s)), shape_(s), variant_(v) {
        const int64_t rows = s.seq_len * s.batch * s.hidden;
        std::mt19937_64 rng(kDeepBenchSeed);
        x_.resize(static_cast<size_t>(rows));
        dy_.resize(x_.size());
        for (float& e : x_) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        for (float& e : dy_) e = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.hidden));
        params_.resize(static_cast<size_t>(param_count(config_)));
        for (float& e : params_) e = static_cast<float>(detail::uniform(rng, -bound, bound));
        y_.resize(x_.size());
        dx_.resize(x_.size());
        dparams_.assign(params_.size(), 0.0f);
        workspace_bytes_ = v.workspace_bytes(config_, DType::f32, s.seq_len, s.batch);
        reserve_bytes_ = v.reserve_bytes(config_, DType::f32, s.seq_len, s.batch);
        workspace_.reserve(workspace_bytes_);
        reserve_.reserve(reserve_bytes_);
    }

    const Config& config() const { return config_; }
    TensorView<const float> x() const { return view(x_); }
    Span<const float> params() const { return Span<const float>(params_); }
    size_t workspace_bytes() const { return workspace_bytes_; }
    size_t reserve_bytes() const { return reserve_bytes_; }

    // Training forward: y (T, N, H) and the reserve overwritten.
    void forward() {
        ForwardArgs<float> a;
        a.x = view(x_);
        a.params = TensorView<const float>(params_.data(), {int64_t(params_.size())});
        a.y = TensorView<float>(y_.data(), {shape_.seq_len, shape_.batch, shape_.hidden});
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        variant_.forward(config_, a);
    }

    // One backward part after forward(): data overwrites dx (T, N, H); weights ADDS into
    // dparams, which is never zeroed here (a gradient accumulating over calls, as PyTorch's).
    void backward(BackwardPart part) {
        BackwardArgs<float> a;
        a.x = view(x_);
        a.params = TensorView<const float>(params_.data(), {int64_t(params_.size())});
        a.y = view(y_);
        a.dy = view(dy_);
        a.dx = TensorView<float>(dx_.data(), {shape_.seq_len, shape_.batch, shape_.hidden});
        if (part != BackwardPart::data)
            a.dparams = TensorView<float>(dparams_.data(), {int64_t(dparams_.size())});
        a.workspace = workspace_.data();
        a.workspace_size = workspace_bytes_;
        a.reserve = reserve_.data();
        a.reserve_size = reserve_bytes_;
        a.part = part;
        variant_.backward(config_, a);
    }

    // What the timed call needs before it, untimed: nothing, forward, or forward + data.
    void prerequisites(Pass p) {
        if (p != Pass::fwd) forward();
        if (p == Pass::bwd_weights) backward(BackwardPart::data);
    }
    void timed_call(Pass p) {
        if (p == Pass::fwd)
            forward();
        else
            backward(p == Pass::bwd_data ? BackwardPart::data : BackwardPart::weights);
    }

private:
    // x, y, dy, dx are all (T, N, H): input size = output size = H.
    TensorView<const float> view(const std::vector<float>& v) const {
        return TensorView<const float>(v.data(), {shape_.seq_len, shape_.batch, shape_.hidden});
    }

    Config config_;
    DeepBenchShape shape_;
    const Variant& variant_;
    std::vector<float> x_, dy_, params_, y_, dx_, dparams_;
    size_t workspace_bytes_ = 0, reserve_bytes_ = 0;
    lstm::detail::AlignedBuffer workspace_, reserve_;
};

// The variant against the reference on this shape's data (bench/reference_check.hpp), both
// backward forms when it can split. Deterministic per (shape, variant): the three passes and
// every thread count share the verdict.
std::optional<std::string> cached_reference_check(const DeepBenchCase& c, const Problem& p) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key =
        shape_name(c.shape) + "/" + to_string(c.variant->device()) + "/" + c.variant->name();
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    const bool split = !c.variant->supports_split_backward();
    auto verdict = check_against_reference(*c.variant, p.config(), p.x(), {}, p.params(), split);
    verdicts.emplace(key, verdict);
    return verdict;
}

void time_pass(benchmark::State& state, const DeepBenchCase& c) {
    Problem p(c.shape, *c.variant);
    if (auto why = cached_reference_check(c, p)) {
        state.SkipWithError(why->c_str());
        return;
    }
    // Warm-up: the case's own chain (buffers faulted in, packed weights and caches as in the
    // timed loop); a variant that cannot split never runs a backward part here.
    for (int k = 0; k < c.warmup_chains; ++k) {
        p.prerequisites(c.pass);
        p.timed_call(c.pass);
    }
    // Manual time: only the call itself is timed, its prerequisites run outside the clock.
    // Each call ends with its OpenMP team joined, so the clock sees the whole call.
    using Clock = std::chrono::steady_clock;
    for (auto _ : state) {
        p.prerequisites(c.pass);
        const auto start = Clock::now();
        p.timed_call(c.pass);
        const auto stop = Clock::now();
        state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    }
    // Each pass is one forward's worth of GEMMs under the FLOP convention (bench/flops.hpp):
    // data = dgates times both weight matrices, weights = dgates times both partners.
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

void run_case(benchmark::State& state, const DeepBenchCase& c) {
    if (auto why = why_not_runnable(c)) {
        state.SkipWithError(why->c_str());
        return;
    }
    set_cpu_threads(c.threads);
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_pass(state, c);
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

}  // namespace

void register_deepbench_cases(const BenchFlags& flags) {
    for (const DeepBenchShape& s : deepbench_shapes())
        for (Pass pass : {Pass::fwd, Pass::bwd_data, Pass::bwd_weights})
            for (const Variant* v : variants_on(Device::cpu))
                for (int k : flags.threads) {
                    const DeepBenchCase c{s, pass, v, k, flags.warmup_steps};
                    benchmark::RegisterBenchmark(
                        case_name(c).c_str(), [c](benchmark::State& state) { run_case(state, c); })
                        ->UseManualTime()
                        ->Unit(benchmark::kMillisecond);
                }
}

}  // namespace lstm::bench
