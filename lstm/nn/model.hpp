#pragma once

// A whole trainable sequence model: LSTM stack -> dense layer -> loss, updated by Adam. This is
// the training step Braun 2018 timed, and what the bench and the training tests run, so that a
// step is the same code everywhere and only the LSTM variant differs.

#include <cstdint>
#include <string_view>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/layer.hpp"
#include "lstm/loss/cross_entropy.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/nn/dense.hpp"
#include "lstm/nn/optim.hpp"
#include "lstm/nn/sequence.hpp"

namespace lstm::nn {

// Where the loss reads the network's output.
enum class Head {
    ce_last_step,    // dense + softmax cross-entropy on each sequence's last valid step
    ce_every_frame,  // dense + softmax cross-entropy on every valid frame
    ctc,             // dense on every frame + CTC (blank 0, PyTorch's mean), Braun's speech task
};

struct ModelConfig {
    Config lstm;
    int64_t classes = 0;
    bool dense_bias = false;  // Braun's heads have no bias
    Head head = Head::ce_last_step;
    AdamOptions adam;  // PyTorch's defaults (lr 1e-3), as in Braun's suite
};

template <typename T>
class SequenceModel {
public:
    // Parameters are initialised as PyTorch would, from `seed`.
    SequenceModel(const ModelConfig& config, std::string_view variant, Device device = Device::cpu,
                  uint64_t seed = 0)
        : config_(config),
          lstm_(config.lstm, variant, device),
          dense_(config.lstm.output_size(), checked_classes(config.classes), config.dense_bias),
          adam_(config.adam) {
        lstm_.reset_parameters(seed);
        dense_.reset_parameters(seed + 1);
        adam_.add(lstm_.parameters(), lstm_.gradients());
        adam_.add(dense_.parameters(), dense_.gradients());
    }

    // One training step: zero the gradients, forward, batch-mean loss, backward, Adam update.
    // x (T, N, I) host; lengths (N) host or empty for all T; targets: (N) class indices for
    // ce_last_step, (T * N) time-major for ce_every_frame, the labels of all sequences
    // concatenated for ctc, with target_lengths (N) saying how many belong to each (ctc only).
    // Returns the loss before the update.
    T train_step(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                 Span<const int64_t> target_lengths = {}) {
        lstm_.zero_grad();
        dense_.zero_grad();
        const T loss = forward_loss(x, lengths, targets, target_lengths, true);
        const TensorView<const T> y = lstm_.y();
        const int64_t seq_len = y.size(0), batch = y.size(1), width = y.size(2);
        resize(dy_, seq_len * batch * width);
        const TensorView<T> dy(dy_.data(), {seq_len, batch, width});
        if (config_.head == Head::ce_last_step) {
            const TensorView<T> dfeatures(dfeatures_.data(), {batch, width});
            dense_.backward(features_view(batch), dlogits_view(batch), dfeatures);
            scatter_last_step(TensorView<const T>(dfeatures), lengths, dy);
        } else {
            const TensorView<const T> y_rows(y.data(), {seq_len * batch, width});
            dense_.backward(y_rows, dlogits_view(seq_len * batch),
                            TensorView<T>(dy_.data(), {seq_len * batch, width}));
        }
        lstm_.backward(dy, {}, {}, /*compute_dx=*/false);  // x is data: no gradient wanted
        adam_.step();
        return loss;
    }

    // The batch-mean loss without training (inference forward, no reserve); arguments as
    // train_step.
    T evaluate(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
               Span<const int64_t> target_lengths = {}) {
        return forward_loss(x, lengths, targets, target_lengths, false);
    }

    LstmT<T>& lstm() { return lstm_; }
    Dense<T>& dense() { return dense_; }
    const ModelConfig& config() const { return config_; }

private:
    static int64_t checked_classes(int64_t classes) {
        check(classes >= 1, "ModelConfig.classes must be >= 1, got ", classes);
        return classes;
    }

    T forward_loss(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                   Span<const int64_t> target_lengths, bool training) {
        const TensorView<const T> y =
            training ? lstm_.forward(x, lengths) : lstm_.infer(x, lengths);
        const int64_t seq_len = y.size(0), batch = y.size(1), width = y.size(2);
        const int64_t classes = config_.classes;
        if (config_.head == Head::ce_last_step) {
            resize(features_, batch * width);
            resize(dfeatures_, batch * width);
            resize(logits_, batch * classes);
            resize(dlogits_, batch * classes);
            gather_last_step(y, lengths, TensorView<T>(features_.data(), {batch, width}));
            const TensorView<T> logits(logits_.data(), {batch, classes});
            dense_.forward(features_view(batch), logits);
            return loss::cross_entropy(TensorView<const T>(logits), targets, loss::Reduction::mean,
                                       dlogits_view(batch));
        }
        const int64_t rows = seq_len * batch;
        resize(logits_, rows * classes);
        resize(dlogits_, rows * classes);
        dense_.forward(TensorView<const T>(y.data(), {rows, width}),
                       TensorView<T>(logits_.data(), {rows, classes}));
        if (config_.head == Head::ctc)
            return ctc_loss(seq_len, batch, lengths, targets, target_lengths);
        return loss::cross_entropy_frames(
            TensorView<const T>(logits_.data(), {seq_len, batch, classes}), lengths, targets,
            loss::Reduction::mean, TensorView<T>(dlogits_.data(), {seq_len, batch, classes}));
    }

    // CTC over the logits (T, N, C) of every frame; writes dlogits. Padded frames get zero
    // gradient, so the dense backward over all rows adds nothing for them.
    T ctc_loss(int64_t seq_len, int64_t batch, Span<const int64_t> lengths,
               Span<const int64_t> targets, Span<const int64_t> target_lengths) {
        if (lengths.empty()) {
            full_lengths_.assign(batch, seq_len);
            lengths = Span<const int64_t>(full_lengths_);
        }
        loss::CtcArgs<T> args;
        args.logits = TensorView<const T>(logits_.data(), {seq_len, batch, config_.classes});
        args.targets = TensorView<const int64_t>(targets.data, {targets.size});
        args.input_lengths = lengths;
        args.target_lengths = target_lengths;
        args.blank = 0;
        args.reduction = loss::Reduction::mean;
        loss::CtcOutputs<T> out;
        out.grad_logits = TensorView<T>(dlogits_.data(), {seq_len, batch, config_.classes});
        const size_t bytes = loss::ctc_workspace_bytes(args);
        return loss::ctc_loss(args, out, ctc_workspace_.reserve(bytes), bytes);
    }

    TensorView<const T> features_view(int64_t batch) const {
        return TensorView<const T>(features_.data(), {batch, config_.lstm.output_size()});
    }
    TensorView<T> dlogits_view(int64_t rows) {
        return TensorView<T>(dlogits_.data(), {rows, config_.classes});
    }
    static void resize(std::vector<T>& v, size_t n) {
        if (v.size() != n) v.resize(n);
    }

    ModelConfig config_;
    LstmT<T> lstm_;
    Dense<T> dense_;
    Adam<T> adam_;
    std::vector<T> features_, dfeatures_, logits_, dlogits_, dy_;
    std::vector<int64_t> full_lengths_;
    lstm::detail::AlignedBuffer ctc_workspace_;
};

}  // namespace lstm::nn
