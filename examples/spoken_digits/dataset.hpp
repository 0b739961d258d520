// Spoken-digits example: the utterances of one task as training data (features, labels,
// lengths) and the length-bucketed batches the training loop takes them in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.hpp"

namespace spoken_digits {

// Frame counts are trimmed down to a multiple of this by dropping trailing frames. espeak-ng
// ends every utterance with at least 87 ms in which no sample exceeds 1% of full scale
// (measured over make_data.sh's default 4000-utterance set), so at most 70 ms of that silence
// goes, and no speech. It makes lengths coarse enough that a variant without per-sequence
// lengths, which must take batches of one exact length, finds full batches (the 2000 connected
// strings of that set have 278 distinct frame counts before trimming, 40 after).
constexpr int64_t kFrameQuantum = 8;

// The utterances of one split: (frames, kMelBands) features, their labels (one class id for an
// isolated digit, the digits in order for a string), frame counts.
struct Dataset {
    std::vector<std::vector<float>> sequences;
    std::vector<std::vector<int64_t>> labels;
    std::vector<int64_t> lengths;
    int64_t frames() const;
    int64_t label_count() const;
};

struct Splits {
    Dataset train, heldout;
};

// The task's utterances of DATA_DIR/manifest.tsv (isolated: single digits; connected: strings
// of several), split as the manifest says; features cached in DATA_DIR/<task>_features.bin.
// Throws lstm::Error when a split is empty or a file is unreadable.
Splits load_task(const std::string& data_dir, Task task);

// Batches of at most `batch` utterance indices of similar length in an order shuffled by `seed`
// (nn::bucket_by_length). With exact_lengths each bucket is further cut where the length
// changes, so every batch is of one frame count and nn::pad_sequences adds no padding.
std::vector<std::vector<int64_t>> make_batches(const Dataset& d, int64_t batch, uint64_t seed,
                                               bool exact_lengths);

}  // namespace spoken_digits
