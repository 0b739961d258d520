#pragma once

// Global batches for every head and the shards ranks cut from them, for tests/dist.

#include <cstdint>
#include <random>
#include <vector>

#include "lstm/nn/model.hpp"
#include "test_util.hpp"

namespace lstm::test {

// A global batch as SequenceModel takes it: x (T, N, I) time-major, lengths (N) or empty, targets
// as the head reads them, target_lengths (N) for ctc.
struct GlobalBatch {
    int64_t steps = 0, batch = 0, input = 0;
    std::vector<double> x;
    std::vector<int64_t> lengths, targets, target_lengths;
};

// Random data for `head` with `classes` classes. CTC targets have 1 or 2 labels (never the blank
// 0) and inputs at least 5 steps long, so every sample can be aligned.
inline GlobalBatch make_batch(nn::Head head, int64_t steps, int64_t batch, int64_t input,
                              int64_t classes, bool variable_lengths, uint64_t seed) {
    std::mt19937_64 rng(seed);
    GlobalBatch b;
    b.steps = steps;
    b.batch = batch;
    b.input = input;
    b.x = random_vector(static_cast<size_t>(steps * batch * input), seed + 1);
    auto draw = [&rng](int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    if (variable_lengths)
        for (int64_t n = 0; n < batch; ++n)
            b.lengths.push_back(draw(head == nn::Head::ctc ? 5 : 1, steps));
    if (head == nn::Head::ce_every_frame) {
        for (int64_t k = 0; k < steps * batch; ++k) b.targets.push_back(draw(0, classes - 1));
    } else if (head == nn::Head::ctc) {
        for (int64_t n = 0; n < batch; ++n) {
            b.target_lengths.push_back(draw(1, 2));
            for (int64_t k = 0; k < b.target_lengths.back(); ++k)
                b.targets.push_back(draw(1, classes - 1));
        }
    } else {
        for (int64_t n = 0; n < batch; ++n) b.targets.push_back(draw(0, classes - 1));
    }
    return b;
}

// Sequences [begin, begin + count) of `global`, with their targets, in precision T.
template <typename T>
struct Shard {
    std::vector<T> x;
    std::vector<int64_t> lengths, targets, target_lengths;
    int64_t steps = 0, batch = 0, input = 0;

    TensorView<const T> view() const {
        return TensorView<const T>(x.data(), {steps, batch, input});
    }
};

template <typename T>
Shard<T> cut_shard(const GlobalBatch& g, nn::Head head, int64_t begin, int64_t count) {
    Shard<T> s;
    s.steps = g.steps;
    s.batch = count;
    s.input = g.input;
    for (int64_t t = 0; t < g.steps; ++t)
        for (int64_t n = begin; n < begin + count; ++n)
            for (int64_t i = 0; i < g.input; ++i)
                s.x.push_back(
                    static_cast<T>(g.x[static_cast<size_t>((t * g.batch + n) * g.input + i)]));
    if (!g.lengths.empty())
        s.lengths.assign(g.lengths.begin() + begin, g.lengths.begin() + begin + count);
    if (head == nn::Head::ce_every_frame) {
        for (int64_t t = 0; t < g.steps; ++t)
            for (int64_t n = begin; n < begin + count; ++n)
                s.targets.push_back(g.targets[static_cast<size_t>(t * g.batch + n)]);
    } else if (head == nn::Head::ctc) {
        int64_t offset = 0;
        for (int64_t n = 0; n < begin; ++n) offset += g.target_lengths[static_cast<size_t>(n)];
        for (int64_t n = begin; n < begin + count; ++n) {
            const int64_t len = g.target_lengths[static_cast<size_t>(n)];
            s.target_lengths.push_back(len);
            for (int64_t k = 0; k < len; ++k)
                s.targets.push_back(g.targets[static_cast<size_t>(offset + k)]);
            offset += len;
        }
    } else {
        s.targets.assign(g.targets.begin() + begin, g.targets.begin() + begin + count);
    }
    return s;
}

}  // namespace lstm::test
