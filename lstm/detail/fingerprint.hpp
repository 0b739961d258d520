#pragma once

// A 64-bit fingerprint of a host byte range, for noticing that a buffer a layer keeps a view of
// changed between two calls (lstm::Lstm checks x, h0 and c0 from forward to backward). Not a
// cryptographic hash: it only has to make an accidental match of different contents unlikely.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lstm::detail {

// `bytes` bytes at `data` (host memory); 0 bytes give the seed.
inline uint64_t fingerprint(const void* data, size_t bytes) {
    // Eight bytes per step so a few megabytes of x cost well under a millisecond; the odd
    // multiplier and the xor-shift (SplitMix64's constants) spread every input bit over the state.
    constexpr uint64_t kSeed = 0x9E3779B97F4A7C15ULL, kMul = 0xBF58476D1CE4E5B9ULL;
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t h = kSeed ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        h = (h ^ w) * kMul;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, bytes - i);
    h = (h ^ tail) * kMul;
    return h ^ (h >> 32);
}

}  // namespace lstm::detail
