#include "peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <thread>

#include "kernels/cpu/bf16_native.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/error.hpp"

namespace lstm::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// A probe shorter than this is mostly timer resolution and call overhead.
constexpr double kMinProbeSeconds = 2e-3;

// One thread's peak loop: runs `iterations` rounds, returns the FLOPs done.
using PeakLoop = int64_t (*)(int64_t iterations);

// Iterations of `loop` that take about `seconds` on the calling thread. Grown from a short probe
// rather than fixed, since one iteration costs from ~2 ns (AVX-512, two FMA ports) to tens of ns
// (Highway's scalar fallback).
int64_t iterations_for(PeakLoop loop, double seconds) {
    int64_t probe = int64_t{1} << 12;
    for (;;) {
        const Clock::time_point start = Clock::now();
        loop(probe);
        const double took = seconds_since(start);
        if (took >= kMinProbeSeconds)
            return std::max<int64_t>(1, static_cast<int64_t>(double(probe) * seconds / took));
        probe *= 4;
    }
}

// The peak of `loop` on a team of `threads` (measure_fma_peak_gflops); `what` names the caller.
double measure_peak_gflops(PeakLoop loop, const char* what, int threads, int rounds,
                           double round_seconds) {
    check(threads >= 1, what, ": threads = ", threads, " must be >= 1");
    check(rounds >= 1, what, ": rounds = ", rounds, " must be >= 1");
    check(std::isfinite(round_seconds) && round_seconds > 0, what,
          ": round_seconds = ", round_seconds, " must be positive and finite");
    const int64_t iterations = iterations_for(loop, round_seconds);
    double best = 0;
    for (int r = 0; r < rounds; ++r) {
        double flops = 0;
        Clock::time_point start;
        double seconds = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        {
            // The clock starts once the whole team is there (the barrier; a single's own barrier
            // comes after it), so a thread still waking up does not stretch the timed span.
#pragma omp barrier
#pragma omp single
            start = Clock::now();
            flops += static_cast<double>(loop(iterations));
#pragma omp barrier
#pragma omp single
            seconds = seconds_since(start);
        }
        // The reduction counts the threads the runtime actually gave (OMP_THREAD_LIMIT may cap
        // it), so the peak is that team's.
        if (seconds > 0) best = std::max(best, flops / seconds / 1e9);
    }
    return best;
}

// lstm_bench runs its cases one at a time, so one map per loop without a lock serves them.
std::map<int, double>& measured_peaks(PeakLoop loop) {
    static std::map<PeakLoop, std::map<int, double>> peaks;
    return peaks[loop];
}

// The kept peak of `loop` for `threads` (fma_peak_gflops), measured now if it was not.
double kept_peak_gflops(PeakLoop loop, const char* what, int threads) {
    std::map<int, double>& peaks = measured_peaks(loop);
    const auto found = peaks.find(threads);
    if (found != peaks.end()) return found->second;
    auto measure = [&](int team) {
        return measure_peak_gflops(loop, what, team, kPeakRounds, kPeakRoundSeconds);
    };
    double peak = measure(threads);
    // The host may run a guest's vCPUs on fewer cores for a while: on a 2-vCPU EPYC Zen 4 guest,
    // 4 of 48 start-ups measured 2 threads at 1 thread's peak, all 5 rounds, and a case then
    // reported peak_frac 1.75. So while K threads (up to the processors) measure more than 10%
    // under K times one thread, they measure again after a pause, keeping the best. SMT siblings
    // share one core's FMA units and legitimately measure less; for them the retries cost their
    // time and change nothing.
    if (threads > 1 && threads <= omp_get_num_procs()) {
        const double single = kept_peak_gflops(loop, what, 1);
        for (int retry = 0; retry < kPeakRetries && peak < 0.9 * threads * single; ++retry) {
            std::this_thread::sleep_for(kPeakRetryPause);
            peak = std::max(peak, measure(threads));
        }
    }
    peaks.emplace(threads, peak);
    return peak;
}

}  // namespace

double measure_fma_peak_gflops(int threads, int rounds, double round_seconds) {
    return measure_peak_gflops(kernels::cpu::fma_peak_loop, "measure_fma_peak_gflops", threads,
                               rounds, round_seconds);
}

void measure_fma_peaks(const std::vector<int>& thread_counts) {
    for (int threads : thread_counts) fma_peak_gflops(threads);
}

double fma_peak_gflops(int threads) {
    return kept_peak_gflops(kernels::cpu::fma_peak_loop, "fma_peak_gflops", threads);
}

bool bf16_peak_runs() { return kernels::cpu::cpu_has_avx512_bf16(); }

double measure_bf16_peak_gflops(int threads, int rounds, double round_seconds) {
    // Checked before the team starts, so the refusal is not thrown inside a parallel region.
    kernels::cpu::bf16_dot_peak_loop(0);
    return measure_peak_gflops(kernels::cpu::bf16_dot_peak_loop, "measure_bf16_peak_gflops",
                               threads, rounds, round_seconds);
}

double bf16_peak_gflops(int threads) {
    kernels::cpu::bf16_dot_peak_loop(0);
    return kept_peak_gflops(kernels::cpu::bf16_dot_peak_loop, "bf16_peak_gflops", threads);
}

}  // namespace lstm::bench
