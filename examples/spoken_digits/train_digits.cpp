// Spoken-digits example: trains an isolated-digit recogniser (11 classes: "zero".."nine", "oh")
// on a data set spoken by make_data.sh, and reports its accuracy on the held-out speakers.
//
// Usage: spoken_digits_train DATA_DIR [--variant V] [--epochs E] [--hidden H] [--batch B]
//                            [--threads T] [--seed S] [--lr LR] [--dropout P]
//                            [--checkpoint PATH] [--min-accuracy A]
//
//   bash examples/spoken_digits/make_data.sh /tmp/digits
//   build/examples/spoken_digits/spoken_digits_train /tmp/digits --variant fused
//
// Pipeline: DATA_DIR/manifest.tsv (read_manifest) -> the isolated-digit utterances of each split
// -> log-mel features (compute_features), cached in DATA_DIR/isolated_features.bin so that a
// second run skips the audio and FFTs -> length-bucketed padded batches (nn::bucket_by_length,
// nn::pad_sequences) -> a 2-layer bidirectional LSTM, a dense layer and softmax cross-entropy on
// the mean of each utterance's outputs over its frames (Head::ce_mean_pool) -> AdamW with a
// warm-up + cosine schedule and gradient clipping. One progress line per epoch; at the end the
// held-out accuracy and a checkpoint (lstm::io::save_checkpoint, default
// DATA_DIR/spoken_digits_<variant>.safetensors).
//
// Why mean pooling rather than Head::ce_final_state: espeak-ng's utterances start and end with
// silence of varying length, so the final states are read after the silence, and the final-state
// head gives gradient to a single frame per direction; the mean over the frames sees every frame
// of the word and passes gradient to all of them, and with a bidirectional LSTM every frame's
// output already depends on the whole utterance.
//
// Variants: basic and fused take per-sequence lengths. oneDNN's LSTM runs every sequence for all
// T steps, so for onednn each length bucket is split further into batches of one exact frame
// count (no padding at all; batches are smaller and more numerous).
//
// Everything random is seeded from --seed (parameters, dropout masks, batch order), so a run is
// reproducible for one variant, machine and thread count. --min-accuracy makes the exit status
// 1 when the final held-out accuracy is below it (the ctest test uses it); usage errors exit 2.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "features.hpp"
#include "lstm/io/checkpoint.hpp"
#include "lstm/lstm.hpp"
#include "lstm/nn/batch.hpp"
#include "lstm/nn/clip.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/predict.hpp"
#include "lstm/nn/schedule.hpp"
#include "manifest.hpp"

namespace {

using spoken_digits::kMelBands;
using spoken_digits::kNumClasses;

constexpr int64_t kLayers = 2;
// torch.nn.utils.clip_grad_norm_'s usual max_norm for LSTMs; it only bites on the rare large
// steps early in training.
constexpr double kClipNorm = 1.0;
// AdamW's PyTorch default decay.
constexpr double kWeightDecay = 1e-2;
// The schedule warms up from a tenth of the rate over the first epoch and decays to a hundredth
// of it: the usual shape, and the end rate small enough for the last epochs to settle.
constexpr double kWarmupStartFactor = 0.1, kEndLrFactor = 1e-2;
// Held-out batches are never trained on, so they only need to be small enough to keep memory
// modest; bigger is faster.
constexpr int64_t kEvalBatch = 64;

struct Options {
    std::string data_dir;
    std::string variant = "fused";
    int64_t epochs = 20;
    int64_t hidden = 128;
    int64_t batch = 16;
    int64_t threads = 0;  // 0: OpenMP's default
    int64_t seed = 1;
    double lr = 3e-3;
    double dropout = 0.3;
    std::string checkpoint;  // empty: DATA_DIR/spoken_digits_<variant>.safetensors
    double min_accuracy = 0.0;
};

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr,
                 "spoken_digits_train: %s\n"
                 "usage: spoken_digits_train DATA_DIR [--variant basic|fused|onednn] [--epochs E]\n"
                 "       [--hidden H] [--batch B] [--threads T] [--seed S] [--lr LR]\n"
                 "       [--dropout P] [--checkpoint PATH] [--min-accuracy A]\n"
                 "DATA_DIR holds manifest.tsv and wav/ as written by make_data.sh.\n",
                 problem.c_str());
    std::exit(2);
}

int64_t parse_int(const std::string& flag, const char* text, int64_t min) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || value < min)
        usage(flag + " must be an integer >= " + std::to_string(min) + ", got '" + text + "'");
    return value;
}

double parse_real(const std::string& flag, const char* text, double min, double max) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0' || errno != 0 || !(value >= min && value <= max)) {
        std::ostringstream range;
        range << " must be a number in [" << min << ", " << max << "], got '" << text << "'";
        usage(flag + range.str());
    }
    return value;
}

