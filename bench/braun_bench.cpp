#include "braun_bench.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braun.hpp"
#include "case_failures.hpp"
#include "cuda_bench.hpp"
#include "flops.hpp"
#include "host_context.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/registry.hpp"
#include "lstm/threads.hpp"
#include "reference_check.hpp"
#include "register_case.hpp"
#include "threads.hpp"

namespace lstm::bench {

nn::ModelConfig braun_model_config(const BraunScenario& s) {
    nn::ModelConfig m;
    m.lstm = s.config;
    m.classes = s.classes;
    m.dense_bias = false;
    m.head = s.loss == BraunLoss::ctc ? nn::Head::ctc : nn::Head::ce_last_step;
    m.adam.lr = kBraunAdamLr;
    return m;
}

std::optional<std::string> why_braun_not_runnable(const BraunScenario& s, const Variant& v) {
    if (auto why = v.supports(s.config, DType::f32)) return *why;
    if (s.lengths != BraunLengths::all_full) {
        if (auto why = v.supports_variable_lengths()) return *why;
    }
    return std::nullopt;
}

// The check is deterministic per (variant, path, precision, scenario, thread count): data and
// initial parameters come from fixed seeds. Repetitions and the paired cases reuse its verdict
// instead of paying for it again; each CPU thread count gets its own, since fused takes another
// path on an even team (the directions of a bidirectional layer side by side).
std::optional<std::string> braun_reference_verdict(const BraunScenario& s, const Variant& v,
                                                   const nn::ModelConfig& m,
                                                   nn::SequenceModel<float>& model,
                                                   const BraunData& data) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key = std::string(s.name) + "/" + to_string(v.device()) + "/" + v.name() +
                            "/" + model.lstm().path() + "/" + to_string(model.lstm().precision()) +
                            (v.device() == Device::cpu ? "/" + std::to_string(num_threads()) : "");
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    const TensorView<const float> x(data.x.data(), {s.seq_len, s.batch, m.lstm.input_size});
    // The parameters wherever they live; a cuda variant is checked through device buffers.
    auto verdict = check_layer_against_reference(v, m.lstm, x, Span<const int64_t>(data.lengths),
                                                 model.lstm());
    verdicts.emplace(key, verdict);
    return verdict;
}

namespace {

constexpr double kFlopsPerGflop = 1e9;

struct BraunCase {
    const BraunScenario* scenario;
    const Variant* variant;
    std::string path;  // empty: the variant's default
    Precision precision;
    int threads;
    int warmup_steps;
};

std::string case_name(const BraunCase& c) {
    const std::string name = std::string("braun/") + c.scenario->name + "/" +
                             to_string(c.variant->device()) + "/" + c.variant->name() +
                             path_part(c.path) + precision_part(c.precision);
    // A GPU case runs once (see register_braun_cases): host threads do not name it.
    if (c.variant->device() == Device::cuda) return name;
    return name + "/threads:" + std::to_string(c.threads);
}

void time_training_steps(benchmark::State& state, const BraunCase& c) {
    const BraunScenario& s = *c.scenario;
    const nn::ModelConfig m = braun_model_config(s);
    const BraunData data = make_braun_data(s);
    nn::SequenceModel<float> model(m, c.variant->name(), c.variant->device(), kBraunModelSeed);
    if (!c.path.empty()) model.lstm().set_path(c.path);
    model.lstm().set_precision(c.precision);
    if (auto why = braun_reference_verdict(s, *c.variant, m, model, data)) {
        fail_case(state, *why);
        return;
    }

    const TensorView<const float> x(data.x.data(), {s.seq_len, s.batch, m.lstm.input_size});
    const Span<const int64_t> lengths(data.lengths), targets(data.targets),
        target_lengths(data.target_lengths);
    for (int k = 0; k < c.warmup_steps; ++k) model.train_step(x, lengths, targets, target_lengths);
    // cuda: CUDA events around the whole step, the host-to-device copy of the batch included
    // (train_step makes it), as Braun timed it; host: the benchmark's real-time clock.
    StepTimer timer(model.lstm().context());
    // The span the benchmark's real-time clock sees too (to microseconds), for peak_frac.
    const auto loop_start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        timer.start();
        const float loss = model.train_step(x, lengths, targets, target_lengths);
        timer.stop(state);
        // A diverged step would time a different computation (NaN propagation), not training.
        if (!std::isfinite(loss)) {
            fail_case(state, "training step produced loss " + std::to_string(loss));
            break;
        }
        benchmark::DoNotOptimize(loss);
    }
    const double loop_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();

    const double flops = lstm_training_step_flops(s.config, data.lengths);
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops / kFlopsPerGflop, benchmark::Counter::kIsIterationInvariantRate);
    // The host's FMA peak says nothing about a GPU's, so GPU cases get no fraction.
    if (c.variant->device() == Device::cpu)
        state.counters["peak_frac"] =
            peak_fraction(flops, state.iterations(), loop_seconds, c.threads, c.precision);
    const LstmT<float>& lstm = model.lstm();
    state.counters["reserve_bytes"] =
        benchmark::Counter(static_cast<double>(lstm.reserve_bytes()), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
    state.counters["workspace_bytes"] =
        benchmark::Counter(static_cast<double>(lstm.workspace_bytes()),
                           benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

void run_case(benchmark::State& state, const BraunCase& c) {
    if (auto why = why_device_unavailable(*c.variant)) {
        state.SkipWithError(why->c_str());
        return;
    }
    // Every case that cannot run is reported with its reason, never dropped.
    if (auto why = why_braun_not_runnable(*c.scenario, *c.variant)) {
        state.SkipWithError(why->c_str());
        return;
    }
    set_cpu_threads(c.threads);
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_training_steps(state, c);
    } catch (const std::exception& e) {
        fail_case(state, e.what());
    }
}

}  // namespace

void register_braun_cases(const BenchFlags& flags) {
    // Host threads matter to a GPU case only for its host-side work, so it runs once, with the
    // largest count asked for, instead of once per count.
    const std::vector<int> gpu_threads = {
        *std::max_element(flags.threads.begin(), flags.threads.end())};
    for (const BraunScenario& s : braun_scenarios()) {
        for (const Variant* v : variants()) {
            for (const std::string& path : case_paths(*v, flags))
                for (Precision precision : case_precisions(*v, s.config))
                    for (int threads : v->device() == Device::cpu ? flags.threads : gpu_threads) {
                        const BraunCase c{&s,        v,       path,
                                          precision, threads, warmup_repeats(flags, v->device())};
                        // Real time: the step runs on an OpenMP team, and the calling thread's CPU
                        // time misses the workers. It also makes GFLOP/s divide by wall time. GPU
                        // cases: the CUDA events of StepTimer (manual time).
                        auto* b = register_case(
                            case_name(c), [c](benchmark::State& state) { run_case(state, c); });
                        if (v->device() == Device::cuda)
                            b->UseManualTime();
                        else
                            b->UseRealTime();
                        b->Unit(benchmark::kMillisecond);
                    }
        }
    }
}

}  // namespace lstm::bench
