#pragma once

// The four workloads of Braun 2018, "LSTM Benchmarks for Deep Learning Frameworks", exactly as
// docs/benchmarks.md ("The cases") states them, and the synthetic batch each one
// trains on.

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "lstm/config.hpp"

namespace lstm::bench {

// Every scenario shares these (the paper's speech-like setting).
constexpr int64_t kBraunInputSize = 123;
constexpr int64_t kBraunHidden = 320;
constexpr double kBraunAdamLr = 1e-3;

// The published CTC batch: lengths np.linspace(500, 1000, 32) truncated to integers.
constexpr int64_t kCtcBatch = 32;
constexpr int64_t kCtcShortest = 500;
constexpr int64_t kCtcLongest = 1000;
// The paper's targets: 100 labels per sample drawn from 1..57, blank 0, 59 output classes.
constexpr int64_t kCtcLabelsPerSample = 100;
constexpr int64_t kCtcLabelMin = 1;
constexpr int64_t kCtcLabelMax = 57;
constexpr int64_t kCtcBlank = 0;

constexpr std::array<int64_t, kCtcBatch> ctc_lengths() {
    std::array<int64_t, kCtcBatch> out{};
    const double step = double(kCtcLongest - kCtcShortest) / double(kCtcBatch - 1);
    for (size_t k = 0; k < out.size(); ++k)
        out[k] = static_cast<int64_t>(double(kCtcShortest) + step * double(k));
    // numpy pins the last point to `stop` exactly instead of trusting start + step * k.
    out[out.size() - 1] = kCtcLongest;
    return out;
}

constexpr int64_t sum_of(const std::array<int64_t, kCtcBatch>& values) {
    int64_t total = 0;
    for (int64_t v : values) total += v;
    return total;
}

// The published total; a different sum would mean the truncation differs from numpy's.
static_assert(sum_of(ctc_lengths()) == 23985, "Braun's CTC lengths must sum to 23,985");

enum class BraunLoss {
    ce_last_step,  // dense (no bias) on each sequence's last step, softmax CE, batch mean
    ctc,           // dense (no bias) on every frame, CTC with blank kCtcBlank
};

enum class BraunLengths {
    all_full,      // every sequence has length T
    ctc_linspace,  // ctc_lengths()
};

struct BraunScenario {
    const char* name;  // as in docs/benchmarks.md, part of the benchmark name
    Config config;
    int64_t batch;    // N
    int64_t seq_len;  // T (padded length for ctc_linspace)
    BraunLengths lengths;
    BraunLoss loss;
    int64_t classes;
};

inline const std::vector<BraunScenario>& braun_scenarios() {
    const Config one_layer{kBraunInputSize, kBraunHidden, 1, false};
    const Config four_layers_bi{kBraunInputSize, kBraunHidden, 4, true};
    static const std::vector<BraunScenario> all = {
        {"1x320-CE-short", one_layer, 64, 100, BraunLengths::all_full, BraunLoss::ce_last_step, 10},
        {"1x320-CE-long", one_layer, 32, 1000, BraunLengths::all_full, BraunLoss::ce_last_step, 10},
        {"4x320-CE-long", four_layers_bi, 32, 1000, BraunLengths::all_full, BraunLoss::ce_last_step,
         10},
        {"4x320-CTC-long", four_layers_bi, kCtcBatch, kCtcLongest, BraunLengths::ctc_linspace,
         BraunLoss::ctc, 59},
    };
    return all;
}

// The one batch a scenario trains on, reused every step as in the paper.
struct BraunData {
    std::vector<float> x;          // (T, N, I) uniform in [-1, 1], padded positions included
    std::vector<int64_t> lengths;  // (N)
    // ce_last_step: (N) class indices; ctc: kCtcLabelsPerSample labels per sample, concatenated.
    std::vector<int64_t> targets;
    std::vector<int64_t> target_lengths;  // ctc: (N), each kCtcLabelsPerSample; else empty
};

// Any fixed values do; fixed so that every run and every variant times identical work.
constexpr uint64_t kBraunDataSeed = 2018;
constexpr uint64_t kBraunTargetSeed = 2019;

inline BraunData make_braun_data(const BraunScenario& s) {
    BraunData d;
    std::mt19937_64 rng(kBraunDataSeed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    d.x.resize(static_cast<size_t>(s.seq_len * s.batch * s.config.input_size));
    for (float& v : d.x) v = static_cast<float>(uniform(rng));

    if (s.lengths == BraunLengths::ctc_linspace) {
        const auto lengths = ctc_lengths();
        d.lengths.assign(lengths.begin(), lengths.end());
    } else {
        d.lengths.assign(static_cast<size_t>(s.batch), s.seq_len);
    }

    std::mt19937_64 target_rng(kBraunTargetSeed);
    if (s.loss == BraunLoss::ctc) {
        std::uniform_int_distribution<int64_t> label(kCtcLabelMin, kCtcLabelMax);
        d.targets.resize(static_cast<size_t>(s.batch * kCtcLabelsPerSample));
        for (int64_t& t : d.targets) t = label(target_rng);
        d.target_lengths.assign(static_cast<size_t>(s.batch), kCtcLabelsPerSample);
    } else {
        std::uniform_int_distribution<int64_t> label(0, s.classes - 1);
        d.targets.resize(static_cast<size_t>(s.batch));
        for (int64_t& t : d.targets) t = label(target_rng);
    }
    return d;
}

}  // namespace lstm::bench