Options parse_options(int argc, char** argv) {
    if (argc < 2) usage("missing DATA_DIR");
    Options o;
    o.data_dir = argv[1];
    if (o.data_dir.rfind("--", 0) == 0) usage("the first argument must be DATA_DIR");
    for (int i = 2; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) usage(flag + " needs a value");
        const char* value = argv[i + 1];
        if (flag == "--variant") {
            o.variant = value;
        } else if (flag == "--epochs") {
            o.epochs = parse_int(flag, value, 1);
        } else if (flag == "--hidden") {
            o.hidden = parse_int(flag, value, 1);
        } else if (flag == "--batch") {
            o.batch = parse_int(flag, value, 1);
        } else if (flag == "--threads") {
            o.threads = parse_int(flag, value, 1);
        } else if (flag == "--seed") {
            o.seed = parse_int(flag, value, 0);
        } else if (flag == "--lr") {
            o.lr = parse_real(flag, value, 1e-6, 1.0);
        } else if (flag == "--dropout") {
            // 1 would zero every output between the layers.
            o.dropout = parse_real(flag, value, 0.0, 0.95);
        } else if (flag == "--checkpoint") {
            o.checkpoint = value;
        } else if (flag == "--min-accuracy") {
            o.min_accuracy = parse_real(flag, value, 0.0, 1.0);
        } else {
            usage("unknown option '" + flag + "'");
        }
    }
    if (o.variant != "basic" && o.variant != "fused" && o.variant != "onednn")
        usage("--variant must be basic, fused or onednn, got '" + o.variant + "'");
    if (o.checkpoint.empty())
        o.checkpoint = o.data_dir + "/spoken_digits_" + o.variant + ".safetensors";
    return o;
}

// The isolated-digit utterances of one split: (frames, kMelBands) features and their class.
struct Dataset {
    std::vector<std::vector<float>> sequences;
    std::vector<int64_t> labels, lengths;
    int64_t frames() const {
        int64_t total = 0;
        for (int64_t n : lengths) total += n;
        return total;
    }
};

// ---- the feature cache ----------------------------------------------------------------------
//
// One file of every isolated utterance's features, both splits, in manifest order:
//   magic "SDIGFEA1" (8 bytes), then uint64 each: mel bands, window ms, hop ms, the FNV-1a hash
//   of manifest.tsv, utterance count; then per utterance int64 frames and frames * bands floats.
// The manifest's hash ties the cache to the data set (make_data.sh is deterministic, so the same
// manifest means the same audio), the front end's constants to the feature code; anything else
// and the cache is recomputed. Native byte order: the cache is a local speed-up, not a format.

constexpr char kCacheMagic[8] = {'S', 'D', 'I', 'G', 'F', 'E', 'A', '1'};

uint64_t fnv1a(const std::string& bytes) {
    // The 64-bit FNV-1a offset basis and prime.
    uint64_t hash = 14695981039346656037ull;
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= 1099511628211ull;
    }
    return hash;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    lstm::check(static_cast<bool>(in), "cannot read ", path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<uint64_t> cache_header(uint64_t manifest_hash, uint64_t count) {
    return {static_cast<uint64_t>(kMelBands), static_cast<uint64_t>(spoken_digits::kWindowMs),
            static_cast<uint64_t>(spoken_digits::kHopMs), manifest_hash, count};
}

// The cached features, or an empty vector when the cache is missing, stale or damaged.
std::vector<spoken_digits::Features> read_cache(const std::string& path,
                                                const std::vector<uint64_t>& header) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    char magic[sizeof kCacheMagic];
    std::vector<uint64_t> stored(header.size());
    in.read(magic, sizeof magic);
    in.read(reinterpret_cast<char*>(stored.data()),
            static_cast<std::streamsize>(stored.size() * sizeof(uint64_t)));
    if (!in || std::memcmp(magic, kCacheMagic, sizeof magic) != 0 || stored != header) return {};
    std::vector<spoken_digits::Features> out(header.back());
    for (auto& f : out) {
        in.read(reinterpret_cast<char*>(&f.frames), sizeof f.frames);
        // A damaged count must not become a huge allocation: a 10-minute utterance bounds it.
        constexpr int64_t kMaxFrames = 60000;
        if (!in || f.frames < 1 || f.frames > kMaxFrames) return {};
        f.bands = kMelBands;
        f.values.resize(static_cast<size_t>(f.frames * f.bands));
        in.read(reinterpret_cast<char*>(f.values.data()),
                static_cast<std::streamsize>(f.values.size() * sizeof(float)));
        if (!in) return {};
    }
    if (in.peek() != std::ifstream::traits_type::eof()) return {};
    return out;
}

