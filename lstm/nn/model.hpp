#pragma once

// A whole trainable sequence model: LSTM stack -> dense layer -> loss, updated by Adam. This is
// the training step Braun 2018 timed, and what the bench and the training tests run, so that a
// step is the same code everywhere and only the LSTM variant differs. On Device::cuda every
// tensor of the step lives in device memory and every call is queued on the layer's
// cuda::Context: the host batch is copied in, then LSTM, pooling, dense (cuBLAS), loss and Adam
// run on the device; only the loss value comes back.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/layer.hpp"
#include "lstm/loss/cross_entropy.hpp"
#include "lstm/loss/ctc.hpp"
#include "lstm/nn/clip.hpp"
#include "lstm/nn/dense.hpp"
#include "lstm/nn/optim.hpp"
#include "lstm/nn/sequence.hpp"

#if LSTM_WITH_CUDA
#include <memory>

#include "lstm/nn/dense_cuda.hpp"
#include "lstm/nn/sequence_cuda.hpp"
#endif

namespace lstm::nn {

// Where the loss reads the network's output.
enum class Head {
    ce_last_step,    // dense + softmax cross-entropy on each sequence's last valid step
    ce_every_frame,  // dense + softmax cross-entropy on every valid frame
    ctc,             // dense on every frame + CTC (PyTorch's mean; ModelConfig::ctc), Braun's
                     // speech task
    ce_mean_pool,    // dense + softmax cross-entropy on the mean of each sequence's valid outputs
                     // (Bahrampour's IMDB sentiment model)
    ce_final_state,  // dense + softmax cross-entropy on the top layer's final hidden states,
                     // cat(hn[-2], hn[-1]) when bidirectional (each direction's state after its
                     // whole sequence: PyTorch's usual classifier head)
};

// The enumerator's name, for messages and test names.
inline const char* to_string(Head head) {
    switch (head) {
        case Head::ce_last_step:
            return "ce_last_step";
        case Head::ce_every_frame:
            return "ce_every_frame";
        case Head::ctc:
            return "ctc";
        case Head::ce_mean_pool:
            return "ce_mean_pool";
        case Head::ce_final_state:
            return "ce_final_state";
    }
    return "?";
}

// Options of the ctc head (torch.nn.CTCLoss's, plus what to do when a target cannot be aligned).
struct CtcHeadOptions {
    int64_t blank = 0;  // the blank class, in [0, classes)
    // An infeasible sample (its input too short for its labels) has loss +inf, which makes the
    // batch mean +inf, and a zero gradient (PyTorch 1.13 on the CPU gives NaN there, which
    // turns every parameter NaN at the next step); zero_infinity counts its loss as 0.
    bool zero_infinity = false;
    // Throw lstm::InvalidArgument naming the infeasible samples instead (checked before
    // zero_infinity could hide them), for data pipelines that should never produce one.
    bool infeasible_is_error = false;
};

struct ModelConfig {
    // lstm.batch_first: x (N, T, I), ce_every_frame's targets (N, T) and the per-frame heads'
    // logits() (N, T, C), batch-major as in PyTorch; time-major otherwise.
    Config lstm;
    int64_t classes = 0;
    bool dense_bias = false;  // Braun's heads have no bias
    Head head = Head::ce_last_step;
    AdamOptions adam;    // PyTorch's defaults (lr 1e-3), as in Braun's suite
    CtcHeadOptions ctc;  // Head::ctc only
    // The weight decay of the biases (the LSTM's bias_ih/bias_hh, the dense bias), as a second
    // torch.optim param group would set it; usually 0, so that AdamW decays only the weights.
    // Unset: biases decay as adam.weight_decay says. When set, the optimizer holds one buffer
    // per run of weights or biases in parameters() order (see SequenceModel::optimizer()).
    std::optional<double> bias_weight_decay;
};

template <typename T>
class SequenceModel {
public:
    // Parameters are initialised as PyTorch would, from `seed`, on the host, so a seed gives the
    // same model on every device. A cuda model owns its cuda::Context (the LSTM layer's).
    SequenceModel(const ModelConfig& config, std::string_view variant, Device device = Device::cpu,
                  uint64_t seed = 0)
        : config_(config),
          lstm_(time_major(config.lstm), variant, device),
          dense_(config.lstm.output_size(), checked_classes(config.classes), config.dense_bias),
          adam_(config.adam),
          x_(device),
          lengths_(device),
          x_t_(device),
          logits_bf_(device),
          features_(device),
          dfeatures_(device),
          logits_(device),
          dlogits_(device),
          dy_(device),
          dhn_(device) {
        check(config.ctc.blank >= 0 && config.ctc.blank < config.classes,
              "ModelConfig: ctc.blank must be in [0, classes = ", config.classes, "), got ",
              config.ctc.blank);
        check(!config.bias_weight_decay || *config.bias_weight_decay >= 0,
              "ModelConfig.bias_weight_decay must be >= 0, got ",
              config.bias_weight_decay.value_or(0));
        lstm_.reset_parameters(seed);
        dense_.reset_parameters(seed + 1);
#if LSTM_WITH_CUDA
        if (device == Device::cuda) {
            dense_cuda_ = std::make_unique<DenseCuda<T>>(
                dense_.in_features(), dense_.out_features(), dense_.has_bias(), *lstm_.context());
            dense_cuda_->load_parameters(std::as_const(dense_).parameters());
        }
#endif
        register_with_optimizer();
    }

