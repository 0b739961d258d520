// The summary of lstm_bench's paired cases (bench/pair_stats.hpp), against hand-worked values.

#include "bench/pair_stats.hpp"

#include <catch2/catch.hpp>
#include <vector>

using lstm::bench::median_of;
using lstm::bench::pair_stats;
using lstm::bench::PairStats;

TEST_CASE("median_of takes the middle value, or the mean of the middle two", "[bench]") {
    CHECK(median_of({3.0}) == 3.0);
    CHECK(median_of({5.0, 1.0, 3.0}) == 3.0);
    CHECK(median_of({4.0, 1.0, 3.0, 2.0}) == 2.5);
    CHECK(median_of({7.0, 7.0, 1.0, 9.0, 7.0}) == 7.0);
    CHECK_THROWS_WITH(median_of({}), Catch::Contains("no values"));
}

TEST_CASE("pair_stats: the ratio is the median of per-pair ratios, not a ratio of medians",
          "[bench]") {
    // Ratios 0.5, 2 and 1: median 1, extremes 0.5 and 2; the medians of a and b are 2 s each.
    const PairStats s = pair_stats({1.0, 4.0, 2.0}, {2.0, 2.0, 2.0});
    CHECK(s.ratio == 1.0);
    CHECK(s.ratio_min == 0.5);
    CHECK(s.ratio_max == 2.0);
    CHECK(s.a_ms == 2000.0);
    CHECK(s.b_ms == 2000.0);
    // Two pairs ran while the host was 10-20x slower. Their ratios (2 and 1) count once each like
    // any other, so the median ratio stays 1; the medians of a and b apart, (2 + 30) / 2 = 16 s
    // and (2 + 20) / 2 = 11 s, would give 1.45.
    const PairStats slow = pair_stats({1.0, 40.0, 2.0, 30.0}, {2.0, 20.0, 2.0, 30.0});
    CHECK(slow.ratio == 1.0);
    CHECK(slow.a_ms == 16000.0);
    CHECK(slow.b_ms == 11000.0);
}

TEST_CASE("pair_stats names mismatched or empty inputs", "[bench]") {
    CHECK_THROWS_WITH(pair_stats({1.0, 2.0}, {1.0}),
                      Catch::Contains("a_seconds and b_seconds") && Catch::Contains("got 2 and 1"));
    CHECK_THROWS_AS(pair_stats({}, {}), lstm::Error);
}
