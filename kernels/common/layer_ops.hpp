#pragma once

// Per-element bodies of what lstm::Lstm does around a variant's calls: inter-layer dropout and
// the batch-first <-> time-major transposes. Plain host/device functions: the host loops
// (lstm/detail/layer_ops.hpp) and the CUDA kernels (kernels/cuda/layer_ops.cu) run these same
// bodies, so a seed draws the same dropout mask on every device. No CUDA header.

#include <cstdint>

#include "kernels/common/gates.hpp"  // LSTM_HOST_DEVICE

namespace lstm::kernels {

// SplitMix64's finalizer: a bijective 64-bit mix whose outputs pass BigCrush as a counter-based
// generator, so element k of a mask is mix(key + k * golden) with no state to carry between
// elements, threads or devices.
LSTM_HOST_DEVICE uint64_t splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The golden-ratio increment SplitMix64 steps its counter by.
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// Whether element `index` of the mask keyed by `key` survives dropout with probability p of
// dropping: a uniform draw in [0, 1) from 53 bits of the mixed counter, kept when >= p (so p = 0
// keeps everything and p = 1 nothing).
LSTM_HOST_DEVICE bool dropout_keeps(uint64_t key, int64_t index, double p) {
    const uint64_t bits = splitmix64(key + static_cast<uint64_t>(index + 1) * kGoldenGamma);
    const double u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
    return u >= p;
}

// Element idx of a dropout: mask[idx] = scale (kept) or 0, dst[idx] = src[idx] * mask[idx];
// overwrites both. scale = 1 / (1 - p), rounded to T once by the caller.
template <typename T>
LSTM_HOST_DEVICE void dropout_element(int64_t idx, uint64_t key, double p, T scale, const T* src,
                                      T* mask, T* dst) {
    const T m = dropout_keeps(key, idx, p) ? scale : T(0);
    mask[idx] = m;
    dst[idx] = src[idx] * m;
}

// Element idx of dst (B, A, C) <- src (A, B, C): swaps the two leading dimensions (time-major
// <-> batch-first). Overwrites dst[idx].
template <typename T>
LSTM_HOST_DEVICE void swap_leading_element(int64_t idx, int64_t a, int64_t b, int64_t c,
                                           const T* src, T* dst) {
    const int64_t row = idx / c, k = idx - row * c;  // row of dst = bi * a + ai
    const int64_t bi = row / a, ai = row - bi * a;
    dst[idx] = src[(ai * b + bi) * c + k];
}

}  // namespace lstm::kernels