    // One training step: zero the gradients, forward, batch-mean loss, backward, Adam update.
    // x (T, N, I) on the host (on cuda it is copied to the device inside the step, as Braun's GPU
    // timing includes; a view already on cuda is used in place); lengths (N) host or empty for
    // all T; targets (host): (N) class indices for ce_last_step and ce_mean_pool, (T * N)
    // time-major for ce_every_frame, the labels of all sequences concatenated for ctc, with
    // target_lengths (N) saying how many belong to each (ctc only).
    // Returns the loss before the update (on cuda this waits for the loss; the update is queued).
    // A step that throws (bad arguments, memory refused) changes nothing: parameters, gradients,
    // the optimizer's moments and step counts and the dropout state are as before the call.
    T train_step(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                 Span<const int64_t> target_lengths = {}) {
        adam_.check_can_step();
        const T loss = compute_gradients(x, lengths, targets, target_lengths);
        adam_.step();
        return loss;
    }

    // train_step without the update: zero the gradients, training forward, batch-mean loss,
    // backward, leaving the gradient of every parameter in lstm().gradients() and
    // dense().gradients() (dense_cuda().gradients() on cuda; what Bahrampour 2016 timed as
    // "gradient computation"). Arguments and result as train_step.
    T compute_gradients(TensorView<const T> x, Span<const int64_t> lengths,
                        Span<const int64_t> targets, Span<const int64_t> target_lengths = {}) {
        // Everything that can be refused (arguments, memory) is refused before the first change:
        // the arguments here, memory by the forward and by reserve_backward, both before the
        // gradients are zeroed. The guard puts the dropout count back if anything throws later.
        check_step(x, lengths, targets, target_lengths);
        DropoutRollback rollback(lstm_);
        const T loss = forward_loss(x, lengths, targets, target_lengths, true);
        lstm_.reserve_backward(/*compute_dx=*/false);
        const TensorView<const T> y = lstm_.y();
        const int64_t seq_len = y.size(0), batch = y.size(1), width = y.size(2);
        const TensorView<T> dy = view(dy_, {seq_len, batch, width});
        if (per_sequence_head()) {
            view(dfeatures_, {batch, width});
            if (config_.head == Head::ce_final_state)
                reserve(dhn_, config_.lstm.num_cells() * batch * config_.lstm.state_size());
        }
        lstm_.zero_grad();
        zero_dense_grad();
        if (per_sequence_head()) {
            const TensorView<T> dfeatures = view(dfeatures_, {batch, width});
            dense_backward(view(features_, {batch, width}), view(dlogits_, {batch, classes()}),
                           dfeatures);
            unpool(dfeatures, lengths, dy);
            if (config_.head == Head::ce_final_state) {
                const TensorView<const T> dhn = final_state_gradient(dfeatures);
                if (dense_gradients_ready_) dense_gradients_ready_();
                lstm_.backward(dy, dhn, {}, /*compute_dx=*/false);
                rollback.commit();
                return loss;
            }
        } else {
            const int64_t rows = seq_len * batch;
            scattered_.data = nullptr;  // the per-frame heads overwrite all of dy_
            dense_backward(TensorView<const T>(y.data(), {rows, width}, y.device()),
                           view(dlogits_, {rows, classes()}), view(dy_, {rows, width}));
        }
        if (dense_gradients_ready_) dense_gradients_ready_();
        lstm_.backward(dy, {}, {}, /*compute_dx=*/false);  // x is data: no gradient wanted
        rollback.commit();
        return loss;
    }

    // Every gradient buffer of the model, in its memory space (host or device): the LSTM's flat
    // gradients (param_count(config.lstm)), then the dense layer's (weight (C, D*S) row-major,
    // then the bias). What clip_grad_norm(model, ...) clips and an allreduce must cover.
    std::vector<TensorView<T>> gradient_buffers() {
        std::vector<TensorView<T>> out;
        out.push_back(lstm_.gradients().view());
#if LSTM_WITH_CUDA
        if (device() == Device::cuda) {
            out.push_back(dense_cuda_->gradients());
            return out;
        }
#endif
        const Span<T> g = dense_.gradients();
        out.push_back(TensorView<T>(g.data, {g.size}));
        return out;
    }