void write_cache(const std::string& path, const std::vector<uint64_t>& header,
                 const std::vector<spoken_digits::Features>& features) {
    // Written beside and renamed over, so an interrupted run never leaves a half-written cache
    // that a later run would have to detect.
    const std::string partial = path + ".partial";
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        out.write(kCacheMagic, sizeof kCacheMagic);
        out.write(reinterpret_cast<const char*>(header.data()),
                  static_cast<std::streamsize>(header.size() * sizeof(uint64_t)));
        for (const auto& f : features) {
            out.write(reinterpret_cast<const char*>(&f.frames), sizeof f.frames);
            out.write(reinterpret_cast<const char*>(f.values.data()),
                      static_cast<std::streamsize>(f.values.size() * sizeof(float)));
        }
        if (!out) {
            std::fprintf(stderr, "warning: cannot write the feature cache %s; continuing\n",
                         partial.c_str());
            return;
        }
    }
    if (std::rename(partial.c_str(), path.c_str()) != 0)
        std::fprintf(stderr, "warning: cannot rename %s to %s; continuing\n", partial.c_str(),
                     path.c_str());
}

// The training and held-out isolated-digit sets of DATA_DIR, from the cache when it is current.
std::pair<Dataset, Dataset> load_isolated(const std::string& data_dir) {
    const std::string manifest_path = data_dir + "/manifest.tsv";
    const std::vector<spoken_digits::Utterance> utterances =
        spoken_digits::read_manifest(manifest_path);
    std::vector<const spoken_digits::Utterance*> isolated;
    for (const auto& u : utterances)
        if (u.labels.size() == 1) isolated.push_back(&u);
    lstm::check(!isolated.empty(), manifest_path, " has no isolated-digit utterances");

    const std::string cache_path = data_dir + "/isolated_features.bin";
    const auto header = cache_header(fnv1a(read_file(manifest_path)), isolated.size());
    std::vector<spoken_digits::Features> features = read_cache(cache_path, header);
    if (features.empty()) {
        const auto start = std::chrono::steady_clock::now();
        for (const auto* u : isolated) features.push_back(spoken_digits::compute_features(u->path));
        write_cache(cache_path, header, features);
        std::printf("features of %zu isolated utterances computed in %.1f s, cached in %s\n",
                    isolated.size(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                    cache_path.c_str());
    } else {
        std::printf("features of %zu isolated utterances read from %s\n", isolated.size(),
                    cache_path.c_str());
    }

    Dataset train, heldout;
    for (size_t i = 0; i < isolated.size(); ++i) {
        Dataset& d = isolated[i]->split == "train" ? train : heldout;
        d.lengths.push_back(features[i].frames);
        d.labels.push_back(isolated[i]->labels[0]);
        d.sequences.push_back(std::move(features[i].values));
    }
    lstm::check(!train.labels.empty() && !heldout.labels.empty(), manifest_path,
                " needs isolated digits in both splits (train ", train.labels.size(), ", held out ",
                heldout.labels.size(), ")");
    return {std::move(train), std::move(heldout)};
}

// ---- batches ----------------------------------------------------------------------------------

// Length buckets of at most `batch` sequences in an order shuffled by `seed`. For variants
// without per-sequence lengths each bucket is cut where the length changes, so every batch is
// of one exact length and pad_sequences adds no padding.
std::vector<std::vector<int64_t>> make_batches(const Dataset& d, int64_t batch, uint64_t seed,
                                               bool equal_lengths) {
    auto buckets = lstm::nn::bucket_by_length(d.lengths, batch, seed);
    if (!equal_lengths) return buckets;
    std::vector<std::vector<int64_t>> out;
    for (const auto& bucket : buckets) {
        // Buckets are sorted by length, so equal lengths are adjacent.
        for (size_t begin = 0; begin < bucket.size();) {
            size_t end = begin + 1;
            while (end < bucket.size() && d.lengths[bucket[end]] == d.lengths[bucket[begin]]) ++end;
            out.emplace_back(bucket.begin() + static_cast<std::ptrdiff_t>(begin),
                             bucket.begin() + static_cast<std::ptrdiff_t>(end));
            begin = end;
        }
    }
    return out;
}

std::vector<int64_t> pick(const std::vector<int64_t>& values, const std::vector<int64_t>& idx) {
    std::vector<int64_t> out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(values[i]);
    return out;
}

double heldout_accuracy(lstm::nn::SequenceModel<float>& model, const Dataset& heldout,
                        bool equal_lengths) {
    std::vector<int64_t> predicted, targets;
    // The order of the batches does not matter here; seed 0 is as good as any.
    for (const auto& idx : make_batches(heldout, kEvalBatch, 0, equal_lengths)) {
        const auto batch = lstm::nn::pad_sequences(heldout.sequences, kMelBands, idx);
        const auto labels = pick(heldout.labels, idx);
        model.evaluate(batch.view(), batch.lengths, labels);
        for (int64_t c : lstm::nn::argmax_classes(model.logits())) predicted.push_back(c);
        targets.insert(targets.end(), labels.begin(), labels.end());
    }
    return lstm::nn::accuracy(predicted, targets);
}

std::string format_seconds(double seconds) {
    const auto s = static_cast<long long>(std::lround(seconds));
    char text[32];
    std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
    return text;
}

int run(const Options& o) {
    if (o.threads > 0) lstm::set_num_threads(static_cast<int>(o.threads));
    const auto [train, heldout] = load_isolated(o.data_dir);
    const bool equal_lengths = o.variant == "onednn";

    lstm::nn::ModelConfig config;
    config.lstm = lstm::Config{kMelBands, o.hidden, kLayers, /*bidirectional=*/true};
    config.lstm.dropout = o.dropout;
    config.classes = kNumClasses;
    config.dense_bias = true;
    config.head = lstm::nn::Head::ce_mean_pool;
    config.adam = lstm::nn::adamw_options(o.lr, kWeightDecay);
    const auto seed = static_cast<uint64_t>(o.seed);
    lstm::nn::SequenceModel<float> model(config, o.variant, lstm::Device::cpu, seed);
    model.lstm().set_dropout_state(seed);

    // Steps per epoch are fixed for a data set (the buckets' members do not depend on the seed).
    const auto steps_per_epoch =
        static_cast<int64_t>(make_batches(train, o.batch, seed, equal_lengths).size());
    const lstm::nn::WarmupCosineLr schedule{o.lr, steps_per_epoch, o.epochs * steps_per_epoch,
                                            kWarmupStartFactor, o.lr * kEndLrFactor};
    std::printf(
        "%zu training and %zu held-out isolated digits; variant %s, 2-layer bidirectional LSTM "
        "hidden %" PRId64 ", dropout %.2f, batch %" PRId64 ", lr %.2g, %" PRId64
        " epochs of %" PRId64 " steps, %d threads\n",
        train.labels.size(), heldout.labels.size(), o.variant.c_str(), o.hidden, o.dropout, o.batch,
        o.lr, o.epochs, steps_per_epoch, lstm::num_threads());

    const int64_t train_frames = train.frames();
    const auto start = std::chrono::steady_clock::now();
    int64_t step = 0;
    double accuracy = 0.0;
    for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
        const auto epoch_start = std::chrono::steady_clock::now();
        double loss_sum = 0.0;
        // Batch order differs per epoch but is fixed by the seed; the multiplier (a prime larger
        // than any epoch count) keeps the (seed, epoch) pairs of different seeds apart.
        const uint64_t order_seed = seed * 1000003ull + static_cast<uint64_t>(epoch);
        for (const auto& idx : make_batches(train, o.batch, order_seed, equal_lengths)) {
            const auto batch = lstm::nn::pad_sequences(train.sequences, kMelBands, idx);
            const auto targets = pick(train.labels, idx);
            model.optimizer().set_lr(schedule.lr(step));
            const float loss = model.compute_gradients(batch.view(), batch.lengths, targets);
            lstm::nn::clip_grad_norm<float>({model.lstm().gradients(), model.dense().gradients()},
                                            kClipNorm);
            model.optimizer().step();
            loss_sum += static_cast<double>(loss) * static_cast<double>(idx.size());
            ++step;
        }
        const double train_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
        accuracy = heldout_accuracy(model, heldout, equal_lengths);
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double left =
            elapsed / static_cast<double>(epoch + 1) * static_cast<double>(o.epochs - epoch - 1);
        std::printf(
            "epoch %3" PRId64 "/%" PRId64
            ": loss %.4f, held-out accuracy %.4f, %.0f frames/s, %.1f s, left %s\n",
            epoch + 1, o.epochs, loss_sum / static_cast<double>(train.labels.size()), accuracy,
            static_cast<double>(train_frames) / train_seconds,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count(),
            format_seconds(left).c_str());
        std::fflush(stdout);
    }
    lstm::io::save_checkpoint(o.checkpoint, model);
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "final held-out accuracy %.4f (%zu utterances, chance %.4f) after %s; checkpoint "
        "%s\n",
        accuracy, heldout.labels.size(), 1.0 / kNumClasses, format_seconds(total).c_str(),
        o.checkpoint.c_str());
    if (accuracy < o.min_accuracy) {
        std::fprintf(stderr, "held-out accuracy %.4f is below --min-accuracy %.4f\n", accuracy,
                     o.min_accuracy);
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse_options(argc, argv);
    try {
        return run(options);
    } catch (const lstm::Unsupported& e) {
        std::fprintf(stderr, "this build or CPU cannot do that: %s\n", e.what());
        return 2;
    } catch (const lstm::Error& e) {
        std::fprintf(stderr, "error (%s): %s\n", lstm::to_string(e.kind()), e.what());
        return 1;
    }
}
