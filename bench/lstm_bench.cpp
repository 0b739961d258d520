// lstm_bench: the published LSTM benchmark workloads on every registered variant and device.
// Run with --help for the flags; docs/benchmarks.md describes what is timed and counted.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
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

int main(int argc, char** argv) {
    lstm::bench::BenchFlags flags;
    try {
        flags = lstm::bench::parse_bench_flags(&argc, argv);
        // A bad LSTM_MAX_CPU_ISA or LSTM_FUSED_ISA is named here, before every case that uses it
        // would fail with it.
        (void)lstm::kernels::cpu::isa_cap();
        try {
            (void)lstm::cpu::fused_isa();
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
    lstm::bench::register_braun_cases(flags);
    lstm::bench::register_pair_cases(flags);
    lstm::bench::register_ctc_cases(flags);
    lstm::bench::register_imdb_cases(flags);
    lstm::bench::register_deepbench_cases(flags);
    lstm::bench::register_activation_cases();
    // Every count a CPU case runs with: braun, deepbench and loss/ctc use --lstm_threads,
    // bahrampour its own sweep unless that flag is given.
    std::vector<int> cpu_threads = flags.threads;
    for (int k : lstm::bench::imdb_thread_counts(flags)) cpu_threads.push_back(k);
    lstm::bench::add_host_context(cpu_threads);
    // After the peak measurement, which must see the machine alone.
    std::unique_ptr<lstm::bench::BusyProcesses> busy;
    try {
        busy = std::make_unique<lstm::bench::BusyProcesses>(flags.busy_processes);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lstm_bench: %s\n", e.what());
        return 2;
    }
    benchmark::AddCustomContext("busy_processes", std::to_string(busy->count()));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    // Cases that cannot run here (no CUDA device, a variant without a feature) are not counted:
    // they are reported, and a run that includes them is still a success.
    if (const int failed = lstm::bench::failed_cases(); failed > 0) {
        std::fprintf(stderr, "lstm_bench: %d failed case run%s (ERROR OCCURRED above)\n", failed,
                     failed == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
