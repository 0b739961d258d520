#pragma once

// lstm_bench's own command-line flags, and the parser lstm_dist_bench shares for its own. They
// are parsed (and removed from argv) before benchmark::Initialize, which would otherwise reject
// them as unknown.

#include <string>
#include <string_view>
#include <vector>

#include "lstm/tensor.hpp"

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
    // --lstm_shape=SHAPE[;SHAPE...], each flag's value as given, in order (shape_bench.hpp parses
    // them); the only flag that may be given more than once. With any, lstm_bench registers the
    // shape cases alone.
    std::vector<std::string> shapes;
    // --lstm_all_paths=1: the per-pass, Braun, pair and IMDB cases time every path of each
    // variant (Variant::paths, "/path:<name>" in the case name) instead of its default one.
    int all_paths = 0;
};

// Untimed warm-up repeats for a case on `device`: --lstm_warmup_steps, plus one on CUDA. There a
// call that repeats the previous one is captured into a graph and only later repeats replay it
// (lstm/variants/cuda_fused.hpp), so with one warm-up step the first timed step is the capture:
// a Braun GPU case timed for a single step (the long ones) timed the capture, up to 3.2x a
// replayed step on an H200.
inline int warmup_repeats(const BenchFlags& flags, Device device) {
    return flags.warmup_steps + (device == Device::cuda ? 1 : 0);
}

// One --lstm_NAME=VALUE flag with integer values in [min, max]: one value, stored in *value, or
// a comma-separated list of distinct values, stored in *list (exactly one of the two is set).
struct IntFlag {
    std::string_view name;  // with its leading "--", e.g. "--lstm_threads"
    int min, max;
    int* value = nullptr;
    std::vector<int>* list = nullptr;
};

// Removes every --lstm_* argument from argv (shifting the rest down and updating *argc; argv stays
// null-terminated) and stores its value through its flag in `flags`; a flag not given keeps what
// it points to. Throws std::invalid_argument naming the argument when it is not one of `flags`,
// has no "=VALUE", is given twice, has a value that is not an integer in range, or repeats a list
// item: each would otherwise run something other than what was asked for.
void consume_int_flags(int* argc, char** argv, const std::vector<IntFlag>& flags);

// The most CPU threads per rank or busy processes a flag may ask for: beyond 16 per processor a
// case measures nothing but the scheduler, and that many spinning processes would leave the
// machine unusable for the run.
int max_cpu_workers();

// Consumes every --lstm_* argument of argv (shifting the rest down and updating *argc); throws
// std::invalid_argument naming the flag when one is unknown or malformed.
BenchFlags parse_bench_flags(int* argc, char** argv);

// Google Benchmark's help followed by ours; handed to benchmark::Initialize for --help.
void print_help();

}  // namespace lstm::bench
