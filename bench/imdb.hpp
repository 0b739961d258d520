#pragma once

// The LSTM sentiment model of Bahrampour et al. 2016, "Comparative Study of Deep Learning
// Software Frameworks" (docs/benchmarks.md, "Bahrampour 2016"), and the fixed batches it
// runs on. No embedding layer: the inputs are random 128-wide vectors standing in for the
// embedded words (the lookup is not what is measured).

#include <array>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "lstm/config.hpp"

namespace lstm::bench {

constexpr int64_t kImdbInput = 128;   // the embedding width
constexpr int64_t kImdbHidden = 128;  // one LSTM layer, unidirectional
constexpr int64_t kImdbBatch = 16;
constexpr int64_t kImdbClasses = 2;  // dense 128 -> 2 with bias, softmax CE, batch mean
constexpr int64_t kImdbBatches = 16;

inline Config imdb_config() { return Config{kImdbInput, kImdbHidden, 1, false}; }

// The sequence lengths of the 16 batches a case cycles through, each sorted by length. The
// paper's IMDB data has lengths 12..99 and is sorted by length, so a batch of 16 consecutive
// reviews has nearly equal lengths and the padded length per batch averages about 71. These
// batches reproduce that: a sorted set of 16,384 lengths L_k = 12 + floor(88 q_k^0.45),
// q_k = (k + 0.5) / 16384 (a density rising towards long reviews, cut at 100 as the paper's is),
// cut into 1,024 batches of 16, of which 16 evenly spaced ones are taken: batch b is number
// round(b * 1023 / 15), from the shortest (lengths 12..15) to the longest (all 99). Padded lengths
// sum to 1,136 (mean 71.0); valid steps sum to 18,159 (mean 70.9 per sequence).
using ImdbLengths = std::array<int64_t, kImdbBatch>;
inline constexpr std::array<ImdbLengths, kImdbBatches> kImdbLengths = {{
    {12, 13, 13, 13, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15},
    {37, 37, 37, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38},
    {47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47},
    {54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54, 54},
    {60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60},
    {65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65},
    {70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70},
    {74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74, 74},
    {78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78, 78},
    {81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81},
    {85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85, 85},
    {88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88},
    {91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91, 91},
    {94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94, 94},
    {97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97},
    {99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99},
}};

constexpr int64_t padded_steps_of(const std::array<ImdbLengths, kImdbBatches>& all) {
    int64_t total = 0;
    for (const ImdbLengths& b : all) {
        int64_t longest = 0;
        for (int64_t len : b) longest = len > longest ? len : longest;
        total += longest;
    }
    return total;
}
constexpr int64_t valid_steps_of(const std::array<ImdbLengths, kImdbBatches>& all) {
    int64_t total = 0;
    for (const ImdbLengths& b : all)
        for (int64_t len : b) total += len;
    return total;
}
// The distribution the docs state; a typo in the table would change these.
static_assert(padded_steps_of(kImdbLengths) == 1136, "IMDB padded lengths must average 71.0");
static_assert(valid_steps_of(kImdbLengths) == 18159, "IMDB valid steps must sum to 18,159");

// One batch: padded length T = its longest sequence.
struct ImdbBatch {
    int64_t seq_len = 0;           // T
    std::vector<int64_t> lengths;  // (N)
    std::vector<float> x;          // (T, N, 128) uniform in [-1, 1], padded positions included
    std::vector<int64_t> targets;  // (N) class 0 or 1
};

// Any fixed values do; fixed so that every run and every variant times identical work.
constexpr uint64_t kImdbDataSeed = 2016;
constexpr uint64_t kImdbTargetSeed = 2017;

// The kImdbBatches batches, built once per case (about 2.3 MB of inputs).
inline std::vector<ImdbBatch> make_imdb_batches() {
    std::mt19937_64 rng(kImdbDataSeed), target_rng(kImdbTargetSeed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::uniform_int_distribution<int64_t> label(0, kImdbClasses - 1);
    std::vector<ImdbBatch> out;
    for (const ImdbLengths& lengths : kImdbLengths) {
        ImdbBatch b;
        b.lengths.assign(lengths.begin(), lengths.end());
        for (int64_t len : lengths) b.seq_len = len > b.seq_len ? len : b.seq_len;
        b.x.resize(static_cast<size_t>(b.seq_len * kImdbBatch * kImdbInput));
        for (float& v : b.x) v = static_cast<float>(uniform(rng));
        b.targets.resize(static_cast<size_t>(kImdbBatch));
        for (int64_t& t : b.targets) t = label(target_rng);
        out.push_back(std::move(b));
    }
    return out;
}

}  // namespace lstm::bench
