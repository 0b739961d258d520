// A complete training program: variable-length sequences -> padded, length-bucketed batches ->
// an LSTM classifier trained with AdamW, a warm-up + cosine learning-rate schedule and gradient
// clipping -> held-out accuracy -> an exact checkpoint taken mid-epoch, resumed with the
// sampler's place in the data. docs/training.md walks through it. Built with the project
// (examples/CMakeLists.txt); ctest runs it as `example_train_classifier`.
//
// The task: each sequence (3 features, 4 to 16 frames) is labelled by the sign of its FIRST
// frame's first feature, while the head reads the LAST valid frame: the network must carry that
// sign through its cell state. Chance is 50%; the program fails (exit 1) below 90% held-out
// accuracy or if the resumed run is not bit-identical to the uninterrupted one.
//
// Usage: train_classifier [VARIANT] [EPOCHS]   (defaults: fused 16; --help says more). Usage
// errors, an unknown variant among them, exit 2.

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lstm/io/checkpoint.hpp"
#include "lstm/lstm.hpp"
#include "lstm/nn/batch.hpp"
#include "lstm/nn/clip.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/predict.hpp"
#include "lstm/nn/sampler.hpp"
#include "lstm/nn/schedule.hpp"
#include "lstm/registry.hpp"
#include "tools/parse_int.hpp"

