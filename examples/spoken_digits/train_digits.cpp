// Spoken-digits example: trains a recogniser of spoken digits on a data set spoken by
// make_data.sh and reports how well it does on the held-out speakers.
//
//   bash examples/spoken_digits/make_data.sh /tmp/digits
//   build/examples/spoken_digits/spoken_digits_train /tmp/digits --task isolated
//   build/examples/spoken_digits/spoken_digits_train /tmp/digits --task connected
//
// Tasks (options.hpp):
//   isolated   "zero".."nine" and "oh" (11 classes): a dense layer and softmax cross-entropy on
//              the mean of each utterance's outputs over its frames (Head::ce_mean_pool);
//              held-out accuracy.
//   connected  strings of 3 to 7 digits: a dense layer on every frame and CTC (Head::ctc, the
//              blank a 12th class after the digits), greedy decoding; held-out label error rate
//              (edit distance over reference digits, loss::label_errors).
//
// Pipeline: DATA_DIR/manifest.tsv -> the task's utterances of each split -> log-mel features,
// cached in DATA_DIR/<task>_features.bin -> length-bucketed padded batches (dataset.hpp) -> a
// 2-layer bidirectional LSTM (inter-layer dropout) -> the task's head -> AdamW with a warm-up +
// cosine schedule and gradient clipping. One progress line per epoch; at the end the held-out
// score and a checkpoint (lstm::io::save_checkpoint; default
// DATA_DIR/spoken_digits_<task>_<variant>.safetensors).
//
// Why mean pooling for isolated digits rather than Head::ce_final_state: espeak-ng's utterances
// start and end with silence of varying length, so the final states are read after the silence,
// and the final-state head gives gradient to a single frame per direction; the mean over the
// frames sees every frame of the word and passes gradient to all of them, and with a
// bidirectional LSTM every frame's output already depends on the whole utterance.
//
// Variants: basic and fused take per-sequence lengths. oneDNN's LSTM runs every sequence for all
// T steps, so onednn always trains and evaluates on batches of one exact frame count (no padding
// at all); --exact-lengths gives any variant those same batches, which the consistency study
// uses so that every variant sees the same batches in the same order.
//
// Everything random is seeded from --seed (parameters, dropout masks, batch order), so a run is
// reproducible for one variant, machine and thread count, and every variant starts from the same
// parameters. Cross-checks with another framework (pytorch_crosscheck.py): --export PATH writes
// both splits' features and labels and this model's held-out outputs; --import PATH starts from
// a state dict's parameters (lstm.*, fc.*, as torch.save(module.state_dict()) names them), and
// with --epochs 0 only evaluates it, writing a checkpoint (optimizer at step 0) only when
// --checkpoint is given. --curve PATH writes one TSV row per epoch. --min-accuracy
// (isolated) and --max-ler (connected) make the exit status 1 when the final held-out score
// misses them (the ctest tests use them); usage errors exit 2.

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "crosscheck_export.hpp"
#include "dataset.hpp"
#include "features.hpp"
#include "lstm/io/checkpoint.hpp"
#include "lstm/loss/ctc_decode.hpp"
#include "lstm/lstm.hpp"
#include "lstm/nn/batch.hpp"
#include "lstm/nn/clip.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/predict.hpp"
#include "lstm/nn/schedule.hpp"
#include "manifest.hpp"
#include "options.hpp"