    // The batch-mean loss without training (inference forward, no reserve); arguments as
    // train_step.
    T evaluate(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
               Span<const int64_t> target_lengths = {}) {
        check_step(x, lengths, targets, target_lengths);
        return forward_loss(x, lengths, targets, target_lengths, false);
    }

    // The logits of the last train_step, compute_gradients or evaluate, on the model's device:
    // (N, C) for the per-sequence heads (ce_last_step, ce_mean_pool), (T, N, C) for the per-frame
    // ones (ce_every_frame, ctc). For predictions: nn::argmax_classes (lstm/nn/predict.hpp), or
    // loss::ctc_greedy_decode for the ctc head.
    // With config.lstm.batch_first the per-frame logits are (N, T, C), a batch-major copy.
    TensorView<const T> logits() const {
        check(logits_steps_ > 0, "SequenceModel::logits: no forward has run yet");
        const T* data = logits_.template as<T>();
        if (per_sequence_head())
            return TensorView<const T>(data, {logits_batch_, classes()}, device());
        if (config_.lstm.batch_first) {
            T* dst = static_cast<T*>(
                logits_bf_.reserve(bytes_of(logits_steps_ * logits_batch_ * classes())));
            lstm::detail::swap_leading_dims(device(), lstm_.context(), logits_steps_, logits_batch_,
                                            classes(), data, dst);
            return TensorView<const T>(dst, {logits_batch_, logits_steps_, classes()}, device());
        }
        return TensorView<const T>(data, {logits_steps_, logits_batch_, classes()}, device());
    }

    Device device() const { return lstm_.device(); }
    LstmT<T>& lstm() { return lstm_; }
    const LstmT<T>& lstm() const { return lstm_; }
    // The host dense layer, which holds the trained head on cpu. On cuda it only seeded the
    // device layer (dense_cuda()), so asking for it there is an error rather than stale values.
    Dense<T>& dense() { return checked_host_dense(); }
    const Dense<T>& dense() const { return const_cast<SequenceModel*>(this)->checked_host_dense(); }
#if LSTM_WITH_CUDA
    // The device dense layer of a cuda model.
    DenseCuda<T>& dense_cuda() {
        check(dense_cuda_ != nullptr, "SequenceModel::dense_cuda: the model runs on ",
              to_string(device()), "; use dense()");
        return *dense_cuda_;
    }
#endif
    // Called by compute_gradients as soon as the dense gradients are final (on cuda: queued),
    // before the LSTM backward starts, so data-parallel training (lstm/dist/) can start their
    // allreduce while the LSTM backward runs. Empty (the default): nothing is called.
    void set_dense_gradients_ready(std::function<void()> hook) {
        dense_gradients_ready_ = std::move(hook);
    }
    // The optimizer over the LSTM and dense buffers (set_lr for a schedule; step() is what
    // train_step adds to compute_gradients): buffer 0 the LSTM's parameters, 1 the dense
    // layer's; with config.bias_weight_decay one buffer per run of weights or of biases, in
    // parameters() order (the LSTM's, then the dense layer's weight and bias).
    Adam<T>& optimizer() { return adam_; }
    const ModelConfig& config() const { return config_; }

private:
    // Puts the LSTM's dropout count back unless the step got to its end.
    class DropoutRollback {
    public:
        explicit DropoutRollback(LstmT<T>& lstm)
            : lstm_(lstm), seed_(lstm.dropout_seed()), count_(lstm.dropout_count()) {}
        DropoutRollback(const DropoutRollback&) = delete;
        DropoutRollback& operator=(const DropoutRollback&) = delete;
        ~DropoutRollback() {
            if (!committed_) lstm_.set_dropout_state(seed_, count_);
        }
        void commit() { committed_ = true; }

    private:
        LstmT<T>& lstm_;
        uint64_t seed_, count_;
        bool committed_ = false;
    };

    static Config time_major(Config c) {
        c.batch_first = false;  // the model transposes a batch-first x itself (stage_input)
        return c;
    }

