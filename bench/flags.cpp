#include "flags.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "shape_bench.hpp"
#include "threads.hpp"
#include "tools/parse_int.hpp"

namespace lstm::bench {

namespace {

constexpr std::string_view kPrefix = "--lstm_";
constexpr int kMaxPerProcessor = 16;

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

// One item of `arg`'s value (`whole`: the value is that one item). An empty item or one of a
// list, quoted alone ("got ''"), would not say which argument held it, so then the message quotes
// the whole argument too.
int parse_item(const IntFlag& flag, std::string_view arg, std::string_view item, bool whole) {
    if (const auto value = cli::parse_int(item, flag.min, flag.max)) return *value;
    std::string message = cli::int_range_message(flag.name, flag.min, flag.max, item);
    if (item.empty() || !whole) message += " in '" + std::string(arg) + "'";
    throw std::invalid_argument(message);
}

void parse_flag(const IntFlag& flag, std::string_view arg) {
    const std::string_view text = arg.substr(flag.name.size() + 1);
    if (flag.value != nullptr) {
        *flag.value = parse_item(flag, arg, text, true);
        return;
    }
    std::vector<int> values;
    for (size_t start = 0;;) {
        const size_t comma = text.find(',', start);
        const std::string_view item = text.substr(start, comma - start);
        const int value = parse_item(flag, arg, item, item.size() == text.size());
        // Each item registers its cases; a repeat would run and report every one of them twice.
        if (std::find(values.begin(), values.end(), value) != values.end())
            throw std::invalid_argument(std::string(flag.name) + " lists " + std::to_string(value) +
                                        " twice in '" + std::string(arg) + "'");
        values.push_back(value);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    *flag.list = std::move(values);
}

// Removes every --lstm_shape=VALUE from argv (as consume_int_flags does) and returns the values.
// A list flag of strings, unlike the integer flags: several of them add up.
std::vector<std::string> consume_shape_flags(int* argc, char** argv) {
    constexpr std::string_view kShape = "--lstm_shape";
    std::vector<std::string> values;
    int kept = 1;
    for (int i = 1; i < *argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == kShape)
            throw std::invalid_argument(
                "flag --lstm_shape takes its value after '=' "
                "(--lstm_shape=VALUE), got '" +
                std::string(arg) + "'");
        if (starts_with(arg, std::string(kShape) + "="))
            values.emplace_back(arg.substr(kShape.size() + 1));
        else
            argv[kept++] = argv[i];
    }
    *argc = kept;
    argv[kept] = nullptr;
    return values;
}

}  // namespace

int max_cpu_workers() { return kMaxPerProcessor * all_cpu_threads(); }

void consume_int_flags(int* argc, char** argv, const std::vector<IntFlag>& flags) {
    std::vector<std::string_view> given;
    int kept = 1;  // argv[0] stays
    for (int i = 1; i < *argc; ++i) {
        const std::string_view arg = argv[i];
        if (!starts_with(arg, kPrefix)) {
            argv[kept++] = argv[i];
            continue;
        }
        const std::string_view name = arg.substr(0, arg.find('='));
        const auto flag = std::find_if(flags.begin(), flags.end(),
                                       [&](const IntFlag& f) { return f.name == name; });
        if (flag == flags.end())
            throw std::invalid_argument("unknown flag '" + std::string(arg) +
                                        "' (see --help for the --lstm_* flags)");
        // Google Benchmark's flags take "--name VALUE" nowhere either; the VALUE would be left
        // over as an unrecognised argument.
        if (name == arg)
            throw std::invalid_argument("flag " + std::string(name) +
                                        " takes its value after '=' (" + std::string(name) +
                                        "=VALUE), got '" + std::string(arg) + "'");
        // The last one would win without a word, hiding which value a run used.
        if (std::find(given.begin(), given.end(), name) != given.end())
            throw std::invalid_argument("flag " + std::string(name) + " is given more than once");
        given.push_back(name);
        parse_flag(*flag, arg);
    }
    *argc = kept;
    argv[kept] = nullptr;  // argv is null-terminated by the C standard; keep it so
}

BenchFlags parse_bench_flags(int* argc, char** argv) {
    BenchFlags flags;
    flags.shapes = consume_shape_flags(argc, argv);
    consume_int_flags(
        argc, argv,
        {{"--lstm_threads", 1, max_cpu_workers(), nullptr, &flags.threads},
         {"--lstm_warmup_steps", 0, std::numeric_limits<int>::max(), &flags.warmup_steps},
         {"--lstm_busy_processes", 0, max_cpu_workers(), &flags.busy_processes},
         {"--lstm_all_paths", 0, 1, &flags.all_paths}});
    flags.threads_given = !flags.threads.empty();
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
        "  [--lstm_shape=SHAPE[;SHAPE...]]\n"
        "                               time these stack shapes instead of the built-in cases:\n"
        "                               shape/<shape>/<fwd|fwd_bwd>/<device>/<variant>/..., for\n"
        "                               every variant, each checked against the reference first.\n"
        "                               SHAPE is %s\n"
        "                               (defaults: layers=1, dirs=1, proj=0: none, bias=1), e.g.\n"
        "                               "
        "--lstm_shape='T=100,N=64,I=123,H=320;T=25,N=16,I=512,H=512'\n"
        "  [--lstm_all_paths=1]         deepbench/, shape/, braun/, pair/ and imdb cases time\n"
        "                               every path of each variant (fused: avx512, avx2, eigen,\n"
        "                               ... as this CPU runs them), named\n"
        "                               .../<variant>/path:<name>/... (pair/:\n"
        "                               .../<variant>:onednn/path:<name>/...)\n"
        "  Each flag at most once (--lstm_shape as often as wanted), its value after '='.\n"
        "\nExit status: 0 every case ran or cannot run here (reported with its reason), 1 a case\n"
        "failed (ERROR OCCURRED: a reference check, a non-finite loss, an exception), 2 usage.\n"
        "\nFor mean and standard deviation, pass --benchmark_repetitions=N (e.g. 5) and\n"
        "--benchmark_report_aggregates_only=true.\n"
        "\nBefore the cases run (not when they are only listed), this machine's fp32 FMA peak is\n"
        "measured for every CPU thread count the cases use (about 0.2 s each); CPU cases report\n"
        "peak_frac = GFLOP/s / that peak. The context printed first names the CPU, its\n"
        "instruction sets and the path each variant takes on it (docs/benchmarks.md, \"Peak and\n"
        "paths\").\n",
        all_cpu_threads(), kShapeSyntax);
}

}  // namespace lstm::bench
