#pragma once

// lstm_bench's own command-line flags. They are parsed (and removed from argv) before
// benchmark::Initialize, which would otherwise reject them as unknown.

#include <vector>

namespace lstm::bench {

struct BenchFlags {
    // --lstm_threads=K[,K...]: CPU thread counts to sweep; default all cores.
    std::vector<int> threads;
    // Whether --lstm_threads was given: cases with their own default sweep (Bahrampour's 1, 2,
    // 4, ... up to all cores) use it only then.
    bool threads_given = false;
    // --lstm_warmup_steps=N: untimed training steps per run before timing starts (first-touch
    // of the buffers a step allocates; Braun dropped 100 warm-up batches). Bahrampour cases run
    // N passes over their batches, DeepBench cases N times their timed call and its prerequisites.
    int warmup_steps = 1;
    // --lstm_busy_processes=N: competing processes that spin for the whole run (contention.hpp),
    // started after the peak measurement.
    int busy_processes = 0;
};

// Consumes every --lstm_* argument of argv (shifting the rest down and updating *argc); throws
// std::invalid_argument naming the flag when one is unknown or malformed.
BenchFlags parse_bench_flags(int* argc, char** argv);

// Google Benchmark's help followed by ours; handed to benchmark::Initialize for --help.
void print_help();

}  // namespace lstm::bench