    // The optimizer's buffers: the LSTM's then the dense layer's parameters, each whole, or with
    // config.bias_weight_decay cut into runs of weights and of biases.
    void register_with_optimizer() {
        const TensorView<T> lstm_params = lstm_.parameters().view();
        const TensorView<T> lstm_grads = lstm_.gradients().view();
        TensorView<T> dense_params, dense_grads;
#if LSTM_WITH_CUDA
        if (device() == Device::cuda) {
            dense_params = dense_cuda_->parameters();
            dense_grads = dense_cuda_->gradients();
        }
#endif
        if (device() == Device::cpu) {
            dense_params = TensorView<T>(dense_.parameters().data, {dense_.parameter_count()});
            dense_grads = TensorView<T>(dense_.gradients().data, {dense_.parameter_count()});
        }
        if (!config_.bias_weight_decay) {
            add_to_optimizer(lstm_params.data(), lstm_grads.data(), lstm_params.numel(), {});
            add_to_optimizer(dense_params.data(), dense_grads.data(), dense_params.numel(), {});
            return;
        }
        ParamGroup biases;
        biases.weight_decay = config_.bias_weight_decay;
        // Adjacent tensors of one kind share a buffer: per cell [w_ih w_hh], [b_ih b_hh], then
        // w_hr with the next cell's weights.
        const std::vector<ParamEntry> entries = param_entries(config_.lstm);
        for (size_t k = 0; k < entries.size();) {
            const bool bias = entries[k].cols == 0;
            const int64_t begin = entries[k].offset;
            int64_t end = begin;
            for (; k < entries.size() && (entries[k].cols == 0) == bias; ++k)
                end = entries[k].offset + entries[k].numel();
            add_to_optimizer(lstm_params.data() + begin, lstm_grads.data() + begin, end - begin,
                             bias ? biases : ParamGroup{});
        }
        const int64_t weights = dense_.out_features() * dense_.in_features();
        add_to_optimizer(dense_params.data(), dense_grads.data(), weights, {});
        if (dense_.has_bias())
            add_to_optimizer(dense_params.data() + weights, dense_grads.data() + weights,
                             dense_params.numel() - weights, biases);
    }

    // params (n) and grads (n) on the model's device.
    void add_to_optimizer(T* params, const T* grads, int64_t n, const ParamGroup& group) {
        if (device() == Device::cpu)
            return adam_.add(Span<T>(params, n), Span<const T>(grads, n), group);
        adam_.add(TensorView<T>(params, {n}, device()), TensorView<const T>(grads, {n}, device()),
                  lstm_.context(), group);
    }

    // Every check of a step's arguments, before anything changes: x's shape, the lengths, the
    // targets' count and range (ignore_index aside) or the CTC targets, as the losses would
    // check them after the forward.
    void check_step(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                    Span<const int64_t> target_lengths) {
        // Only CTC reads it: for another head it would be dropped, and a pipeline wired for the
        // wrong head would train on without notice.
        check(target_lengths.empty() || config_.head == Head::ctc,
              "SequenceModel: target_lengths is for the ctc head only; this model's head, ",
              to_string(config_.head), ", takes none, got ", target_lengths.size, " entries");
        // The layer takes N = 0 as PyTorch does, but a batch-mean loss of no sequences is NaN and
        // a step on it would still move every weight by decay: an empty batch is a pipeline's
        // slip here. (DataParallel lets a rank hold none; it never hands the model an empty x.)
        // Lstm also takes one unbatched (T, I) sequence, but the heads read y as (T, N, F): such
        // an x reached them as a batch of H sequences of no features (a crash in
        // ce_final_state).
        const bool bf = config_.lstm.batch_first;
        check(x.rank() == 3, "SequenceModel: x must have rank 3 (", bf ? "N, T, I" : "T, N, I",
              "), got shape ", x.shape_string(),
              " (one sequence is a batch of N = 1: ", bf ? "(1, T, I))" : "(T, 1, I))");
        const int64_t steps = x.size(bf ? 1 : 0), batch = x.size(bf ? 0 : 1);
        if (batch == 0)
            fail("SequenceModel: x has N = 0 sequences (shape ", x.shape_string(),
                 "); a loss needs at least one");
        check(steps >= 1, "SequenceModel: x has T = 0 steps (shape ", x.shape_string(), ")");
        check(x.size(2) == config_.lstm.input_size, "SequenceModel: x has ", x.size(2),
              " features (shape ", x.shape_string(), "), the LSTM's input_size is ",
              config_.lstm.input_size);
        check(x.data() != nullptr, "SequenceModel: x has no data");
        lstm::detail::check_lengths(lengths, steps, batch);
        // The count the head reads, said in its terms: the loss sees only rows of logits and
        // names their count M, a name of its own.
        if (per_sequence_head()) {
            check(targets.size == batch,
                  "SequenceModel: targets must have one class per sequence (N = ", batch,
                  ") for the ", to_string(config_.head), " head, got ", targets.size);
        } else if (config_.head == Head::ce_every_frame) {
            check(targets.size == steps * batch,
                  "SequenceModel: targets must have one class per frame, ",
                  bf ? "batch-major (N * T = " : "time-major (T * N = ", bf ? batch : steps, " * ",
                  bf ? steps : batch, " = ", steps * batch, ") for the ce_every_frame head, got ",
                  targets.size);
        }
        if (config_.head == Head::ctc)
            return check_ctc_targets(steps, batch, lengths, targets, target_lengths);
        check(targets.size == 0 || targets.data != nullptr, "SequenceModel: targets has no data");
        for (int64_t r = 0; r < targets.size; ++r) {
            if (targets[r] == loss::kDefaultIgnoreIndex) continue;
            if (targets[r] >= 0 && targets[r] < classes()) continue;
            // A frame past its sequence's end is never read: its target may be anything.
            if (config_.head == Head::ce_every_frame) {
                const int64_t t = bf ? r % steps : r / batch, n = bf ? r / steps : r % batch;
                if (!lengths.empty() && t >= lengths[n]) continue;
            }
            fail("SequenceModel: targets[", r, "] = ", targets[r], " is out of range for ",
                 classes(), " classes (expected 0..", classes() - 1,
                 ", or ignore_index = ", loss::kDefaultIgnoreIndex, ")");
        }
    }

