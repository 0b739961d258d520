#pragma once

// Evaluating CTC models: greedy (best-path) decoding and the label error rate, i.e. the edit
// distance between decoded and reference label sequences over the number of reference labels.
// Host code; it allocates its results (decoding is evaluation, not the training step).

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "lstm/detail/argmax.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::loss {

// Greedy decoding of a time-major batch: for each sample n, the class with the highest score at
// each frame t < input_lengths[n] (as torch.argmax: the lowest index on ties, NaN as the
// largest), consecutive repeats merged, blanks dropped. scores (T, N, C) host: logits,
// log-probabilities or probabilities alike, since the argmax is the same; input_lengths (N) each
// in 1..T, or empty for all T. Frames past a sample's length are never read. Returns N label
// sequences.
// Throws lstm::Error on a bad shape, length or blank index.
template <typename T>
std::vector<std::vector<int64_t>> ctc_greedy_decode(TensorView<const T> scores,
                                                    Span<const int64_t> input_lengths = {},
                                                    int64_t blank = 0) {
    constexpr const char* fn = "ctc_greedy_decode";
    check(scores.rank() == 3, fn, ": scores must have rank 3 (T, N, C), got shape ",
          scores.shape_string());
    check(scores.device() == Device::cpu, fn, ": scores is on ", to_string(scores.device()),
          ", but only cpu tensors are supported");
    const int64_t steps = scores.size(0), batch = scores.size(1), classes = scores.size(2);
    check(classes >= 1, fn, ": scores must have C >= 1 classes, got shape ", scores.shape_string());
    check(blank >= 0 && blank < classes, fn, ": blank = ", blank,
          " is out of range for C = ", classes, " classes (expected 0..", classes - 1, ")");
    check(input_lengths.empty() || input_lengths.size == batch, fn,
          ": input_lengths must have N = ", batch, " elements (or none for all T), got ",
          input_lengths.size);
    check(steps >= 1 || batch == 0, fn, ": scores must have T >= 1 frames, got shape ",
          scores.shape_string());
    check(scores.numel() == 0 || scores.data() != nullptr, fn, ": scores has no data");
    check(input_lengths.empty() || input_lengths.data != nullptr, fn,
          ": input_lengths has no data");
    std::vector<std::vector<int64_t>> out(batch);
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t length = input_lengths.empty() ? steps : input_lengths[n];
        check(length >= 1, fn, ": input_lengths[", n, "] = ", length, " must be >= 1");
        check(length <= steps, fn, ": input_lengths[", n, "] = ", length, " exceeds T = ", steps);
        int64_t previous = -1;
        for (int64_t t = 0; t < length; ++t) {
            const int64_t best =
                lstm::detail::argmax_row(scores.data() + (t * batch + n) * classes, classes);
            if (best != blank && best != previous) out[n].push_back(best);
            previous = best;
        }
    }
    return out;
}

// Same for mutable scores, so that callers need not spell out the const view.
template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>>
std::vector<std::vector<int64_t>> ctc_greedy_decode(TensorView<T> scores,
                                                    Span<const int64_t> input_lengths = {},
                                                    int64_t blank = 0) {
    return ctc_greedy_decode(TensorView<const T>(scores), input_lengths, blank);
}

// Levenshtein distance between two label sequences: the fewest insertions, deletions and
// substitutions (each costing 1) that turn hypothesis into reference.
inline int64_t edit_distance(const std::vector<int64_t>& hypothesis,
                             const std::vector<int64_t>& reference) {
    // Row i of the table: distances from hypothesis[0, i) to every prefix of reference.
    std::vector<int64_t> row(reference.size() + 1), next(reference.size() + 1);
    for (size_t j = 0; j <= reference.size(); ++j) row[j] = static_cast<int64_t>(j);
    for (size_t i = 1; i <= hypothesis.size(); ++i) {
        next[0] = static_cast<int64_t>(i);
        for (size_t j = 1; j <= reference.size(); ++j) {
            const int64_t substitute = row[j - 1] + (hypothesis[i - 1] != reference[j - 1]);
            next[j] = std::min({substitute, row[j] + 1, next[j - 1] + 1});
        }
        std::swap(row, next);
    }
    return row[reference.size()];
}

// Edits and reference labels summed over a set of sequences, so that rates can be accumulated
// over batches: add the counts, divide once.
struct LabelErrors {
    int64_t edits = 0;
    int64_t reference_labels = 0;

    LabelErrors& operator+=(const LabelErrors& other) {
        edits += other.edits;
        reference_labels += other.reference_labels;
        return *this;
    }
    // edits / reference_labels; throws lstm::Error when there are no reference labels.
    double rate() const {
        check(reference_labels > 0, "label error rate: the references hold no labels (", edits,
              " edits), so the rate is undefined");
        return static_cast<double>(edits) / static_cast<double>(reference_labels);
    }
};

// The edit distances of hypotheses[i] to references[i], summed, and the total reference length.
inline LabelErrors label_errors(const std::vector<std::vector<int64_t>>& hypotheses,
                                const std::vector<std::vector<int64_t>>& references) {
    check(hypotheses.size() == references.size(), "label_errors: ", hypotheses.size(),
          " hypotheses but ", references.size(), " references");
    LabelErrors out;
    for (size_t i = 0; i < references.size(); ++i) {
        out.edits += edit_distance(hypotheses[i], references[i]);
        out.reference_labels += static_cast<int64_t>(references[i].size());
    }
    return out;
}

// Label error rate: sum of edit distances / sum of reference lengths (each sequence weighted by
// its length, not averaged per sequence). Throws lstm::Error when the references hold no labels.
inline double label_error_rate(const std::vector<std::vector<int64_t>>& hypotheses,
                               const std::vector<std::vector<int64_t>>& references) {
    return label_errors(hypotheses, references).rate();
}

}  // namespace lstm::loss
