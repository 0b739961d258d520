// lstm_dist_bench: Braun's training step trained data-parallel (lstm/dist/) under mpirun, every
// rank on its shard of the scenario's global batch. Reports the time per GLOBAL batch (the
// slowest rank's step, allreduces included) as braun/<scenario>/cpu/<variant>/ranks:R/overlap:O,
// O = per_layer (DataParallel's default: each LSTM layer's allreduce starts when backward has
// finished that layer) or dense_head (only the head's overlaps; the LSTM's is one allreduce after
// the backward); the scaling efficiency against the 1-rank run is t_1 / (R * t_R).
//
//   mpirun -n 2 --bind-to none -x OMP_NUM_THREADS=1 lstm_dist_bench --lstm_threads=1
//
// Flags besides Google Benchmark's: print_dist_help below (docs/distributed.md has the same
// table). Iteration counts are fixed, not chosen by Google Benchmark, because every rank must run
// the same number of steps (each is a collective). Only rank 0 prints.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "braun.hpp"
#include "flags.hpp"
#include "lstm/dist/abort.hpp"
#include "lstm/dist/data_parallel.hpp"
#include "lstm/dist/mpi_backend.hpp"
#include "lstm/dist/mpi_environment.hpp"
#include "lstm/dist/shard.hpp"
#include "lstm/registry.hpp"
#include "threads.hpp"