    // ctc_loss's own validation of the CTC targets, against the logits' shape (T, N, C).
    void check_ctc_targets(int64_t steps, int64_t batch, Span<const int64_t> lengths,
                           Span<const int64_t> targets, Span<const int64_t> target_lengths) {
        loss::ctc_detail::validate(ctc_args(steps, batch, lengths, targets, target_lengths),
                                   loss::CtcOutputs<T>{});
    }

    // The ctc head's arguments over logits_ (T, N, C); empty lengths mean T for every sequence.
    loss::CtcArgs<T> ctc_args(int64_t steps, int64_t batch, Span<const int64_t> lengths,
                              Span<const int64_t> targets, Span<const int64_t> target_lengths) {
        if (lengths.empty()) {
            full_lengths_.assign(static_cast<size_t>(batch), steps);
            lengths = Span<const int64_t>(full_lengths_);
        }
        loss::CtcArgs<T> args;
        args.logits = view(logits_, {steps, batch, classes()});
        args.targets = TensorView<const int64_t>(targets.data, {targets.size});
        args.input_lengths = lengths;
        args.target_lengths = target_lengths;
        args.blank = config_.ctc.blank;
        args.zero_infinity = config_.ctc.zero_infinity && !config_.ctc.infeasible_is_error;
        args.reduction = loss::Reduction::mean;
        args.context = lstm_.context();
        return args;
    }

    static int64_t checked_classes(int64_t classes) {
        check(classes >= 1, "ModelConfig.classes must be >= 1, got ", classes);
        return classes;
    }
    int64_t classes() const { return config_.classes; }

    Dense<T>& checked_host_dense() {
        check(device() == Device::cpu,
              "SequenceModel::dense: the model runs on cuda, where the trained head is "
              "dense_cuda() (dense() only seeded it)");
        return dense_;
    }

    // Arguments as train_step, checked by check_step.
    T forward_loss(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                   Span<const int64_t> target_lengths, bool training) {
        const TensorView<const T> x_on_device = stage_input(x);
        const TensorView<const T> y =
            training ? lstm_.forward(x_on_device, lengths) : lstm_.infer(x_on_device, lengths);
        const int64_t seq_len = y.size(0), batch = y.size(1), width = y.size(2);
        logits_steps_ = seq_len;
        logits_batch_ = batch;
        if (per_sequence_head()) {
            const TensorView<T> features = view(features_, {batch, width});
            const TensorView<T> logits = view(logits_, {batch, classes()});
            reserve(dfeatures_, batch * width);
            reserve(dlogits_, batch * classes());
            pool(y, lengths, features);
            dense_forward(features, logits);
            return cross_entropy(logits, targets, view(dlogits_, {batch, classes()}));
        }
        const int64_t rows = seq_len * batch;
        const TensorView<T> logits = view(logits_, {rows, classes()});
        reserve(dlogits_, rows * classes());
        dense_forward(TensorView<const T>(y.data(), {rows, width}, y.device()), logits);
        if (config_.head == Head::ctc)
            return ctc_loss(seq_len, batch, lengths, targets, target_lengths);
        if (config_.lstm.batch_first) {
            // The loss reads targets time-major, as the logits are.
            frame_targets_.resize(static_cast<size_t>(targets.size));
            for (int64_t n = 0; n < batch; ++n)
                for (int64_t t = 0; t < seq_len; ++t)
                    frame_targets_[static_cast<size_t>(t * batch + n)] = targets[n * seq_len + t];
            targets = Span<const int64_t>(frame_targets_);
        }
        return cross_entropy_frames(view(logits_, {seq_len, batch, classes()}), lengths, targets,
                                    view(dlogits_, {seq_len, batch, classes()}));
    }

