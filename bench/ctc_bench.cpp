#include "ctc_bench.hpp"

#include <benchmark/benchmark.h>

#include <exception>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "braun.hpp"
#include "case_failures.hpp"
#include "kernels/cpu/simd.hpp"
#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/reference/ctc_reference.hpp"
#include "lstm/reference/tolerance.hpp"
#include "register_case.hpp"
#include "threads.hpp"

namespace lstm::bench {

namespace {

// Braun's CTC output layer has 59 classes (57 labels, blank, one unused).
constexpr int64_t kCtcClasses = 59;
// Any fixed value; fixed so every run times identical work.
constexpr uint64_t kLogitSeed = 2016;
// The kernel accumulates in double (docs/ctc.md), so its fp32 result carries only the final
// rounding: a few fp32 ulps, far below this.
constexpr double kCtcRtol = 1e-5;

struct CtcBatch {
    int64_t max_time = 0, batch = 0;
    std::vector<float> logits;  // (T, N, C) uniform in [-1, 1]
    std::vector<int64_t> input_lengths, targets, target_lengths;
};

CtcBatch make_ctc_batch() {
    const BraunScenario* scenario = nullptr;
    for (const BraunScenario& s : braun_scenarios())
        if (s.loss == BraunLoss::ctc) scenario = &s;
    const BraunData data = make_braun_data(*scenario);
    CtcBatch b;
    b.max_time = scenario->seq_len;
    b.batch = scenario->batch;
    b.input_lengths = data.lengths;
    b.targets = data.targets;
    b.target_lengths = data.target_lengths;
    std::mt19937_64 rng(kLogitSeed);
    b.logits.resize(static_cast<size_t>(b.max_time * b.batch * kCtcClasses));
    for (float& v : b.logits) v = static_cast<float>(detail::uniform(rng, -1.0, 1.0));
    return b;
}

loss::CtcArgs<float> ctc_args(const CtcBatch& b) {
    loss::CtcArgs<float> a;
    a.logits = TensorView<const float>(b.logits.data(), {b.max_time, b.batch, kCtcClasses});
    a.targets = TensorView<const int64_t>(b.targets.data(), {int64_t(b.targets.size())});
    a.input_lengths = Span<const int64_t>(b.input_lengths);
    a.target_lengths = Span<const int64_t>(b.target_lengths);
    a.blank = kCtcBlank;
    a.reduction = loss::Reduction::mean;
    return a;
}

// The kernel's loss and logits gradient against the double oracle on the bench's own batch.
std::optional<std::string> check_ctc(const CtcBatch& b, float loss,
                                     const std::vector<float>& grad) {
    reference::CtcReferenceCase c;
    c.max_time = b.max_time;
    c.batch = b.batch;
    c.classes = kCtcClasses;
    c.input.assign(b.logits.begin(), b.logits.end());
    int64_t offset = 0;
    for (int64_t n = 0; n < b.batch; ++n) {
        c.targets.emplace_back(b.targets.begin() + offset,
                               b.targets.begin() + offset + b.target_lengths[n]);
        offset += b.target_lengths[n];
    }
    c.input_lengths = b.input_lengths;
    c.blank = kCtcBlank;
    const reference::CtcReferenceResult want = reference::ctc_reference(c);
    if (auto why = reference::check_close("loss", {double(loss)}, {want.loss}, kCtcRtol))
        return why;
    return reference::check_close("grad", std::vector<double>(grad.begin(), grad.end()), want.grad,
                                  kCtcRtol);
}

void time_ctc(benchmark::State& state, int threads) {
    set_cpu_threads(threads);
    const CtcBatch b = make_ctc_batch();
    const loss::CtcArgs<float> args = ctc_args(b);
    std::vector<float> grad(b.logits.size());
    loss::CtcOutputs<float> out;
    out.grad_logits = TensorView<float>(grad.data(), {b.max_time, b.batch, kCtcClasses});
    lstm::detail::AlignedBuffer workspace;
    const size_t bytes = loss::ctc_workspace_bytes(args);
    void* ws = workspace.reserve(bytes);
    const float first = loss::ctc_loss(args, out, ws, bytes);
    if (auto why = check_ctc(b, first, grad)) {
        fail_case(state, "reference check: " + *why);
        return;
    }
    for (auto _ : state) benchmark::DoNotOptimize(loss::ctc_loss(args, out, ws, bytes));
    state.counters["workspace_bytes"] = benchmark::Counter(
        static_cast<double>(bytes), benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

}  // namespace

void register_ctc_cases(const BenchFlags& flags) {
    // cpu-avx2: the kernel's AVX2 code on any host, standing in for AVX2-only machines.
    for (const bool avx2 : {false, true})
        for (int threads : flags.threads) {
            const std::string name = std::string(avx2 ? "loss/ctc/cpu-avx2" : "loss/ctc/cpu") +
                                     "/threads:" + std::to_string(threads);
            register_case(name,
                          [threads, avx2](benchmark::State& state) {
                              kernels::cpu::restrict_simd_to_avx2(avx2);
                              state.SetLabel(kernels::cpu::simd_target_name());
                              try {
                                  time_ctc(state, threads);
                              } catch (const std::exception& e) {
                                  fail_case(state, e.what());
                              }
                              kernels::cpu::restrict_simd_to_avx2(false);
                          })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
}

}  // namespace lstm::bench
