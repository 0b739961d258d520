#pragma once

// The summary of a paired case (pair_bench.hpp): per-pair ratios and medians. Kept apart from
// Google Benchmark so that tests/pair_stats_test.cpp checks it against hand-worked values.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "lstm/error.hpp"

namespace lstm::bench {

struct PairStats {
    double ratio;      // median over pairs of a / b
    double ratio_min;  // the smallest and largest a / b
    double ratio_max;
    double a_ms;  // median of a, milliseconds
    double b_ms;  // median of b
};

// The middle value of v (the mean of the two middle ones for an even count); v is taken by value
// because it is reordered. Throws lstm::Error for an empty v.
inline double median_of(std::vector<double> v) {
    check(!v.empty(), "median_of: no values");
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    if (v.size() % 2 == 1) return *mid;
    return (*std::max_element(v.begin(), mid) + *mid) / 2;
}

// a_seconds[i] and b_seconds[i]: the two steps of pair i (host vectors of one length >= 1).
inline PairStats pair_stats(const std::vector<double>& a_seconds,
                            const std::vector<double>& b_seconds) {
    constexpr double kMsPerSecond = 1e3;
    check(!a_seconds.empty() && a_seconds.size() == b_seconds.size(),
          "pair_stats: a_seconds and b_seconds must hold one value per pair (at least one), got ",
          a_seconds.size(), " and ", b_seconds.size());
    std::vector<double> ratios(a_seconds.size());
    for (size_t i = 0; i < ratios.size(); ++i) ratios[i] = a_seconds[i] / b_seconds[i];
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    return {median_of(ratios), *lo, *hi, median_of(a_seconds) * kMsPerSecond,
            median_of(b_seconds) * kMsPerSecond};
}

}  // namespace lstm::bench