    // The batch on the model's device: a host batch of a cuda model is copied into x_ (ordered
    // on the context's stream, waited for, so the caller may reuse its memory at once).
    // A batch-first x (N, T, I) comes out time-major (T, N, I), transposed into x_ (or into
    // x_t_ after its copy to the device).
    TensorView<const T> stage_input(TensorView<const T> x) {
        const bool bf = config_.lstm.batch_first;
        const int64_t steps = x.size(bf ? 1 : 0), batch = x.size(bf ? 0 : 1), in = x.size(2);
        const T* data = x.data();
        if (x.device() != device()) {
            check(x.device() == Device::cpu, "SequenceModel: x lives on ", to_string(x.device()),
                  " but the model runs on ", to_string(device()));
            reserve(x_, x.numel());
            x_.copy_from(x.data(), Device::cpu, bytes_of(x.numel()), lstm_.context());
            data = x_.template as<T>();
        }
        if (bf) {
            Buffer& dst = data == x_.template as<T>() ? x_t_ : x_;
            reserve(dst, x.numel());
            lstm::detail::swap_leading_dims(device(), lstm_.context(), batch, steps, in, data,
                                            dst.template as<T>());
            data = dst.template as<T>();
        }
        return TensorView<const T>(data, {steps, batch, in}, device());
    }

    // Softmax cross-entropy, batch mean, of logits (M, C) on the model's device; writes dlogits.
    T cross_entropy(TensorView<const T> logits, Span<const int64_t> targets, TensorView<T> grad) {
        return loss::cross_entropy(logits, targets, loss::Reduction::mean, grad, TensorView<T>(),
                                   lstm_.context());
    }
    // The per-frame form over logits (T, N, C); padded frames get zero gradient.
    T cross_entropy_frames(TensorView<const T> logits, Span<const int64_t> lengths,
                           Span<const int64_t> targets, TensorView<T> grad) {
        return loss::cross_entropy_frames(logits, lengths, targets, loss::Reduction::mean, grad,
                                          TensorView<T>(), lstm_.context());
    }

    // CTC over the logits (T, N, C) of every frame; writes dlogits. Padded frames get zero
    // gradient, so the dense backward over all rows adds nothing for them.
    T ctc_loss(int64_t seq_len, int64_t batch, Span<const int64_t> lengths,
               Span<const int64_t> targets, Span<const int64_t> target_lengths) {
        loss::CtcArgs<T> args = ctc_args(seq_len, batch, lengths, targets, target_lengths);
        loss::CtcOutputs<T> out;
        out.grad_logits = view(dlogits_, {seq_len, batch, classes()});
        if (device() == Device::cuda) {
            const T loss = loss::ctc_loss(args, out);
            check(
                !config_.ctc.infeasible_is_error || !std::isinf(static_cast<double>(loss)),
                "ctc head: the batch loss is ", loss,
                ": at least one sample's input is too short for its labels (infeasible_is_error)");
            return loss;
        }
        sample_losses_.resize(static_cast<size_t>(batch));
        out.losses = TensorView<T>(sample_losses_.data(), {batch});
        const size_t bytes = loss::ctc_workspace_bytes(args);
        const T loss = loss::ctc_loss(args, out, ctc_workspace_.reserve(bytes), bytes);
        if (config_.ctc.infeasible_is_error) {
            std::string infeasible;
            for (int64_t n = 0; n < batch; ++n)
                if (std::isinf(static_cast<double>(sample_losses_[static_cast<size_t>(n)])))
                    infeasible += (infeasible.empty() ? "" : ", ") + std::to_string(n);
            check(infeasible.empty(), "ctc head: sample(s) ", infeasible,
                  " cannot be aligned: each needs at least as many frames as labels plus repeated ",
                  "neighbours (infeasible_is_error)");
        }
        return loss;
    }

    // Heads that classify one vector per sequence.
    bool per_sequence_head() const {
        return config_.head == Head::ce_last_step || config_.head == Head::ce_mean_pool ||
               config_.head == Head::ce_final_state;
    }

    // ce_final_state: the top layer's final states hn (L*D, N, S) -> features (N, D*S)
    // overwritten, direction d in columns [d S, (d + 1) S), S = state_size(); on the model's
    // device. The top layer's (D, N, S) block transposed to (N, D, S) is exactly that.
    void gather_final_state(TensorView<T> features) {
        const TensorView<const T> hn = lstm_.hn();
        const int64_t dirs = config_.lstm.num_directions(), width = config_.lstm.state_size();
        const int64_t batch = hn.size(1), top = (config_.lstm.num_layers - 1) * dirs;
        lstm::detail::swap_leading_dims(device(), lstm_.context(), dirs, batch, width,
                                        hn.data() + top * batch * width, features.data());
    }

