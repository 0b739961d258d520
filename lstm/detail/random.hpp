#pragma once

#include <cstdint>
#include <random>

namespace lstm::detail {

// A uniform draw in [lo, hi) from mt19937_64 through a fixed 53-bit mapping. Unlike
// std::uniform_real_distribution, whose output differs between standard libraries, a seed gives
// the same parameters everywhere.
inline double uniform(std::mt19937_64& rng, double lo, double hi) {
    const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // 53 random bits in [0, 1)
    return lo + (hi - lo) * unit;
}

}  // namespace lstm::detail
