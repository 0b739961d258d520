// Spoken-digits example: checks a data set written by make_data.sh, the promises its header
// comment makes. ctest runs it (through test_make_data.sh) on a small data set; it is also the
// quick check to run on a full one.
//
// Usage: spoken_digits_check_data MANIFEST EXPECTED_COUNT
//
// Checks: the manifest parses (read_manifest); it has EXPECTED_COUNT rows, file i named
// wav/<split>/<i>.wav with every 5th (i % 5 == 4) held out; the two splits share no (voice,
// variant) speaker, and every held-out speaker has a voice or a variant that no training
// utterance has; within a split utterances alternate isolated digit / connected string of 3..7
// digits, and the isolated digits cycle through the 11 classes (so each class's count is within
// one of the others'); every file is readable by the feature code, gives at least one frame per
// spoken digit and finite, normalised features. Prints a summary; exits 1 listing what failed,
// 2 on a bad command line (EXPECTED_COUNT must be a whole positive number).

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "features.hpp"
#include "lstm/error.hpp"
#include "manifest.hpp"
#include "tools/parse_int.hpp"

namespace {

using spoken_digits::kNumClasses;

constexpr int kHeldoutEvery = 5;
constexpr size_t kMinConnected = 3, kMaxConnected = 7;
// A spoken digit lasts well over 100 ms even at the fastest speed make_data.sh uses; 5 frames
// (50 ms) per digit only catches truncated or empty audio.
constexpr int64_t kMinFramesPerDigit = 5;
// Normalised bands have mean 0 and variance var / (var + kVarianceFloor), so these bounds only
// catch a broken normalisation, not rounding.
constexpr double kMeanTolerance = 1e-3, kMinVariance = 0.5, kMaxVariance = 1.001;
// A band stuck at the log floor normalises to all zeros: variance below this.
constexpr double kFlatVariance = 1e-6;

std::vector<std::string> failures;

template <typename... Parts>
void expect(bool condition, const Parts&... parts) {
    if (!condition) failures.push_back(lstm::detail::concat(parts...));
}

// Checks one file's features; returns its frame count (0 when unreadable).
int64_t check_audio(const spoken_digits::Utterance& u) {
    spoken_digits::Features f;
    try {
        f = spoken_digits::compute_features(u.path);
    } catch (const lstm::Error& e) {
        expect(false, e.what());
        return 0;
    }
    expect(f.bands == spoken_digits::kMelBands, u.path, ": ", f.bands, " bands");
    expect(f.frames >= kMinFramesPerDigit * static_cast<int64_t>(u.labels.size()), u.path, ": ",
           f.frames, " frames for ", u.labels.size(), " digits");
    bool finite = true;
    for (float v : f.values) finite = finite && std::isfinite(v);
    expect(finite, u.path, ": non-finite features");
    for (int64_t b = 0; b < f.bands && finite; ++b) {
        double mean = 0.0, square = 0.0;
        for (int64_t t = 0; t < f.frames; ++t) {
            const double v = f.values[t * f.bands + b];
            mean += v;
            square += v * v;
        }
        mean /= f.frames;
        const double variance = square / f.frames - mean * mean;
        expect(std::abs(mean) < kMeanTolerance, u.path, ": band ", b, " mean ", mean);
        expect(variance < kMaxVariance && (variance > kMinVariance || variance < kFlatVariance),
               u.path, ": band ", b, " variance ", variance);
    }
    return f.frames;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MANIFEST EXPECTED_COUNT\n", argv[0]);
        return 2;
    }
    const std::string manifest = argv[1];
    // A row count: at least one, and within the manifest's size_t.
    constexpr long kMaxCount = std::numeric_limits<long>::max();
    const auto expected_count = lstm::cli::parse_int<long>(argv[2], 1, kMaxCount);
    if (!expected_count) {
        std::fprintf(stderr, "%s: %s\nusage: %s MANIFEST EXPECTED_COUNT\n", argv[0],
                     lstm::cli::int_range_message("EXPECTED_COUNT", 1L, kMaxCount, argv[2]).c_str(),
                     argv[0]);
        return 2;
    }
    std::vector<spoken_digits::Utterance> rows;
    try {
        rows = spoken_digits::read_manifest(manifest);
    } catch (const lstm::Error& e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }
    expect(static_cast<long>(rows.size()) == *expected_count, manifest, ": ", rows.size(),
           " rows, expected ", *expected_count);

    // Speakers and voices/variants of each split.
    std::map<std::string, std::set<std::pair<std::string, std::string>>> speakers;
    std::map<std::string, std::set<std::string>> voices, variants;
    // Per split: utterances so far, isolated-digit counts per class, frames.
    std::map<std::string, int64_t> seen, frames;
    std::map<std::string, std::vector<int64_t>> isolated;
    isolated["train"].assign(kNumClasses, 0);
    isolated["heldout"].assign(kNumClasses, 0);
    for (size_t i = 0; i < rows.size(); ++i) {
        const spoken_digits::Utterance& u = rows[i];
        const bool heldout = i % kHeldoutEvery == kHeldoutEvery - 1;
        expect(u.split == (heldout ? "heldout" : "train"), "row ", i, ": split ", u.split);
        char name[64];
        std::snprintf(name, sizeof name, "wav/%s/%05zu.wav", u.split.c_str(), i);
        const std::string suffix = std::string("/") + name;
        expect(u.path.size() > suffix.size() &&
                   u.path.compare(u.path.size() - suffix.size(), suffix.size(), suffix) == 0,
               "row ", i, ": file ", u.path, ", expected ", name);
        speakers[u.split].insert({u.voice, u.variant});
        voices[u.split].insert(u.voice);
        variants[u.split].insert(u.variant);
        const int64_t k = seen[u.split]++;
        if (k % 2 == 0) {
            expect(u.labels.size() == 1, "row ", i, ": expected an isolated digit, got ",
                   u.labels.size(), " labels");
            const int64_t expected_label = (k / 2) % kNumClasses;
            expect(u.labels[0] == expected_label, "row ", i, ": isolated label ", u.labels[0],
                   ", expected ", expected_label, " (classes cycle)");
            ++isolated[u.split][u.labels[0]];
        } else {
            expect(u.labels.size() >= kMinConnected && u.labels.size() <= kMaxConnected, "row ", i,
                   ": connected string of ", u.labels.size(), " digits");
        }
        frames[u.split] += check_audio(u);
    }

    for (const auto& s : speakers["heldout"]) {
        expect(speakers["train"].count(s) == 0, "speaker ", s.first, "+", s.second,
               " is in both splits");
        expect(voices["train"].count(s.first) == 0 || variants["train"].count(s.second) == 0,
               "held-out speaker ", s.first, "+", s.second,
               " has both a training voice and a training variant");
    }

    std::printf("%zu utterances\n", rows.size());
    for (const std::string split : {"train", "heldout"}) {
        std::printf(
            "%-7s %4lld utterances, %6lld frames, %3zu speakers (%zu voices, %zu "
            "variants); isolated per class:",
            split.c_str(), static_cast<long long>(seen[split]),
            static_cast<long long>(frames[split]), speakers[split].size(), voices[split].size(),
            variants[split].size());
        for (int64_t c : isolated[split]) std::printf(" %lld", static_cast<long long>(c));
        std::printf("\n");
    }
    if (failures.empty()) {
        std::printf("OK\n");
        return 0;
    }
    for (const std::string& f : failures) std::fprintf(stderr, "FAIL: %s\n", f.c_str());
    return 1;
}
