#pragma once

// A 64-bit fingerprint of a host byte range, for noticing that a buffer a layer keeps a view of
// changed between two calls (lstm::Lstm checks x, h0 and c0 from forward to backward). Not a
// cryptographic hash: it only has to make an accidental match of different contents unlikely.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lstm::detail {

// `bytes` bytes at `data` (host memory); 0 bytes give the seeds' mix.
inline uint64_t fingerprint(const void* data, size_t bytes) {
    // Each 8-byte word goes through a multiply and an xor-shift (SplitMix64's constants), which
    // spread every input bit over the state. One chain of them waits on the multiply's latency:
    // 3.2 ms for the 15.7 MB x of braun/1x320-CE-long, paid twice per training step on the
    // calling thread while the team idles (1.2% of the 2-thread step). Four chains over
    // interleaved words, with different seeds so that words swapped between chains still change
    // the result, took 1.4 ms (EPYC Zen 4, g++ -O2).
    constexpr uint64_t kSeed = 0x9E3779B97F4A7C15ULL, kMul = 0xBF58476D1CE4E5B9ULL;
    constexpr size_t kChains = 4, kWord = 8;
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t h[kChains];
    for (size_t j = 0; j < kChains; ++j) h[j] = (kSeed * (j + 1)) ^ bytes;
    auto mix = [](uint64_t state, uint64_t w) {
        state = (state ^ w) * kMul;
        return state ^ (state >> 29);
    };
    size_t i = 0;
    for (; i + kChains * kWord <= bytes; i += kChains * kWord)
        for (size_t j = 0; j < kChains; ++j) {
            uint64_t w;
            std::memcpy(&w, p + i + j * kWord, kWord);
            h[j] = mix(h[j], w);
        }
    for (; i + kWord <= bytes; i += kWord) {
        uint64_t w;
        std::memcpy(&w, p + i, kWord);
        h[0] = mix(h[0], w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, bytes - i);
    uint64_t out = mix(h[0], tail);
    for (size_t j = 1; j < kChains; ++j) out = mix(out, h[j]);
    return out ^ (out >> 32);
}

}  // namespace lstm::detail
