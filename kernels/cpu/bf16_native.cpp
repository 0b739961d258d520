// The AVX512_BF16 code (kernels/cpu/bf16_native.hpp). Each function that executes the
// instructions carries a target attribute instead of the whole file a -mavx512bf16 flag, so
// nothing else here (and no inline function a header brings in) is compiled for them.

#include "kernels/cpu/bf16_native.hpp"

#include "kernels/cpu/cpu_features.hpp"
#include "lstm/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LSTM_BF16_NATIVE 1
#define LSTM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#else
#define LSTM_BF16_NATIVE 0
#endif

namespace lstm::kernels::cpu {

namespace {

void require_bf16_native(const char* what) {
    if (!cpu_has_avx512_bf16())
        fail_as<Unsupported>(what, ": this CPU (or build) has no AVX512_BF16",
                             cpu_reports_avx512_bf16() ? isa_cap_note() : "");
}

#if LSTM_BF16_NATIVE
LSTM_BF16_TARGET int64_t dot_peak_chains(int64_t iterations) {
    // 12 chains, as the fp32 loop: the instruction's latency (5-6 cycles) times its throughput
    // (one or two per cycle) stays under 12 in flight.
    constexpr int kChains = 12;
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);  // bf16 pairs of 0.996
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // bf16 pairs of about 1e-7
    __m512 c[kChains];
    for (int k = 0; k < kChains; ++k) c[k] = _mm512_set1_ps(static_cast<float>(k));
    for (int64_t it = 0; it < iterations; ++it)
        for (int k = 0; k < kChains; ++k) c[k] = _mm512_dpbf16_ps(c[k], a, b);
    __m512 sum = c[0];
    for (int k = 1; k < kChains; ++k) sum = _mm512_add_ps(sum, c[k]);
    // Keeps the chains alive: a lane of the sum goes through a volatile store. (Not
    // _mm512_reduce_add_ps: GCC 12 warns inside it, its bug 105593.)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    volatile float sink = lanes[0];
    (void)sink;
    return iterations * kChains * 16 * 2 * 2;
}
#endif

}  // namespace

bool bf16_native_compiled() { return LSTM_BF16_NATIVE != 0; }

int64_t bf16_dot_peak_loop(int64_t iterations) {
    require_bf16_native("bf16_dot_peak_loop");
#if LSTM_BF16_NATIVE
    return dot_peak_chains(iterations);
#else
    (void)iterations;
    return 0;
#endif
}

}  // namespace lstm::kernels::cpu