namespace {

constexpr int64_t kFeatures = 3, kBatch = 32;

struct Dataset {
    std::vector<std::vector<float>> sequences;  // (length, kFeatures) row-major each
    std::vector<int64_t> labels, lengths;
};

Dataset make_dataset(int64_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_int_distribution<int64_t> length(4, 16);
    Dataset d;
    for (int64_t i = 0; i < count; ++i) {
        const int64_t steps = length(rng);
        std::vector<float> s(static_cast<size_t>(steps * kFeatures));
        for (float& v : s) v = value(rng);
        d.labels.push_back(s[0] > 0 ? 1 : 0);
        d.lengths.push_back(steps);
        d.sequences.push_back(std::move(s));
    }
    return d;
}

std::vector<int64_t> pick(const std::vector<int64_t>& values, const std::vector<int64_t>& idx) {
    std::vector<int64_t> out;
    for (int64_t i : idx) out.push_back(values[i]);
    return out;
}

// The sampler of the run: length buckets of `data`, reshuffled every epoch.
lstm::nn::BatchSampler make_sampler(const Dataset& data) {
    return lstm::nn::BatchSampler::by_length(data.lengths, kBatch, /*seed=*/1000);
}

// Trains on the sampler's batches until `until` optimizer steps are done in all. The step count is
// the optimizer's (restored by a checkpoint), and the schedule's position with it.
void train_until(lstm::nn::SequenceModel<float>& model, lstm::nn::BatchSampler& sampler,
                 const Dataset& data, const lstm::nn::WarmupCosineLr& schedule, int64_t until) {
    for (int64_t step = model.optimizer().steps(0); step < until; ++step) {
        const std::vector<int64_t>& idx = sampler.next();
        const auto batch = lstm::nn::pad_sequences(data.sequences, kFeatures, idx);
        const auto targets = pick(data.labels, idx);
        model.optimizer().set_lr(schedule.lr(step));
        model.compute_gradients(batch.view(), batch.lengths, targets);
        lstm::nn::clip_grad_norm(model, 1.0);
        model.optimizer().step();
    }
}

double held_out_accuracy(lstm::nn::SequenceModel<float>& model, const Dataset& test) {
    const auto batch = lstm::nn::pad_sequences(test.sequences, kFeatures);
    model.evaluate(batch.view(), batch.lengths, test.labels);
    const std::vector<int64_t> predicted = lstm::nn::argmax_classes(model.logits());
    return lstm::nn::accuracy(predicted, test.labels);
}

// Half the epochs run before the checkpoint and half after, so there must be two. A million
// epochs is days of training, and keeps the schedule's steps (epochs x 32) far inside int64.
constexpr int64_t kMinEpochs = 2, kMaxEpochs = 1000000;

void print_usage(std::FILE* to) {
    std::fprintf(to,
                 "usage: train_classifier [VARIANT] [EPOCHS]   (defaults: fused 16)\n"
                 "VARIANT: a CPU variant of this build (lstm_tool lstm --help lists them);\n"
                 "EPOCHS: %lld to %lld. Exit status: 0 trained and resumed exactly, 1 below 90%%\n"
                 "held-out accuracy or a resumed run that differs, 2 usage or a variant that\n"
                 "cannot train this task.\n",
                 static_cast<long long>(kMinEpochs), static_cast<long long>(kMaxEpochs));
}

int usage_error(const std::string& problem) {
    std::fprintf(stderr, "train_classifier: %s\n", problem.c_str());
    print_usage(stderr);
    return 2;
}

std::vector<float> parameters(lstm::nn::SequenceModel<float>& model) {
    std::vector<float> out(model.lstm().parameters().begin(), model.lstm().parameters().end());
    for (float v : model.dense().parameters()) out.push_back(v);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            print_usage(stdout);
            return 0;
        }
    }
    if (argc > 3)
        return usage_error("expected at most 2 arguments, got " + std::to_string(argc - 1));
    const std::string variant = argc > 1 ? argv[1] : "fused";
    if (variant.rfind('-', 0) == 0) return usage_error("unknown option '" + variant + "'");
    try {
        (void)lstm::find_variant(variant, lstm::Device::cpu);
    } catch (const lstm::Error& e) {
        return usage_error(std::string("VARIANT: ") + e.what());
    }
    int64_t epochs = 16;
    if (argc > 2) {
        const auto parsed = lstm::cli::parse_int<int64_t>(argv[2], kMinEpochs, kMaxEpochs);
        if (!parsed)
            return usage_error(
                lstm::cli::int_range_message("EPOCHS", kMinEpochs, kMaxEpochs, argv[2]));
        epochs = *parsed;
    }
    try {
        lstm::set_num_threads(2);
        const Dataset train = make_dataset(1024, 1), test = make_dataset(512, 2);
        const int64_t steps_per_epoch = (1024 + kBatch - 1) / kBatch;

        lstm::nn::ModelConfig config;
        config.lstm = lstm::Config{kFeatures, 32, 1, false};
        config.classes = 2;
        config.dense_bias = true;
        config.head = lstm::nn::Head::ce_last_step;
        config.adam = lstm::nn::adamw_options(1e-2, 1e-2);
        const lstm::nn::WarmupCosineLr schedule{1e-2, steps_per_epoch / 2, epochs * steps_per_epoch,
                                                0.1, 1e-4};

        lstm::nn::SequenceModel<float> model(config, variant, lstm::Device::cpu, /*seed=*/7);
        std::printf("variant %s, %lld epochs of %lld steps, %d threads\n", variant.c_str(),
                    static_cast<long long>(epochs), static_cast<long long>(steps_per_epoch),
                    lstm::num_threads());
        lstm::nn::BatchSampler sampler = make_sampler(train);
        // A checkpoint in the middle of an epoch halfway through; the run continues, and a second
        // model resumes from the file, with the sampler's place in the data.
        const int64_t total = epochs * steps_per_epoch, middle = total / 2 + steps_per_epoch / 3;
        train_until(model, sampler, train, schedule, middle);
        lstm::io::save_checkpoint("train_classifier.ckpt.safetensors", model, sampler);
        while (sampler.epoch() < epochs) {
            const int64_t epoch = sampler.epoch();
            train_until(model, sampler, train, schedule, (epoch + 1) * steps_per_epoch);
            std::printf("epoch %lld: held-out accuracy %.4f\n", static_cast<long long>(epoch + 1),
                        held_out_accuracy(model, test));
        }

        lstm::nn::SequenceModel<float> resumed(config, variant, lstm::Device::cpu, /*seed=*/0);
        lstm::nn::BatchSampler resumed_sampler = make_sampler(train);
        lstm::io::load_checkpoint("train_classifier.ckpt.safetensors", resumed, resumed_sampler);
        train_until(resumed, resumed_sampler, train, schedule, total);

        const double accuracy = held_out_accuracy(model, test);
        const bool identical = parameters(resumed) == parameters(model);
        std::printf("final held-out accuracy %.4f (chance 0.5); resumed run %s\n", accuracy,
                    identical ? "bit-identical" : "DIFFERS");
        return accuracy >= 0.9 && identical ? 0 : 1;
    } catch (const lstm::Unsupported& e) {
        std::fprintf(stderr, "this build or CPU cannot do that: %s\n", e.what());
        return 2;
    } catch (const lstm::Error& e) {
        std::fprintf(stderr, "error (%s): %s\n", lstm::to_string(e.kind()), e.what());
        return 1;
    }
}