    // Its adjoint: dfeatures (N, D*S) -> dhn (L*D, N, S) in dhn_ (overwritten), zero below the
    // top layer; on the model's device.
    TensorView<const T> final_state_gradient(TensorView<const T> dfeatures) {
        const int64_t dirs = config_.lstm.num_directions(), width = config_.lstm.state_size();
        const int64_t batch = dfeatures.size(0), cells = config_.lstm.num_cells();
        const int64_t top = (config_.lstm.num_layers - 1) * dirs;
        const size_t bytes = sizeof(T) * static_cast<size_t>(cells * batch * width);
        dhn_.reserve(bytes);
        dhn_.zero(bytes, lstm_.context());
        T* dhn = dhn_.template as<T>();
        lstm::detail::swap_leading_dims(device(), lstm_.context(), batch, dirs, width,
                                        dfeatures.data(), dhn + top * batch * width);
        return TensorView<const T>(dhn, {cells, batch, width}, device());
    }

    // y (T, N, F) -> features (N, F) overwritten, on the model's device: the last valid step or
    // the mean.
    void pool(TensorView<const T> y, Span<const int64_t> lengths, TensorView<T> features) {
        if (config_.head == Head::ce_final_state) return gather_final_state(features);
        const bool mean = config_.head == Head::ce_mean_pool;
        if (device() == Device::cpu) {
            if (mean)
                mean_pool_steps(y, lengths, features);
            else
                gather_last_step(y, lengths, features);
            return;
        }
#if LSTM_WITH_CUDA
        const int64_t* len = device_lengths(lengths, y.size(0), y.size(1));
        if (mean)
            detail::mean_pool_steps_cuda<T>(*lstm_.context(), y.size(0), y.size(1), y.size(2), len,
                                            y.data(), features.data());
        else
            detail::gather_last_step_cuda<T>(*lstm_.context(), y.size(0), y.size(1), y.size(2), len,
                                             y.data(), features.data());
#endif
    }

    // The adjoint of pool: dfeatures (N, F) -> dy (T, N, F) overwritten, on the model's device.
    // ce_final_state: dy is all zeros (the loss reads hn only; its gradient goes in as dhn).
    void unpool(TensorView<const T> dfeatures, Span<const int64_t> lengths, TensorView<T> dy) {
        if (config_.head == Head::ce_final_state) {
            dy_.zero(sizeof(T) * static_cast<size_t>(dy.numel()), lstm_.context());
            return;
        }
        const bool mean = config_.head == Head::ce_mean_pool;
        if (device() == Device::cpu) {
            if (mean)
                scatter_mean_pool(dfeatures, lengths, dy);
            else
                scatter_last_step_host(dfeatures, lengths, dy);
            return;
        }
#if LSTM_WITH_CUDA
        const int64_t* len = device_lengths(lengths, dy.size(0), dy.size(1));
        if (mean)
            detail::scatter_mean_pool_cuda<T>(*lstm_.context(), dy.size(0), dy.size(1), dy.size(2),
                                              len, dfeatures.data(), dy.data());
        else
            detail::scatter_last_step_cuda<T>(*lstm_.context(), dy.size(0), dy.size(1), dy.size(2),
                                              len, dfeatures.data(), dy.data());
#endif
    }

#if LSTM_WITH_CUDA
    // The lengths (N, host, validated here) as the pooling kernels read them: null when every
    // sequence is full (no copy), else a device copy in lengths_, uploaded once per distinct
    // batch (a training loop that reuses its batch, as Braun's does, copies nothing per step).
    const int64_t* device_lengths(Span<const int64_t> lengths, int64_t steps, int64_t batch) {
        detail::check_sequence_lengths("SequenceModel", lengths, steps, batch);
        bool all_full = true;
        for (int64_t v : lengths) all_full = all_full && v == steps;
        if (all_full) return nullptr;
        const bool same = uploaded_lengths_.size() == static_cast<size_t>(lengths.size) &&
                          std::equal(lengths.begin(), lengths.end(), uploaded_lengths_.begin());
        if (!same) {
            lengths_.reserve(static_cast<size_t>(lengths.size) * sizeof(int64_t));
            lengths_.copy_from(lengths.data, Device::cpu,
                               static_cast<size_t>(lengths.size) * sizeof(int64_t),
                               lstm_.context());
            uploaded_lengths_.assign(lengths.begin(), lengths.end());
        }
        return lengths_.template as<int64_t>();
    }
#endif

    // x (M, in) -> y (M, out) overwritten, on the model's device.
    void dense_forward(TensorView<const T> x, TensorView<T> y) {
        if (device() == Device::cpu) return dense_.forward(x, y);
#if LSTM_WITH_CUDA
        dense_cuda_->forward(x, y);
#endif
    }
    // Adds the dense gradients; dx (M, in) overwritten; on the model's device.
    void dense_backward(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx) {
        if (device() == Device::cpu) return dense_.backward(x, dy, dx);
#if LSTM_WITH_CUDA
        dense_cuda_->backward(x, dy, dx);
#endif
    }
    void zero_dense_grad() {
        if (device() == Device::cpu) return dense_.zero_grad();
#if LSTM_WITH_CUDA
        dense_cuda_->zero_grad();
#endif
    }

