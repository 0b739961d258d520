#include "imdb_bench.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "case_failures.hpp"
#include "flops.hpp"
#include "host_context.hpp"
#include "imdb.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/registry.hpp"
#include "reference_check.hpp"
#include "register_case.hpp"
#include "threads.hpp"

namespace lstm::bench {

namespace {

// Any fixed value; fixed so that every run and every variant starts from the same parameters.
constexpr uint64_t kImdbModelSeed = 0;
constexpr double kFlopsPerGflop = 1e9;

enum class ImdbMode {
    fwd,   // "deployment": inference forward of LSTM, pooling, dense and loss
    grad,  // "gradient computation": training forward + backward of every parameter, no update
};

struct ImdbCase {
    ImdbMode mode;
    const Variant* variant;
    std::string path;  // empty: the variant's default
    int threads;
    int warmup_passes;
};

std::string case_name(const ImdbCase& c) {
    return std::string("bahrampour/imdb/") + (c.mode == ImdbMode::fwd ? "fwd" : "grad") + "/" +
           to_string(c.variant->device()) + "/" + c.variant->name() + path_part(c.path) +
           "/threads:" + std::to_string(c.threads);
}

bool any_variable_lengths() {
    for (const ImdbLengths& b : kImdbLengths)
        for (int64_t len : b)
            if (len != b.back()) return true;
    return false;
}

// Why the case cannot run at all; reported with its reason, never dropped.
std::optional<std::string> why_not_runnable(const Variant& v) {
    if (auto why = v.supports(imdb_config(), DType::f32)) return *why;
    if (any_variable_lengths()) {
        if (auto why = v.supports_variable_lengths())
            return "the IMDB batches have per-sequence lengths (the first two batches): " + *why;
    }
    return std::nullopt;
}

nn::ModelConfig model_config() {
    nn::ModelConfig m;
    m.lstm = imdb_config();
    m.classes = kImdbClasses;
    m.dense_bias = true;
    m.head = nn::Head::ce_mean_pool;
    return m;
}

// The LSTM on every batch against the reference (bench/reference_check.hpp), with the model's
// initial parameters, on `path`. Deterministic per variant and path, so fwd, grad and every
// thread count share it.
std::optional<std::string> cached_reference_check(const Variant& v, const std::string& path,
                                                  Span<const float> params,
                                                  const std::vector<ImdbBatch>& batches) {
    static std::map<std::string, std::optional<std::string>> verdicts;
    const std::string key = std::string(to_string(v.device())) + "/" + v.name() + "/" + path;
    const auto found = verdicts.find(key);
    if (found != verdicts.end()) return found->second;
    std::optional<std::string> verdict;
    for (size_t b = 0; b < batches.size() && !verdict; ++b) {
        const ImdbBatch& batch = batches[b];
        const TensorView<const float> x(batch.x.data(), {batch.seq_len, kImdbBatch, kImdbInput});
        if (auto why = check_against_reference(v, imdb_config(), x,
                                               Span<const int64_t>(batch.lengths), params,
                                               /*with_split=*/false, path))
            verdict = "batch " + std::to_string(b) + ": " + *why;
    }
    verdicts.emplace(key, verdict);
    return verdict;
}

// One batch of the case's mode; returns the batch-mean loss.
float run_batch(nn::SequenceModel<float>& model, const ImdbBatch& b, ImdbMode mode) {
    const TensorView<const float> x(b.x.data(), {b.seq_len, kImdbBatch, kImdbInput});
    const Span<const int64_t> lengths(b.lengths), targets(b.targets);
    return mode == ImdbMode::fwd ? model.evaluate(x, lengths, targets)
                                 : model.compute_gradients(x, lengths, targets);
}

void time_passes(benchmark::State& state, const ImdbCase& c) {
    const std::vector<ImdbBatch> batches = make_imdb_batches();
    nn::SequenceModel<float> model(model_config(), c.variant->name(), c.variant->device(),
                                   kImdbModelSeed);
    if (!c.path.empty()) model.lstm().set_path(c.path);
    if (auto why = cached_reference_check(*c.variant, c.path,
                                          std::as_const(model.lstm()).parameters(), batches)) {
        fail_case(state, *why);
        return;
    }
    // Warm-up passes grow every buffer to the longest batch, so timed passes allocate nothing.
    for (int k = 0; k < c.warmup_passes; ++k)
        for (const ImdbBatch& b : batches) run_batch(model, b, c.mode);
    // One iteration is one pass over all batches, so every iteration times the same work and
    // the mean over iterations is exact, not a partial cycle. The loop's span is what the
    // benchmark's real-time clock sees too (to microseconds), for peak_frac.
    const auto loop_start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (const ImdbBatch& b : batches) {
            const float loss = run_batch(model, b, c.mode);
            // The parameters never change, so a non-finite loss is a bug, not divergence.
            if (!std::isfinite(loss)) {
                fail_case(state, "loss " + std::to_string(loss));
                return;
            }
            benchmark::DoNotOptimize(loss);
        }
    }
    const double loop_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();

