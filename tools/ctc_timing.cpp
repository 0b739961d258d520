// Standalone timing of CTC forward + gradient on Braun's CTC shape: T 1000, N 32, C 59, L 100,
// input lengths linspace(500, 1000, 32), float logits, gradient w.r.t. the logits, reduction
// mean. Not built by CMake; compile by hand with the project's flags:
//
//   g++ -std=c++17 -O3 -march=native -fopenmp -I. tools/ctc_timing.cpp -o /tmp/ctc_timing
//   /tmp/ctc_timing [repetitions] [threads...]      (default: 50 repetitions, threads 1 2)
//
// Prints, per thread count, the minimum and median wall time of one call and the CPU time it
// used (all threads), in milliseconds. The workspace is allocated once, as a training loop does.

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "lstm/loss/ctc.hpp"

namespace {

double cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
    const int repetitions = argc > 1 ? std::atoi(argv[1]) : 50;
    std::vector<int> thread_counts;
    for (int i = 2; i < argc; ++i) thread_counts.push_back(std::atoi(argv[i]));
    if (thread_counts.empty()) thread_counts = {1, 2};

    const int64_t steps = 1000, batch = 32, classes = 59, labels = 100;
    std::mt19937_64 rng(2016);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(steps * batch * classes), grad(logits.size());
    for (float& v : logits) v = normal(rng);
    std::vector<int64_t> input_lengths(batch), target_lengths(batch, labels),
        targets(batch * labels);
    for (int64_t n = 0; n < batch; ++n)
        input_lengths[n] = std::llround(500.0 + 500.0 * static_cast<double>(n) / (batch - 1));
    for (int64_t& label : targets) label = 1 + static_cast<int64_t>(rng() % (classes - 1));

    lstm::loss::CtcArgs<float> args;
    args.logits = lstm::TensorView<const float>(logits.data(), {steps, batch, classes});
    args.targets = lstm::TensorView<const int64_t>(targets.data(), {batch, labels});
    args.input_lengths = input_lengths;
    args.target_lengths = target_lengths;
    args.reduction = lstm::loss::Reduction::mean;
    lstm::loss::CtcOutputs<float> outputs;
    outputs.grad_logits = lstm::TensorView<float>(grad.data(), {steps, batch, classes});

    const int most = *std::max_element(thread_counts.begin(), thread_counts.end());
    std::vector<unsigned char> workspace(lstm::loss::ctc_workspace_bytes(args, most));
    std::printf(
        "ctc forward+gradient, T %ld N %ld C %ld L %ld, lengths linspace(500, 1000, 32), "
        "float logits, %d repetitions, workspace %.1f MiB\n",
        static_cast<long>(steps), static_cast<long>(batch), static_cast<long>(classes),
        static_cast<long>(labels), repetitions, static_cast<double>(workspace.size()) / (1 << 20));
    for (const int threads : thread_counts) {
        omp_set_num_threads(threads);
        float loss = 0;
        for (int i = 0; i < 3; ++i)  // warm-up: page in the workspace, spin up the team
            loss = lstm::loss::ctc_loss(args, outputs, workspace.data(), workspace.size());
        std::vector<double> wall(repetitions), cpu(repetitions);
        for (int r = 0; r < repetitions; ++r) {
            const double c0 = cpu_ms();
            const auto t0 = std::chrono::steady_clock::now();
            loss = lstm::loss::ctc_loss(args, outputs, workspace.data(), workspace.size());
            const auto t1 = std::chrono::steady_clock::now();
            cpu[r] = cpu_ms() - c0;
            wall[r] = std::chrono::duration<double, std::milli>(t1 - t0).count();
        }
        std::sort(wall.begin(), wall.end());
        std::sort(cpu.begin(), cpu.end());
        std::printf(
            "threads %d: wall min %.2f ms, median %.2f ms; cpu min %.2f ms, median %.2f ms;"
            " loss %.6f\n",
            threads, wall.front(), wall[repetitions / 2], cpu.front(), cpu[repetitions / 2],
            static_cast<double>(loss));
    }
    return 0;
}
