#include "flags.hpp"

#include <benchmark/benchmark.h>

#include <charconv>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "threads.hpp"

namespace lstm::bench {

namespace {

constexpr std::string_view kPrefix = "--lstm_";
constexpr std::string_view kThreads = "--lstm_threads=";
constexpr std::string_view kWarmup = "--lstm_warmup_steps=";
constexpr std::string_view kBusy = "--lstm_busy_processes=";
// Beyond this many threads or busy processes per processor a case measures nothing but the
// scheduler, and that many spinning processes would leave the machine unusable for the run.
constexpr int kMaxPerProcessor = 16;

int parse_int(std::string_view text, std::string_view flag, int min, int max) {
    int value = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (err != std::errc() || end != text.data() + text.size() || value < min || value > max)
        throw std::invalid_argument(std::string(flag) + " expects integers from " +
                                    std::to_string(min) + " to " + std::to_string(max) + ", got '" +
                                    std::string(text) + "'");
    return value;
}

std::vector<int> parse_int_list(std::string_view text, std::string_view flag, int min, int max) {
    std::vector<int> out;
    for (size_t start = 0;;) {
        const size_t comma = text.find(',', start);
        out.push_back(parse_int(text.substr(start, comma - start), flag, min, max));
        if (comma == std::string_view::npos) return out;
        start = comma + 1;
    }
}

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

BenchFlags parse_bench_flags(int* argc, char** argv) {
    BenchFlags flags;
    int kept = 1;  // argv[0] stays
    for (int i = 1; i < *argc; ++i) {
        const std::string_view arg = argv[i];
        if (starts_with(arg, kThreads)) {
            flags.threads = parse_int_list(arg.substr(kThreads.size()), "--lstm_threads", 1,
                                           kMaxPerProcessor * all_cpu_threads());
            flags.threads_given = true;
        } else if (starts_with(arg, kWarmup)) {
            flags.warmup_steps = parse_int(arg.substr(kWarmup.size()), "--lstm_warmup_steps", 0,
                                           std::numeric_limits<int>::max());
        } else if (starts_with(arg, kBusy)) {
            flags.busy_processes = parse_int(arg.substr(kBusy.size()), "--lstm_busy_processes", 0,
                                             kMaxPerProcessor * all_cpu_threads());
        } else if (starts_with(arg, kPrefix)) {
            throw std::invalid_argument("unknown flag '" + std::string(arg) +
                                        "' (see --help for the --lstm_* flags)");
        } else {
            argv[kept++] = argv[i];
        }
    }
    *argc = kept;
    argv[kept] = nullptr;  // argv is null-terminated by the C standard; keep it so
    if (flags.threads.empty()) flags.threads = {all_cpu_threads()};
    return flags;
}

void print_help() {
    benchmark::PrintDefaultHelp();
    std::printf(
        "\nlstm_bench flags:\n"
        "  [--lstm_threads=K[,K...]]    CPU thread counts to sweep (default: all %d processors;\n"
        "                               bahrampour/: 1, 2, 4, ... and all processors; at most\n"
        "                               16 per processor)\n"
        "  [--lstm_warmup_steps=N]      untimed steps before timing (default: 1; CUDA cases\n"
        "                               one more, so that graph replays are timed): training\n"
        "                               steps; bahrampour/: passes over its 16 batches;\n"
        "                               deepbench/: the timed call with its prerequisites\n"
        "  [--lstm_busy_processes=N]    N competing processes spin for the whole run (default\n"
        "                               0, at most 16 per processor): how the cases cope with a\n"
        "                               shared machine\n"
        "\nFor mean and standard deviation, pass --benchmark_repetitions=N (e.g. 5) and\n"
        "--benchmark_report_aggregates_only=true.\n"
        "\nBefore the cases run, this machine's fp32 FMA peak is measured for every CPU thread\n"
        "count the cases use (about 0.2 s each); CPU cases report peak_frac = GFLOP/s / that\n"
        "peak. The context printed first names the CPU, its instruction sets and the path each\n"
        "variant takes on it (docs/benchmarks.md, \"Peak and paths\").\n",
        all_cpu_threads());
}

}  // namespace lstm::bench