    // scatter_last_step on the host for the ce_last_step head, the only writer of its dy_: when
    // dy is where the previous step scattered, with the same shape, only that step's N rows are
    // non-zero, and rescatter_last_step (lstm/nn/sequence.hpp) clears those instead of zeroing
    // all of the (T, N, H) dy, which ran on one thread while the others waited (0.53-0.61 ms per
    // step for braun/1x320-CE-long's 41 MB, 0.23-0.40 ms for CE-short's 8 MB, EPYC Zen 4 guest;
    // 0.005-0.009 ms now).
    void scatter_last_step_host(TensorView<const T> dout, Span<const int64_t> lengths,
                                TensorView<T> dy) {
        const int64_t steps = dy.size(0), batch = dy.size(1);
        const bool same = scattered_.data == dy.data() && scattered_.steps == steps &&
                          scattered_.features == dy.size(2) &&
                          static_cast<int64_t>(scattered_.rows.size()) == batch;
        if (same)
            rescatter_last_step(dout, lengths, Span<const int64_t>(scattered_.rows), dy);
        else
            scatter_last_step(dout, lengths, dy);
        scattered_.data = dy.data();
        scattered_.steps = steps;
        scattered_.features = dy.size(2);
        scattered_.rows.resize(static_cast<size_t>(batch));
        for (int64_t n = 0; n < batch; ++n)
            scattered_.rows[static_cast<size_t>(n)] = detail::last_step(lengths, n, steps);
    }

    static size_t bytes_of(int64_t elements) { return static_cast<size_t>(elements) * sizeof(T); }
    // Grows a work buffer to `elements` (never shrinks: steady-state steps allocate nothing).
    static void reserve(Buffer& b, int64_t elements) { b.reserve(bytes_of(elements)); }
    // A view of a work buffer with `shape`, grown to fit, tagged with the model's device.
    TensorView<T> view(Buffer& b, std::initializer_list<int64_t> shape) {
        int64_t elements = 1;
        for (int64_t s : shape) elements *= s;
        reserve(b, elements);
        TensorView<T> out(b.template as<T>(), shape, device());
        return out;
    }

    ModelConfig config_;
    LstmT<T> lstm_;  // owns the cuda::Context of a cuda model; declared first, destroyed last
    Dense<T> dense_;
#if LSTM_WITH_CUDA
    std::unique_ptr<DenseCuda<T>> dense_cuda_;  // cuda only
#endif
    Adam<T> adam_;
    Buffer x_, lengths_;        // cuda: the staged batch and the device copy of its lengths
    Buffer x_t_;                // cuda with batch_first: the staged batch made time-major
    mutable Buffer logits_bf_;  // batch_first: logits() of the per-frame heads
    std::vector<int64_t> frame_targets_;  // batch_first ce_every_frame: targets time-major
    Buffer features_, dfeatures_, logits_, dlogits_, dy_;
    int64_t logits_steps_ = 0, logits_batch_ = 0;  // the shape logits() reports
    std::vector<int64_t> full_lengths_, uploaded_lengths_;
    lstm::detail::AlignedBuffer ctc_workspace_;
    std::vector<T> sample_losses_;  // cpu ctc head: each sample's loss, for infeasible_is_error
    Buffer dhn_;                    // ce_final_state: the gradient of hn, on the model's device
    // Where scatter_last_step_host last wrote into dy_ (data, shape) and each sequence's step
    // there.
    struct Scattered {
        const T* data = nullptr;
        int64_t steps = 0, features = 0;
        std::vector<int64_t> rows;
    } scattered_;
    std::function<void()> dense_gradients_ready_;  // see set_dense_gradients_ready
};

// clip_grad_norm over every gradient buffer of a model (gradient_buffers()): the usual
// torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm). Host models only.
template <typename T>
double clip_grad_norm(SequenceModel<T>& model, double max_norm, bool error_if_nonfinite = false) {
    if (model.device() != Device::cpu)
        fail_as<Unsupported>("clip_grad_norm: the model runs on ", to_string(model.device()),
                             "; gradient clipping here runs on host buffers only");
    std::vector<Span<T>> grads;
    for (const TensorView<T>& g : model.gradient_buffers()) grads.emplace_back(g.data(), g.numel());
    return clip_grad_norm(grads, max_norm, error_if_nonfinite);
}

// Compiled once, for float and double, in lstm_variants (lstm/templates.cpp): a program that uses
// them compiles only what the compiler chooses to inline.
extern template class SequenceModel<float>;
extern template class SequenceModel<double>;

}  // namespace lstm::nn