namespace {

using spoken_digits::Dataset;
using spoken_digits::kMelBands;
using spoken_digits::kNumClasses;
using spoken_digits::Options;
using spoken_digits::Task;

constexpr int64_t kLayers = 2;
// The connected task's blank is the class after the digits, so a label id is the digit's class.
constexpr int64_t kBlank = kNumClasses;
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

int64_t output_classes(Task task) { return task == Task::isolated ? kNumClasses : kNumClasses + 1; }

lstm::nn::ModelConfig model_config(const Options& o) {
    lstm::nn::ModelConfig config;
    config.lstm = lstm::Config{kMelBands, o.hidden, kLayers, /*bidirectional=*/true};
    config.lstm.dropout = o.dropout;
    config.classes = output_classes(o.task);
    config.dense_bias = true;
    config.adam = lstm::nn::adamw_options(o.lr, kWeightDecay);
    if (o.task == Task::isolated) {
        config.head = lstm::nn::Head::ce_mean_pool;
    } else {
        config.head = lstm::nn::Head::ctc;
        config.ctc.blank = kBlank;
        // Every string has at most 7 digits in at least 80 frames; a sample that could not be
        // aligned would mean broken data, which should stop the run rather than count as 0.
        config.ctc.infeasible_is_error = true;
    }
    return config;
}

// The targets of batch `idx` in the head's layout: one class per utterance (isolated), or the
// labels concatenated with their counts (connected, CTC).
lstm::nn::CtcTargets batch_targets(const Dataset& d, const std::vector<int64_t>& idx, Task task) {
    lstm::nn::CtcTargets out = lstm::nn::concat_targets(d.labels, idx);
    if (task == Task::isolated) out.lengths.clear();
    return out;
}

struct Evaluation {
    double score = 0.0;              // accuracy (isolated) or label error rate (connected)
    lstm::loss::LabelErrors errors;  // connected only
    // Per utterance: the head's classes logits (isolated), or frames x classes (connected).
    std::vector<std::vector<float>> logits;
};

// Runs every utterance of `d` through the model in inference mode (no dropout), in batches made
// as for training; the logits come back to host vectors, in the order of `d`.
Evaluation evaluate(lstm::nn::SequenceModel<float>& model, const Dataset& d, Task task,
                    bool exact_lengths) {
    const int64_t classes = output_classes(task);
    Evaluation out;
    out.logits.resize(d.lengths.size());
    std::vector<int64_t> predicted, targets;
    std::vector<std::vector<int64_t>> hypotheses, references;
    // The order of the batches does not matter here; seed 0 is as good as any.
    for (const auto& idx : spoken_digits::make_batches(d, kEvalBatch, 0, exact_lengths)) {
        const auto batch = lstm::nn::pad_sequences(d.sequences, kMelBands, idx);
        const auto t = batch_targets(d, idx, task);
        model.evaluate(batch.view(), batch.lengths, t.labels, t.lengths);
        const lstm::TensorView<const float> logits = model.logits();
        const auto n_batch = static_cast<int64_t>(idx.size());
        for (int64_t n = 0; n < n_batch; ++n) {
            std::vector<float>& rows = out.logits[idx[n]];
            if (task == Task::isolated) {
                rows.assign(logits.data() + n * classes, logits.data() + (n + 1) * classes);
                continue;
            }
            for (int64_t step = 0; step < batch.lengths[n]; ++step) {
                const float* row = logits.data() + (step * n_batch + n) * classes;
                rows.insert(rows.end(), row, row + classes);
            }
        }
        if (task == Task::isolated) {
            for (int64_t c : lstm::nn::argmax_classes(logits)) predicted.push_back(c);
            targets.insert(targets.end(), t.labels.begin(), t.labels.end());
        } else {
            for (auto& h : lstm::loss::ctc_greedy_decode(logits, batch.lengths, kBlank))
                hypotheses.push_back(std::move(h));
            for (int64_t i : idx) references.push_back(d.labels[i]);
        }
    }
    if (task == Task::isolated) {
        out.score = lstm::nn::accuracy(predicted, targets);
    } else {
        out.errors = lstm::loss::label_errors(hypotheses, references);
        out.score = out.errors.rate();
    }
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string format_seconds(double seconds) {
    const auto s = static_cast<long long>(std::lround(seconds));
    char text[32];
    std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
    return text;
}

const char* score_name(Task task) {
    return task == Task::isolated ? "held-out accuracy" : "held-out label error rate";
}

int run(const Options& o) {
    if (o.threads > 0) lstm::set_num_threads(static_cast<int>(o.threads));
    const spoken_digits::Splits splits = spoken_digits::load_task(o.data_dir, o.task);
    const Dataset& train = splits.train;
    const bool exact_lengths = o.exact_lengths || o.variant == "onednn";

    const auto seed = static_cast<uint64_t>(o.seed);
    lstm::nn::SequenceModel<float> model(model_config(o), o.variant, lstm::Device::cpu, seed);
    model.lstm().set_dropout_state(seed);
    // The masters, the head and the optimizer stay fp32; only the LSTM's products round.
    model.lstm().set_precision(o.precision);
    if (!o.import_path.empty())
        lstm::io::load_model_parameters(lstm::io::read_safetensors(o.import_path), model);

    // Steps per epoch are fixed for a data set (the buckets' members do not depend on the seed).
    const auto steps_per_epoch = static_cast<int64_t>(
        spoken_digits::make_batches(train, o.batch, seed, exact_lengths).size());
    // The first epoch warms up; the cosine reaches its end rate at the last step.
    const lstm::nn::WarmupCosineLr schedule{
        o.lr, steps_per_epoch, std::max<int64_t>(1, (o.epochs - 1) * steps_per_epoch - 1),
        kWarmupStartFactor, o.lr * kEndLrFactor};
    std::printf(
        "%s digits: %zu training and %zu held-out utterances; variant %s%s%s, 2-layer "
        "bidirectional LSTM hidden %" PRId64 ", dropout %.2f, batch %" PRId64 ", lr %.2g, %" PRId64
        " epochs of %" PRId64 " steps, %d threads\n",
        to_string(o.task), train.lengths.size(), splits.heldout.lengths.size(), o.variant.c_str(),
        o.precision == lstm::Precision::bf16 ? " in bf16" : "",
        exact_lengths ? " (batches of one exact length)" : "", o.hidden, o.dropout, o.batch, o.lr,
        o.epochs, steps_per_epoch, lstm::num_threads());

    std::ofstream curve;
    if (!o.curve_path.empty()) {
        curve.open(o.curve_path, std::ios::trunc);
        lstm::check(static_cast<bool>(curve), "--curve: cannot write ", o.curve_path);
        curve << "epoch\ttrain_loss\t" << (o.task == Task::isolated ? "accuracy" : "ler")
              << "\ttrain_seconds\tframes_per_second\n";
    }
    const int64_t train_frames = train.frames();
    const auto start = std::chrono::steady_clock::now();
    int64_t step = 0;
    Evaluation result;
    for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
        const auto epoch_start = std::chrono::steady_clock::now();
        double loss_sum = 0.0;
        // Batch order differs per epoch but is fixed by the seed; the multiplier (a prime larger
        // than any epoch count) keeps the (seed, epoch) pairs of different seeds apart.
        const uint64_t order_seed = seed * 1000003ull + static_cast<uint64_t>(epoch);
        for (const auto& idx :
             spoken_digits::make_batches(train, o.batch, order_seed, exact_lengths)) {
            const auto batch = lstm::nn::pad_sequences(train.sequences, kMelBands, idx);
            const auto t = batch_targets(train, idx, o.task);
            model.optimizer().set_lr(schedule.lr(step));
            const float loss =
                model.compute_gradients(batch.view(), batch.lengths, t.labels, t.lengths);
            lstm::nn::clip_grad_norm(model, kClipNorm);
            model.optimizer().step();
            loss_sum += static_cast<double>(loss) * static_cast<double>(idx.size());
            ++step;
        }
        const double train_seconds = seconds_since(epoch_start);
        result = evaluate(model, splits.heldout, o.task, exact_lengths);
        const double score = result.score;
        const double loss = loss_sum / static_cast<double>(train.lengths.size());
        const double frames_per_second = static_cast<double>(train_frames) / train_seconds;
        const double left = seconds_since(start) / static_cast<double>(epoch + 1) *
                            static_cast<double>(o.epochs - epoch - 1);
        std::printf("epoch %3" PRId64 "/%" PRId64
                    ": loss %.4f, %s %.4f, %.0f frames/s, %.1f s, "
                    "left %s\n",
                    epoch + 1, o.epochs, loss, score_name(o.task), score, frames_per_second,
                    seconds_since(epoch_start), format_seconds(left).c_str());
        std::fflush(stdout);
        if (curve.is_open())
            curve << epoch + 1 << '\t' << loss << '\t' << score << '\t' << train_seconds << '\t'
                  << frames_per_second << '\n';
    }
    if (o.epochs == 0) result = evaluate(model, splits.heldout, o.task, exact_lengths);
    const double total = seconds_since(start);
    if (o.write_checkpoint) lstm::io::save_checkpoint(o.checkpoint, model);
    if (!o.export_path.empty()) {
        spoken_digits::ExportInfo info;
        info.task = o.task;
        info.variant = o.variant;
        info.hidden = o.hidden;
        info.layers = kLayers;
        info.classes = output_classes(o.task);
        info.blank = o.task == Task::connected ? kBlank : -1;
        info.seed = o.seed;
        info.epochs = o.epochs;
        info.exact_lengths = exact_lengths;
        spoken_digits::write_crosscheck(o.export_path, info, splits, result.logits);
    }

    if (o.task == Task::isolated) {
        std::printf("final held-out accuracy %.4f (%zu utterances, chance %.4f)", result.score,
                    splits.heldout.lengths.size(), 1.0 / kNumClasses);
    } else {
        std::printf("final held-out label error rate %.4f (%" PRId64 " edits over %" PRId64
                    " digits in %zu strings)",
                    result.score, result.errors.edits, result.errors.reference_labels,
                    splits.heldout.lengths.size());
    }
    std::printf(" after %s%s%s%s%s\n", format_seconds(total).c_str(),
                o.write_checkpoint ? "; checkpoint " : "",
                o.write_checkpoint ? o.checkpoint.c_str() : "",
                o.export_path.empty() ? "" : "; export ", o.export_path.c_str());
    if (o.task == Task::isolated && result.score < o.min_accuracy) {
        std::fprintf(stderr, "held-out accuracy %.4f is below --min-accuracy %.4f\n", result.score,
                     o.min_accuracy);
        return 1;
    }
    if (o.task == Task::connected && result.score > o.max_ler) {
        std::fprintf(stderr, "held-out label error rate %.4f is above --max-ler %.4f\n",
                     result.score, o.max_ler);
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = spoken_digits::parse_options(argc, argv);
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
