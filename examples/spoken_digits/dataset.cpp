#include "dataset.hpp"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "feature_cache.hpp"
#include "lstm/error.hpp"
#include "lstm/nn/batch.hpp"
#include "manifest.hpp"

namespace spoken_digits {

int64_t Dataset::frames() const {
    int64_t total = 0;
    for (int64_t n : lengths) total += n;
    return total;
}

int64_t Dataset::label_count() const {
    int64_t total = 0;
    for (const auto& l : labels) total += static_cast<int64_t>(l.size());
    return total;
}

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    lstm::check(static_cast<bool>(in), "cannot read ", path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

Splits load_task(const std::string& data_dir, Task task) {
    const std::string manifest_path = data_dir + "/manifest.tsv";
    const std::vector<Utterance> utterances = read_manifest(manifest_path);
    std::vector<const Utterance*> chosen;
    for (const auto& u : utterances)
        if ((u.labels.size() == 1) == (task == Task::isolated)) chosen.push_back(&u);
    lstm::check(!chosen.empty(), manifest_path, " has no ", to_string(task), " utterances");

    std::vector<Features> features = cached_features(
        data_dir + "/" + to_string(task) + "_features.bin", read_text(manifest_path), chosen);
    Splits out;
    for (size_t i = 0; i < chosen.size(); ++i) {
        Dataset& d = chosen[i]->split == "train" ? out.train : out.heldout;
        const int64_t frames = features[i].frames / kFrameQuantum * kFrameQuantum;
        lstm::check(frames >= 1, chosen[i]->path, " has ", features[i].frames,
                    " frames, fewer than the ", kFrameQuantum, " a batch length is a multiple of");
        features[i].values.resize(static_cast<size_t>(frames * kMelBands));
        d.lengths.push_back(frames);
        d.labels.push_back(chosen[i]->labels);
        d.sequences.push_back(std::move(features[i].values));
    }
    lstm::check(!out.train.labels.empty() && !out.heldout.labels.empty(), manifest_path, " needs ",
                to_string(task), " utterances in both splits (train ", out.train.labels.size(),
                ", held out ", out.heldout.labels.size(), ")");
    return out;
}

std::vector<std::vector<int64_t>> make_batches(const Dataset& d, int64_t batch, uint64_t seed,
                                               bool exact_lengths) {
    if (!exact_lengths) return lstm::nn::bucket_by_length(d.lengths, batch, seed);
    // One bucket of everything is every index sorted by length (ties by index); cut it where the
    // length changes and every `batch` indices, then shuffle the batches as bucket_by_length
    // does.
    const std::vector<int64_t> sorted =
        lstm::nn::bucket_by_length(d.lengths, static_cast<int64_t>(d.lengths.size()), seed)[0];
    std::vector<std::vector<int64_t>> out;
    for (size_t i = 0; i < sorted.size(); ++i) {
        if (i == 0 || d.lengths[sorted[i]] != d.lengths[sorted[i - 1]] ||
            static_cast<int64_t>(out.back().size()) == batch)
            out.emplace_back();
        out.back().push_back(sorted[i]);
    }
    std::mt19937_64 rng(seed);
    std::shuffle(out.begin(), out.end(), rng);
    return out;
}

}  // namespace spoken_digits