    std::vector<int64_t> all_lengths;
    int64_t longest = 0;
    for (const ImdbBatch& b : batches) {
        all_lengths.insert(all_lengths.end(), b.lengths.begin(), b.lengths.end());
        longest = std::max(longest, b.seq_len);
    }
    const double forward = lstm_forward_flops(imdb_config(), all_lengths);
    const double flops = c.mode == ImdbMode::fwd ? forward : 3.0 * forward;
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops / kFlopsPerGflop, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["peak_frac"] = peak_fraction(flops, state.iterations(), loop_seconds, c.threads);
    // Time / (iterations * batches): the paper's per-batch number, in seconds (the console
    // shows it with a prefix, e.g. 4.5ms).
    state.counters["time_per_batch"] = benchmark::Counter(
        static_cast<double>(kImdbBatches),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    // Sized by the longest batch, which the buffers grow to; inference keeps no reserve.
    const Variant& v = *c.variant;
    const size_t reserve = c.mode == ImdbMode::fwd
                               ? 0
                               : v.reserve_bytes(imdb_config(), DType::f32, longest, kImdbBatch);
    state.counters["reserve_bytes"] = benchmark::Counter(
        static_cast<double>(reserve), benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
    state.counters["workspace_bytes"] = benchmark::Counter(
        static_cast<double>(v.workspace_bytes(imdb_config(), DType::f32, longest, kImdbBatch)),
        benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

void run_case(benchmark::State& state, const ImdbCase& c) {
    if (auto why = why_not_runnable(*c.variant)) {
        state.SkipWithError(why->c_str());
        return;
    }
    set_cpu_threads(c.threads);
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_passes(state, c);
    } catch (const std::exception& e) {
        fail_case(state, e.what());
    }
}

// The paper's CPU sweep: 1, 2, 4, ... below the core count, then the core count itself.
std::vector<int> default_sweep() {
    const int cores = all_cpu_threads();
    std::vector<int> out;
    for (int k = 1; k < cores; k *= 2) out.push_back(k);
    out.push_back(cores);
    return out;
}

}  // namespace

std::vector<int> imdb_thread_counts(const BenchFlags& flags) {
    return flags.threads_given ? flags.threads : default_sweep();
}

void register_imdb_cases(const BenchFlags& flags) {
    const std::vector<int> threads = imdb_thread_counts(flags);
    for (ImdbMode mode : {ImdbMode::fwd, ImdbMode::grad})
        for (const Variant* v : variants_on(Device::cpu))
            for (const std::string& path : case_paths(*v, flags))
                for (int k : threads) {
                    const ImdbCase c{mode, v, path, k, flags.warmup_steps};
                    // Real time: the work runs on an OpenMP team (see braun_bench.cpp).
                    register_case(case_name(c),
                                  [c](benchmark::State& state) { run_case(state, c); })
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
}

}  // namespace lstm::bench