namespace lstm::bench {
namespace {

struct DistFlags {
    int threads = 1, steps = 3, warmup_steps = 1;
};

// Consumes the --lstm_* flags of argv (the rest goes to Google Benchmark); throws
// std::invalid_argument naming a bad one, as lstm_bench does. Every rank sees the same command
// line, so every rank refuses it alike.
DistFlags parse_dist_flags(int* argc, char** argv) {
    DistFlags f;
    constexpr int kMaxSteps = std::numeric_limits<int>::max();
    consume_int_flags(argc, argv,
                      {{"--lstm_threads", 1, max_cpu_workers(), &f.threads},
                       {"--lstm_steps", 1, kMaxSteps, &f.steps},
                       {"--lstm_warmup_steps", 0, kMaxSteps, &f.warmup_steps}});
    return f;
}

void print_dist_help() {
    benchmark::PrintDefaultHelp();
    std::printf(
        "\nlstm_dist_bench flags (run it under mpirun; only rank 0 prints):\n"
        "  [--lstm_threads=K]           CPU threads per rank (default: 1; at most 16 per\n"
        "                               processor, %d here)\n"
        "  [--lstm_steps=N]             timed training steps per case (default: 3); fixed, since\n"
        "                               every rank must run the same number of collectives\n"
        "  [--lstm_warmup_steps=N]      untimed steps per case before timing (default: 1; with\n"
        "                               0 the first timed step also faults in the buffers)\n",
        max_cpu_workers());
}

// Google Benchmark answers --help (and --help=...) by printing and calling exit(0), which under
// mpirun ends the rank without MPI_Finalize, and mpirun then reports the job as failed.
bool asks_for_help(int argc, char** argv) {
    for (int k = 1; k < argc; ++k) {
        const std::string_view arg = argv[k];
        if (arg == "--help" || arg.substr(0, 7) == "--help=") return true;
    }
    return false;
}

nn::ModelConfig model_config(const BraunScenario& s) {
    nn::ModelConfig m;
    m.lstm = s.config;
    m.classes = s.classes;
    m.head = s.loss == BraunLoss::ctc ? nn::Head::ctc : nn::Head::ce_last_step;
    m.adam.lr = kBraunAdamLr;
    return m;
}

// This rank's sequences [begin, end) of the scenario's batch, as DataParallel takes them.
struct RankShard {
    std::vector<float> x;
    std::vector<int64_t> lengths, targets, target_lengths;
    int64_t batch = 0;
};

RankShard cut(const BraunScenario& s, const BraunData& d, dist::ShardRange r) {
    RankShard out;
    out.batch = r.size();
    const int64_t in = s.config.input_size;
    for (int64_t t = 0; t < s.seq_len; ++t) {
        const float* row = d.x.data() + (t * s.batch + r.begin) * in;
        out.x.insert(out.x.end(), row, row + r.size() * in);
    }
    out.lengths.assign(d.lengths.begin() + r.begin, d.lengths.begin() + r.end);
    if (s.loss == BraunLoss::ctc) {
        out.target_lengths.assign(d.target_lengths.begin() + r.begin,
                                  d.target_lengths.begin() + r.end);
        int64_t first = 0, count = 0;
        for (int64_t n = 0; n < r.begin; ++n) first += d.target_lengths[static_cast<size_t>(n)];
        for (int64_t v : out.target_lengths) count += v;
        out.targets.assign(d.targets.begin() + first, d.targets.begin() + first + count);
    } else {
        out.targets.assign(d.targets.begin() + r.begin, d.targets.begin() + r.end);
    }
    return out;
}

void time_case(benchmark::State& state, dist::Communicator& comm, const BraunScenario& s,
               const Variant& v, dist::Overlap overlap, const DistFlags& flags) {
    set_cpu_threads(flags.threads);
    const nn::ModelConfig m = model_config(s);
    const BraunData data = make_braun_data(s);
    const RankShard shard = cut(s, data, dist::shard_range(s.batch, comm.rank(), comm.size()));
    nn::SequenceModel<float> model(m, v.name(), Device::cpu, 0);
    dist::DataParallel<float> dp(model, comm, overlap);
    const TensorView<const float> x(shard.x.data(), {s.seq_len, shard.batch, m.lstm.input_size});
    auto step = [&] {
        return dp.train_step(x, shard.lengths, shard.targets, shard.target_lengths);
    };
    for (int k = 0; k < flags.warmup_steps; ++k) step();
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        const float loss = step();
        double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // The global batch is done when the slowest rank is (outside the timed span).
        MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        state.SetIterationTime(seconds);
        benchmark::DoNotOptimize(loss);
    }
    state.counters["ranks"] = comm.size();
    state.counters["threads_per_rank"] = flags.threads;
    state.counters["global_batch"] = static_cast<double>(s.batch);
}

// Swallows every report: ranks other than 0 run the cases (they are collectives) but print nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace lstm::bench

int main(int argc, char** argv) {
    using namespace lstm;
    dist::MpiEnvironment mpi(&argc, &argv);
    dist::MpiBackend host;
    dist::Communicator comm(host);
    // Usage errors end every rank alike with status 2 (each rank parses the same command line),
    // and MPI is finalised normally on the way out.
    if (bench::asks_for_help(argc, argv)) {
        if (comm.rank() == 0) bench::print_dist_help();
        return 0;
    }
    bench::DistFlags flags;
    try {
        flags = bench::parse_dist_flags(&argc, argv);
    } catch (const std::exception& e) {
        if (comm.rank() == 0) std::fprintf(stderr, "lstm_dist_bench: %s\n", e.what());
        return 2;
    }
    benchmark::Initialize(&argc, argv, bench::print_dist_help);
    if (argc > 1) {
        if (comm.rank() == 0) benchmark::ReportUnrecognizedArguments(argc, argv);
        return 2;
    }
    return dist::run_or_abort(comm, [&] {
        for (const bench::BraunScenario& s : bench::braun_scenarios()) {
            for (const Variant* v : variants_on(Device::cpu)) {
                // Skipped alike on every rank (the decision depends on nothing rank-local).
                if (v->supports(s.config, DType::f32)) continue;
                if (s.lengths != bench::BraunLengths::all_full && v->supports_variable_lengths())
                    continue;
                for (dist::Overlap overlap :
                     {dist::Overlap::per_layer, dist::Overlap::dense_head}) {
                    const std::string name = std::string("braun/") + s.name + "/cpu/" + v->name() +
                                             "/ranks:" + std::to_string(comm.size()) +
                                             "/overlap:" + dist::to_string(overlap);
                    benchmark::RegisterBenchmark(
                        name.c_str(),
                        [&comm, &s, v, overlap, flags](benchmark::State& state) {
                            bench::time_case(state, comm, s, *v, overlap, flags);
                        })
                        ->UseManualTime()
                        ->Iterations(flags.steps)
                        ->Unit(benchmark::kMillisecond);
                }
            }
        }
        if (comm.rank() == 0) {
            benchmark::RunSpecifiedBenchmarks();
        } else {
            bench::SilentReporter silent;
            benchmark::RunSpecifiedBenchmarks(&silent);
        }
        return 0;
    });
}
