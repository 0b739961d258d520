#include "host_context.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/cpu/simd.hpp"
#include "lstm/host_info.hpp"
#include "peak.hpp"

namespace lstm::bench {

void add_host_context(const std::vector<int>& cpu_thread_counts) {
    for (const HostFact& f : host_facts()) benchmark::AddCustomContext(f.key, f.value);
    for (const CodePath& p : code_paths()) {
        benchmark::AddCustomContext("path:" + p.name + "/" + p.device, p.path);
        if (!p.bf16.empty())
            benchmark::AddCustomContext("path:" + p.name + "/" + p.device + "/bf16", p.bf16);
    }

    std::vector<int> counts = cpu_thread_counts;
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    measure_fma_peaks(counts);
    for (int threads : counts) {
        char value[128];
        std::snprintf(value, sizeof value, "%.1f GFLOP/s fp32 FMA on %s, best of %d x %.0f ms",
                      fma_peak_gflops(threads), kernels::cpu::simd_target_name(), kPeakRounds,
                      kPeakRoundSeconds * 1e3);
        benchmark::AddCustomContext("fma_peak/threads:" + std::to_string(threads), value);
        if (bf16_peak_runs()) {
            std::snprintf(value, sizeof value,
                          "%.1f GFLOP/s bf16 dot products (VDPBF16PS), best of %d x %.0f ms",
                          bf16_peak_gflops(threads), kPeakRounds, kPeakRoundSeconds * 1e3);
            benchmark::AddCustomContext("bf16_peak/threads:" + std::to_string(threads), value);
        } else {
            benchmark::AddCustomContext("bf16_peak/threads:" + std::to_string(threads),
                                        "none: this CPU (or build) has no AVX512_BF16; a bf16 "
                                        "case's peak_frac divides by the fp32 FMA peak");
        }
    }
}

benchmark::Counter peak_fraction(double flops, benchmark::IterationCount iterations, double seconds,
                                 int threads, Precision precision) {
    constexpr double kFlopsPerGflop = 1e9;
    const double peak = precision == Precision::bf16 && bf16_peak_runs() ? bf16_peak_gflops(threads)
                                                                         : fma_peak_gflops(threads);
    if (!(seconds > 0) || !(peak > 0)) return benchmark::Counter(0);
    const double gflops = flops * static_cast<double>(iterations) / seconds / kFlopsPerGflop;
    return benchmark::Counter(gflops / peak);
}

}  // namespace lstm::bench
