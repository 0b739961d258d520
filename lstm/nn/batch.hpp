#pragma once

// Building training batches from variable-length sequences, as torch.nn.utils.rnn.pad_sequence
// and a length-bucketing sampler do: padded time-major inputs with their lengths (what every
// variant takes), CTC targets in the concatenated layout, and batches of similar lengths so that
// little of each batch is padding. Host memory throughout.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/memory.hpp"
#include "lstm/tensor.hpp"

namespace lstm::nn {

// A padded batch: x (T, N, I) time-major, or (N, T, I) with batch_first, zero past each
// sequence's end; lengths (N).
template <typename T>
struct PaddedBatch {
    std::vector<T> x;
    std::vector<int64_t> lengths;
    int64_t seq_len = 0, batch = 0, features = 0;
    bool batch_first = false;

    TensorView<const T> view() const {
        if (batch_first) return {x.data(), {batch, seq_len, features}};
        return {x.data(), {seq_len, batch, features}};
    }
};

// Pads sequences[indices[n]] into sequence n of the batch (all sequences when indices is empty).
// Each sequence is (length, features) row-major, length >= 1; T is the longest one's length
// (PyTorch's pad_sequence with padding_value 0 and the same batch_first).
template <typename T>
PaddedBatch<T> pad_sequences(const std::vector<std::vector<T>>& sequences, int64_t features,
                             const std::vector<int64_t>& indices = {}, bool batch_first = false) {
    check(features >= 1, "pad_sequences: features must be >= 1, got ", features);
    std::vector<int64_t> pick = indices;
    if (pick.empty()) {
        pick.resize(sequences.size());
        std::iota(pick.begin(), pick.end(), int64_t{0});
    }
    check(!pick.empty(), "pad_sequences: no sequences to pad");
    PaddedBatch<T> out;
    out.features = features;
    out.batch_first = batch_first;
    out.batch = static_cast<int64_t>(pick.size());
    for (int64_t n = 0; n < out.batch; ++n) {
        const int64_t i = pick[n];
        check(i >= 0 && i < static_cast<int64_t>(sequences.size()), "pad_sequences: indices[", n,
              "] = ", i, " is not a sequence (there are ", sequences.size(), ")");
        const int64_t size = static_cast<int64_t>(sequences[i].size());
        check(size >= features && size % features == 0, "pad_sequences: sequence ", i, " has ",
              size, " values, expected a positive multiple of features = ", features);
        out.lengths.push_back(size / features);
        out.seq_len = std::max(out.seq_len, size / features);
    }
    // Padding to the longest can need far more than the sequences hold (one long sequence among
    // many short ones): refuse by name what does not fit.
    MemoryRequest()
        .add("padded x", MemoryRequest::bytes({out.seq_len, out.batch, features}, sizeof(T)))
        .check([&] {
            return "pad_sequences (T " + std::to_string(out.seq_len) + ", N " +
                   std::to_string(out.batch) + ", features " + std::to_string(features) + ")";
        });
    out.x.assign(static_cast<size_t>(out.seq_len * out.batch * features), T(0));
    for (int64_t n = 0; n < out.batch; ++n) {
        const std::vector<T>& s = sequences[pick[n]];
        if (batch_first) {  // sequence n is one contiguous (T, I) block
            std::copy(s.begin(), s.end(), out.x.begin() + n * out.seq_len * features);
            continue;
        }
        for (int64_t t = 0; t < out.lengths[n]; ++t)
            std::copy(s.begin() + t * features, s.begin() + (t + 1) * features,
                      out.x.begin() + (t * out.batch + n) * features);
    }
    return out;
}

// CTC targets of a batch in the concatenated layout ctc_loss and SequenceModel's ctc head take:
// the labels of every sample one after another, and how many belong to each.
struct CtcTargets {
    std::vector<int64_t> labels;
    std::vector<int64_t> lengths;
};

// targets[indices[n]] for each n (all when indices is empty).
inline CtcTargets concat_targets(const std::vector<std::vector<int64_t>>& targets,
                                 const std::vector<int64_t>& indices = {}) {
    CtcTargets out;
    const int64_t count = indices.empty() ? static_cast<int64_t>(targets.size())
                                          : static_cast<int64_t>(indices.size());
    for (int64_t n = 0; n < count; ++n) {
        const int64_t i = indices.empty() ? n : indices[n];
        check(i >= 0 && i < static_cast<int64_t>(targets.size()), "concat_targets: indices[", n,
              "] = ", i, " is not a target (there are ", targets.size(), ")");
        out.labels.insert(out.labels.end(), targets[i].begin(), targets[i].end());
        out.lengths.push_back(static_cast<int64_t>(targets[i].size()));
    }
    return out;
}

// Batches of at most batch_size sequence indices whose lengths are close: the indices sorted by
// length (ties by index), cut into consecutive batches, then the batches' order shuffled with
// `seed` (std::mt19937_64), so every epoch sees every sequence once with little padding. The
// order is std::shuffle's, which the standard leaves to the library: a seed gives the same order
// wherever the same C++ standard library runs (libstdc++ on Debian), not across libraries.
inline std::vector<std::vector<int64_t>> bucket_by_length(const std::vector<int64_t>& lengths,
                                                          int64_t batch_size, uint64_t seed) {
    check(batch_size >= 1, "bucket_by_length: batch_size must be >= 1, got ", batch_size);
    std::vector<int64_t> order(lengths.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return lengths[a] < lengths[b]; });
    std::vector<std::vector<int64_t>> batches;
    for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(batch_size)) {
        const size_t end = std::min(order.size(), begin + static_cast<size_t>(batch_size));
        batches.emplace_back(order.begin() + begin, order.begin() + end);
    }
    std::mt19937_64 rng(seed);
    std::shuffle(batches.begin(), batches.end(), rng);
    return batches;
}

}  // namespace lstm::nn
