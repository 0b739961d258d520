// Highway's per-target compilation of the small kernels behind kernels/cpu/simd.hpp: this file is
// included once per target by hwy/foreach_target.h, and the HWY_ONCE part dispatches.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/simd.cpp"
#include "kernels/cpu/simd.hpp"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <mutex>

HWY_BEFORE_NAMESPACE();
namespace lstm::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t target_bits() { return HWY_TARGET; }

int64_t float_lanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

// One FMA on each chain. The chains are separate variables, not an array: scalable vectors
// (ARM's SVE) are sizeless types, which cannot be array elements.
template <class V, class... Chains>
HWY_INLINE void fma_each(V a, V b, Chains&... chain) {
    ((chain = hn::MulAdd(chain, a, b)), ...);
}

int64_t fma_peak_chains(int64_t iterations) {
    const hn::ScalableTag<float> d;
    // 12 independent chains: FMA latency (4-5 cycles) times two FMA ports is at most 10 in flight,
    // and 12 accumulators plus 2 operands fit AVX2's 16 registers.
    constexpr int kChains = 12;
    const auto a = hn::Set(d, 0.999f), b = hn::Set(d, 1e-7f);
    auto c0 = hn::Set(d, 0.0f), c1 = hn::Set(d, 1.0f), c2 = hn::Set(d, 2.0f), c3 = hn::Set(d, 3.0f),
         c4 = hn::Set(d, 4.0f), c5 = hn::Set(d, 5.0f), c6 = hn::Set(d, 6.0f), c7 = hn::Set(d, 7.0f),
         c8 = hn::Set(d, 8.0f), c9 = hn::Set(d, 9.0f), c10 = hn::Set(d, 10.0f),
         c11 = hn::Set(d, 11.0f);
    for (int64_t it = 0; it < iterations; ++it)
        fma_each(a, b, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11);
    // Keeps the chains alive: the sum is returned through a volatile store.
    const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)),
                                     hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
                             hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
    volatile float sink = hn::GetLane(sum);
    (void)sink;
    return iterations * kChains * static_cast<int64_t>(hn::Lanes(d)) * 2;
}

}  // namespace HWY_NAMESPACE
}  // namespace lstm::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lstm::kernels::cpu {

HWY_EXPORT(target_bits);
HWY_EXPORT(float_lanes);
HWY_EXPORT(fma_peak_chains);

SimdCap narrowest_simd_cap() {
    if (HWY_TARGETS & HWY_SSE4) return SimdCap::sse4;
    if (HWY_TARGETS & HWY_AVX2) return SimdCap::avx2;
    return SimdCap::all;
}

const char* simd_baseline_name() { return hwy::TargetName(HWY_STATIC_TARGET); }

const char* simd_target_name() {
    apply_isa_cap();
    return hwy::TargetName(HWY_DYNAMIC_DISPATCH(target_bits)());
}

int64_t simd_float_lanes() {
    apply_isa_cap();
    return HWY_DYNAMIC_DISPATCH(float_lanes)();
}

void restrict_simd_to_avx2(bool avx2_max) {
    restrict_simd(avx2_max ? SimdCap::avx2 : SimdCap::all);
}

namespace {
// Whether isa_cap() is in force in the dispatch: set by the first restrict_simd(), which always
// includes it.
std::atomic<bool> cap_applied{false};
}  // namespace

void restrict_simd(SimdCap cap) {
    // The enumerators run from widest to narrowest, so the larger one is the tighter ceiling.
    // isa_cap() first: a malformed LSTM_MAX_CPU_ISA throws before the cap counts as applied.
    cap = std::max(cap, isa_cap());
    cap_applied.store(true, std::memory_order_release);
    const int64_t above_avx2 = HWY_AVX3 | HWY_AVX3_DL;
    const int64_t disabled = cap == SimdCap::avx2   ? above_avx2
                             : cap == SimdCap::sse4 ? above_avx2 | HWY_AVX2
                                                    : 0;
    // Replaces the disabled set (0 enables all again); Highway re-chooses the dispatched target.
    hwy::DisableTargets(disabled);
}

void apply_isa_cap() {
    // After any restrict_simd() there is nothing to do (and its narrower cap must stay); without
    // a ceiling, Highway's own choice stands. The first calls may come from every thread of a
    // team at once (the CTC loss runs samples in parallel): one applies the cap while the others
    // wait, so none of them dispatches past it.
    if (cap_applied.load(std::memory_order_acquire)) return;
    static std::once_flag once;
    std::call_once(once, [] {
        if (cap_applied.load(std::memory_order_acquire)) return;
        if (isa_cap() == SimdCap::all)
            cap_applied.store(true, std::memory_order_release);
        else
            restrict_simd(SimdCap::all);
    });
}

int64_t supported_targets() {
    apply_isa_cap();
    const int64_t targets = hwy::SupportedTargets();
    // SupportedTargets() has just pointed the dispatch at the widest target the CPU has; point it
    // back at the capped set it returned.
    hwy::GetChosenTarget().Update(targets);
    return targets;
}

int64_t fma_peak_loop(int64_t iterations) {
    apply_isa_cap();
    return HWY_DYNAMIC_DISPATCH(fma_peak_chains)(iterations);
}

}  // namespace lstm::kernels::cpu
#endif
