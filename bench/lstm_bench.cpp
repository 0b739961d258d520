// lstm_bench: the published LSTM benchmark workloads, or any stack shape (--lstm_shape), on every
// registered variant and device.
// Run with --help for the flags; docs/benchmarks.md describes what is timed and counted.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "activations_bench.hpp"
#include "braun_bench.hpp"
#include "case_failures.hpp"
#include "contention.hpp"
#include "ctc_bench.hpp"
#include "deepbench_bench.hpp"
#include "flags.hpp"
#include "host_context.hpp"
#include "imdb_bench.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "lstm/variants/fused.hpp"
#include "pair_bench.hpp"
#include "shape_bench.hpp"

namespace {

// The display reporter, with work to do just before the first case runs. Google Benchmark
// reports the context then and only then: a run that only lists the cases
// (--benchmark_list_tests) or whose filter matches none never gets there, and so skips the work
// (the FMA peak alone takes about 0.2 s per thread count).
class BeforeFirstCase : public benchmark::BenchmarkReporter {
public:
    // `before` returns whether the cases may run.
    BeforeFirstCase(benchmark::BenchmarkReporter& display, std::function<bool()> before)
        : display_(display), before_(std::move(before)) {}

    bool ReportContext(const Context& context) override {
        return before_() && display_.ReportContext(context);
    }
    void ReportRuns(const std::vector<Run>& runs) override { display_.ReportRuns(runs); }
    void Finalize() override { display_.Finalize(); }

private:
    benchmark::BenchmarkReporter& display_;
    std::function<bool()> before_;
};

}  // namespace

int main(int argc, char** argv) {
    lstm::bench::BenchFlags flags;
    std::vector<lstm::bench::PassShape> shapes;
    try {
        flags = lstm::bench::parse_bench_flags(&argc, argv);
        shapes = lstm::bench::parse_shapes(flags.shapes);
        // A bad LSTM_MAX_CPU_ISA or LSTM_FUSED_ISA is named here, before every case that uses it
        // would fail with it.
        (void)lstm::kernels::cpu::isa_cap();
        try {
            (void)lstm::cpu::default_fused_isa();
        } catch (const lstm::Unsupported&) {
            // A well-formed LSTM_FUSED_ISA this CPU cannot run fails the fused cases alone, each
            // with this reason, while the other variants' cases still run.
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lstm_bench: %s\n", e.what());
        return 2;
    }
    benchmark::Initialize(&argc, argv, lstm::bench::print_help);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    // Every count a CPU case runs with: braun, deepbench, shape and loss/ctc use --lstm_threads,
    // bahrampour its own sweep unless that flag is given.
    std::vector<int> cpu_threads = flags.threads;
    if (!shapes.empty()) {
        // A shape asked for is what the run is for; the built-in cases would take hours beside it.
        lstm::bench::register_shape_cases(shapes, flags);
    } else {
        lstm::bench::register_braun_cases(flags);
        lstm::bench::register_pair_cases(flags);
        lstm::bench::register_ctc_cases(flags);
        lstm::bench::register_imdb_cases(flags);
        lstm::bench::register_deepbench_cases(flags);
        lstm::bench::register_activation_cases();
        for (int k : lstm::bench::imdb_thread_counts(flags)) cpu_threads.push_back(k);
    }
    std::unique_ptr<lstm::bench::BusyProcesses> busy;
    bool busy_failed = false;
    BeforeFirstCase display(*benchmark::CreateDefaultDisplayReporter(), [&] {
        lstm::bench::add_host_context(cpu_threads);
        // After the peak measurement, which must see the machine alone.
        try {
            busy = std::make_unique<lstm::bench::BusyProcesses>(flags.busy_processes);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "lstm_bench: %s\n", e.what());
            busy_failed = true;
            return false;
        }
        benchmark::AddCustomContext("busy_processes", std::to_string(busy->count()));
        return true;
    });
    benchmark::RunSpecifiedBenchmarks(&display);
    benchmark::Shutdown();
    if (busy_failed) return 2;
    // Cases that cannot run here (no CUDA device, a variant without a feature) are not counted:
    // they are reported, and a run that includes them is still a success.
    if (const int failed = lstm::bench::failed_cases(); failed > 0) {
        std::fprintf(stderr, "lstm_bench: %d failed case run%s (ERROR OCCURRED above)\n", failed,
                     failed == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
