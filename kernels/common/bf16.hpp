#pragma once

// bfloat16: the upper half of an IEEE binary32 (1 sign bit, the same 8 exponent bits, 7 of the 23
// mantissa bits), so it spans float's range with 8 significant bits (relative spacing 2^-7, a
// rounding error of at most 2^-9 relative). Mixed-precision training (Kalamkar et al. 2019;
// oneDNN's and cuDNN's bf16 RNNs) rounds the operands of the matrix products to it and keeps the
// sums, the gate math and c in fp32.
//
// The conversion is written here rather than taken from an instruction or a library, so a value
// rounds the same on every target: to the nearest bf16, ties to the one whose last mantissa bit is
// 0 (IEEE round-to-nearest-even, what VCVTNEPS2BF16 and PyTorch's float->bfloat16 do for normal
// numbers); a value past the largest finite bf16 (after rounding) becomes an infinity of its sign;
// infinities stay; NaN stays NaN, made quiet, its sign kept. Subnormal inputs are rounded like any
// other value here; the AVX512_BF16 instructions treat them as zero, so a path that uses those
// flushes first (and says so).

#include <cstdint>
#include <cstring>

#if !defined(__CUDACC__)
#include <algorithm>
#include <cmath>
#endif

#if !defined(LSTM_HOST_DEVICE)
#if defined(__CUDACC__)
#define LSTM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LSTM_HOST_DEVICE inline
#endif
#endif

namespace lstm::kernels {

// The bits of the bf16 nearest to x (see above).
LSTM_HOST_DEVICE uint16_t bf16_bits(float x) {
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    // Adding 0x7fff rounds the dropped half to nearest; the kept half's lowest bit breaks a tie
    // towards even. A carry out of the mantissa moves the exponent, up to infinity.
    const uint32_t lowest_kept = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7fffu + lowest_kept) >> 16);
}

// The float whose upper half is `bits` (exact: every bf16 is a float).
LSTM_HOST_DEVICE float bf16_to_float(uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float x = 0.0f;
    std::memcpy(&x, &u, sizeof(x));
    return x;
}

// x rounded to bf16 and kept as a float: what a product sees of an operand rounded there.
LSTM_HOST_DEVICE float round_to_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

#if !defined(__CUDACC__)
// The exponent of the spacing between the bf16 values around a finite nonzero x: 8 significant
// bits above bf16's smallest normal exponent, a fixed 2^-133 below it.
inline int bf16_spacing_exponent(double x) { return std::max(std::ilogb(x), -126) - 7; }

// x rounded to the nearest bf16 in one step (not through float, whose own rounding could move a
// value onto a tie), ties to even, past the largest finite bf16 to infinity: the double oracle's
// rounding points. For a float x it gives round_to_bf16(float(x)).
inline double round_to_bf16(double x) {
    if (!std::isfinite(x) || x == 0.0) return std::isnan(x) ? std::nan("") : x;
    const int quantum = bf16_spacing_exponent(x);
    const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
    const double largest = std::ldexp(255.0, 120);  // (2 - 2^-7) 2^127
    return std::abs(r) > largest ? std::copysign(HUGE_VAL, x) : r;
}

// dst (rows, cols) dense <- src (rows, cols) with rows `ld` apart, each element rounded to bf16:
// an operand as a product at Precision::bf16 reads it. Host memory.
template <typename T>
void round_rows_to_bf16(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = round_to_bf16(src[r * ld + j]);
}
#endif

}  // namespace lstm::kernels
