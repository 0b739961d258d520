// Spoken-digits example: reads the manifest.tsv that make_data.sh writes (its header comment
// describes the columns). One Utterance per row, in file order, with the audio path made
// absolute (the manifest stores it relative to its own folder, so a data set can be moved).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spoken_digits {

// 0..9 are "zero".."nine", 10 is "oh".
constexpr int kNumClasses = 11;
// The spoken word of each class id.
extern const char* const kClassWords[kNumClasses];

struct Utterance {
    std::string path;             // the audio file, absolute
    std::string split;            // "train" or "heldout"
    std::vector<int64_t> labels;  // (digits,) class ids in spoken order
    std::string words;            // what was spoken, e.g. "three oh seven"
    std::string voice;            // espeak-ng voice (accent), e.g. "gmw/en-GB-x-rp"
    std::string variant;          // espeak-ng variant (timbre), e.g. "m3"
    int speed = 0;                // words per minute
    int pitch = 0;                // 0..99
    int gap = 0;                  // extra pause between words, 10 ms units
};

// Throws lstm::InvalidArgument naming the file and line for a missing file, a wrong header, a
// row without the 9 columns, an unknown split, a label outside 0..10, words that do not spell
// the labels or a number that does not parse.
std::vector<Utterance> read_manifest(const std::string& manifest_path);

}  // namespace spoken_digits
