#include "pair_bench.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "braun.hpp"
#include "braun_bench.hpp"
#include "case_failures.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/registry.hpp"
#include "pair_stats.hpp"
#include "register_case.hpp"
#include "threads.hpp"

namespace lstm::bench {

namespace {

// The peer every other CPU variant is paired with: the vendor kernels the speed targets name.
constexpr const char* kPeer = "onednn";

// Pairs recorded before the loop starts, so that the timed loop does not allocate while Google
// Benchmark's iteration count stays under it.
constexpr size_t kReservedPairs = 4096;

struct PairCase {
    const BraunScenario* scenario;
    const Variant* variant;
    std::string path;  // the variant's; empty: its default (the peer always takes its default)
    const Variant* peer;
    Precision precision;  // both sides'
    int threads;
    int warmup_steps;
};

// One model of the pair, with the batch it trains on.
class PairSide {
public:
    PairSide(const BraunScenario& s, const Variant& v, const std::string& path, Precision precision,
             const BraunData& data)
        : scenario_(s),
          variant_(v),
          config_(braun_model_config(s)),
          model_(config_, v.name(), v.device(), kBraunModelSeed),
          data_(data) {
        if (!path.empty()) model_.lstm().set_path(path);
        model_.lstm().set_precision(precision);
    }

    // The reference check before timing: nullopt when it passes, else why not (named).
    std::optional<std::string> check() {
        auto why = braun_reference_verdict(scenario_, variant_, config_, model_, data_);
        if (why) return std::string(variant_.name()) + ": " + *why;
        return std::nullopt;
    }

    // Seconds of wall time for one training step; throws lstm::Error on a non-finite loss.
    double step() {
        const BraunScenario& s = scenario_;
        const TensorView<const float> x(data_.x.data(),
                                        {s.seq_len, s.batch, config_.lstm.input_size});
        const auto start = std::chrono::steady_clock::now();
        const float loss = model_.train_step(x, Span<const int64_t>(data_.lengths),
                                             Span<const int64_t>(data_.targets),
                                             Span<const int64_t>(data_.target_lengths));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // A diverged step would time a different computation (NaN propagation), not training.
        if (!std::isfinite(loss)) fail(variant_.name(), ": training step produced loss ", loss);
        benchmark::DoNotOptimize(loss);
        return seconds;
    }

private:
    const BraunScenario& scenario_;
    const Variant& variant_;
    nn::ModelConfig config_;
    nn::SequenceModel<float> model_;
    const BraunData& data_;
};

void time_pairs(benchmark::State& state, const PairCase& c) {
    const BraunScenario& s = *c.scenario;
    const BraunData data = make_braun_data(s);
    PairSide a(s, *c.variant, c.path, c.precision, data), b(s, *c.peer, "", c.precision, data);
    for (PairSide* side : {&a, &b}) {
        if (auto why = side->check()) {
            fail_case(state, *why);
            return;
        }
    }
    for (int k = 0; k < c.warmup_steps; ++k) {
        a.step();
        b.step();
    }
    std::vector<double> a_seconds, b_seconds;
    a_seconds.reserve(kReservedPairs);
    b_seconds.reserve(kReservedPairs);
    for (auto _ : state) {
        // Alternating which side goes first cancels a drift that favours the first (or second)
        // step of a pair.
        const bool a_first = a_seconds.size() % 2 == 0;
        const double first = a_first ? a.step() : b.step();
        const double second = a_first ? b.step() : a.step();
        a_seconds.push_back(a_first ? first : second);
        b_seconds.push_back(a_first ? second : first);
        state.SetIterationTime(first + second);
    }
    if (a_seconds.empty()) return;
    const PairStats stats = pair_stats(a_seconds, b_seconds);
    state.counters["ratio"] = stats.ratio;
    state.counters["ratio_min"] = stats.ratio_min;
    state.counters["ratio_max"] = stats.ratio_max;
    state.counters["ms"] = stats.a_ms;
    state.counters["peer_ms"] = stats.b_ms;
}

void run_pair(benchmark::State& state, const PairCase& c) {
    // Every pair that cannot run is reported with its reason, never dropped.
    for (const Variant* v : {c.variant, c.peer}) {
        if (auto why = why_braun_not_runnable(*c.scenario, *v)) {
            state.SkipWithError((std::string(v->name()) + ": " + *why).c_str());
            return;
        }
    }
    set_cpu_threads(c.threads);
    // Google Benchmark does not catch: an exception would end the whole run, not just this case.
    try {
        time_pairs(state, c);
    } catch (const std::exception& e) {
        fail_case(state, e.what());
    }
}

}  // namespace

void register_pair_cases(const BenchFlags& flags) {
    const Variant* peer = nullptr;
    for (const Variant* v : variants())
        if (v->device() == Device::cpu && std::string(v->name()) == kPeer) peer = v;
    if (peer == nullptr) return;  // a build without oneDNN has nothing to pair with
    for (const BraunScenario& s : braun_scenarios())
        for (const Variant* v : variants()) {
            if (v->device() != Device::cpu || v == peer) continue;
            // A precision both sides compute in (the peer's bf16 where it has one).
            std::vector<Precision> precisions;
            for (Precision p : case_precisions(*v, s.config)) {
                const std::vector<Precision> peer_has = case_precisions(*peer, s.config);
                if (std::find(peer_has.begin(), peer_has.end(), p) != peer_has.end())
                    precisions.push_back(p);
            }
            for (const std::string& path : case_paths(*v, flags))
                for (Precision precision : precisions)
                    for (int threads : flags.threads) {
                        const PairCase c{&s, v, path, peer, precision, threads, flags.warmup_steps};
                        const std::string name = std::string("pair/") + s.name + "/cpu/" +
                                                 v->name() + ":" + kPeer + path_part(path) +
                                                 precision_part(precision) +
                                                 "/threads:" + std::to_string(threads);
                        // Manual time: each iteration reports the pair's two steps.
                        register_case(name, [c](benchmark::State& state) { run_pair(state, c); })
                            ->UseManualTime()
                            ->Unit(benchmark::kMillisecond);
                    }
        }
}

}  // namespace lstm::bench
