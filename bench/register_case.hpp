#pragma once

// Every lstm_bench case is registered through register_case, which records after the case the
// load average of the machine it ran on (the `load_avg_1m` counter): the cases time wall clock on
// a machine that may be shared, and scripts/plot-bench.py warns from it when a repetition ran
// beside another job (docs/benchmarks.md, "Counters").

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "flags.hpp"
#include "lstm/variant.hpp"

namespace lstm::bench {

// The 1-minute load average now, or -1 where the system gives none.
inline double load_average_1m() {
    double load[1] = {0};
    return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

// Registers case `name` running `run`, followed by the `load_avg_1m` counter. It is read when the
// case's timed loop has ended, so its last minute covers a short case whole and a long one's end.
inline benchmark::internal::Benchmark* register_case(const std::string& name,
                                                     std::function<void(benchmark::State&)> run) {
    return benchmark::RegisterBenchmark(name.c_str(),
                                        [run = std::move(run)](benchmark::State& state) {
                                            run(state);
                                            state.counters["load_avg_1m"] = load_average_1m();
                                        });
}

// The paths a variant's cases time: every one of Variant::paths() with --lstm_all_paths=1, else
// one empty entry, the variant's default under its usual name.
inline std::vector<std::string> case_paths(const Variant& v, const BenchFlags& flags) {
    if (flags.all_paths) return v.paths(DType::f32);
    return {""};
}

// The part of a case name that names its path ("/path:avx2"; nothing for the default).
inline std::string path_part(const std::string& path) {
    return path.empty() ? std::string() : "/path:" + path;
}

// The precisions a variant's cases of an LSTM `config` time: full, and bf16 where the variant
// computes it (Variant::supports_precision), so a variant that gains a bf16 path is timed in it.
inline std::vector<Precision> case_precisions(const Variant& v, const Config& config) {
    std::vector<Precision> out = {Precision::full};
    if (!v.supports(config.core(), DType::f32) &&
        !v.supports_precision(config.core(), DType::f32, Precision::bf16))
        out.push_back(Precision::bf16);
    return out;
}

// The part of a case name that names its precision ("/bf16"; nothing for full).
inline std::string precision_part(Precision precision) {
    return precision == Precision::full ? std::string() : std::string("/") + to_string(precision);
}

}  // namespace lstm::bench
