#pragma once

// lstm::dist::DataParallel: synchronous data-parallel training of an nn::SequenceModel. Every rank
// holds the same model and trains on its own shard of the global batch; after each backward the
// gradients are summed over ranks, weighted so that they equal the gradient of the batch-mean
// loss over the GLOBAL batch, and every rank applies the same optimizer step, so parameters stay
// bit-identical (given that the allreduce hands every rank the same sum, which MPI's and NCCL's
// reductions do; parameters_in_sync() checks it).
//
// Weights. Each head's loss is a mean over "items": sequences for the per-sequence CE heads and
// for CTC (PyTorch's mean divides each sequence's loss by its target length, then averages over
// sequences), valid frames for ce_every_frame; for the CE heads only those whose target is not
// the ignore_index -100 the heads leave out of their mean. A rank with w_r items and local mean
// gradient g_r
// contributes (w_r / W) g_r, W = sum of w_r, which is exactly the global mean's gradient. W is
// the sum in the handshake at the start of the step (Agreement, below; it also lets a rank
// hold no sequences).
//
// Overlap. The dense gradient is final before the LSTM backward starts (the model's
// set_dense_gradients_ready hook), so its allreduce starts then and runs during the LSTM backward.
// With Overlap::per_layer (the default) the LSTM backward runs one layer at a time from the top
// (Lstm::set_layer_gradients_ready) and each layer's slice of the flat gradient starts its own
// allreduce as soon as that layer is done, while the layers below run backward (MPI_Iallreduce
// on the host, NCCL on its side stream on a device); with Overlap::dense_head the LSTM gradient
// is one allreduce after the whole backward. Either way the global loss is summed while the
// reductions are in flight, and all of them are waited for before compute_gradients returns,
// i.e. before the optimizer step. Each element is scaled by the same w_r / W in both modes, so
// the weighting is the same; what per_layer changes is that a multi-layer stack runs one variant
// call per layer instead of one for the stack (the same math; the rounding may differ by
// variant, within the tolerance rule).
//
// Agreement. What every rank must pass and call, and how the ranks find out that they do
// not, is lstm/dist/agreement.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "lstm/dist/agreement.hpp"
#include "lstm/dist/communicator.hpp"
#include "lstm/error.hpp"
#include "lstm/layer.hpp"
#include "lstm/loss/cross_entropy.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/params.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm::dist {

template <typename T>
class DataParallel {
public:
    // Checks that every rank passes the same model config, dtype, device, optimizer options and
    // `overlap` (else lstm::Error on every rank, naming what differs and where), then broadcasts
    // rank 0's parameters and optimizer state into `model` on every rank (broadcast_parameters),
    // so ranks may construct their models from any seed. A collective. `model` and `comm` must
    // outlive this object, which owns the model's gradient hooks while it lives.
    DataParallel(nn::SequenceModel<T>& model, Communicator& comm,
                 Overlap overlap = Overlap::per_layer)
        : model_(model), comm_(comm), overlap_(overlap) {
        const int64_t layers = model_.lstm().config().num_layers;
        std::exception_ptr refused;
        try {
            check(overlap_ == Overlap::dense_head || overlap_ == Overlap::per_layer,
                  "DataParallel: overlap must be Overlap::dense_head or Overlap::per_layer, got "
                  "Overlap(",
                  static_cast<int>(overlap_), ")");
            // The host back-end's slots hold the dense head's allreduce and one per layer; the
            // loss sum runs after the dense one is waited for, so it never needs another slot.
            if (overlap_ == Overlap::per_layer)
                check(layers + 1 <= Backend::kMaxPending,
                      "DataParallel: Overlap::per_layer keeps one allreduce per LSTM layer and the "
                      "dense head's in flight, at most Backend::kMaxPending = ",
                      Backend::kMaxPending, ", so num_layers must be <= ", Backend::kMaxPending - 1,
                      ", got ", layers, " (use Overlap::dense_head)");
            comm_.backend_for(model_.device());
        } catch (const Error&) {
            refused = std::current_exception();
        }
        handshake_.exchange(detail::Call::construct, 0, refused);
        detail::check_same_model(
            comm_, detail::describe_model(model_, overlap_, dense_parameters().numel()));
        layer_requests_.resize(static_cast<size_t>(layers));
        broadcast_state();
        model_.set_dense_gradients_ready([this] {
            if (in_step_) start_dense_allreduce();
        });
        if (overlap_ == Overlap::per_layer)
            model_.lstm().set_layer_gradients_ready([this](int64_t layer) {
                if (in_step_) start_layer_allreduce(layer);
            });
    }
    ~DataParallel() {
        model_.set_dense_gradients_ready({});
        model_.lstm().set_layer_gradients_ready({});
    }
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    // One training step on this rank's shard: compute_gradients below, then the optimizer step
    // every rank applies alike. Arguments as nn::SequenceModel::train_step, for the shard (x
    // (T, N_r, I) host or the model's device, N_r may be 0; lengths, targets and target_lengths
    // host). Returns the global batch-mean loss (before the update), the same on every rank.
    T train_step(TensorView<const T> x, Span<const int64_t> lengths, Span<const int64_t> targets,
                 Span<const int64_t> target_lengths = {}) {
        const T loss =
            step_gradients(detail::Call::train_step, x, lengths, targets, target_lengths);
        model_.optimizer().step();
        return loss;
    }

    // The model's compute_gradients on this rank's shard, then the gradients (lstm().gradients()
    // and the dense ones, overwritten) replaced by the global batch's on every rank. Returns the
    // global batch-mean loss. A collective: every rank must call it, each with its own shard.
    // A shard DataParallel refuses itself (an empty one with lengths or targets, per-frame
    // lengths outside 1..T) throws on every rank: its own message on the rank that has it, one
    // naming that rank on the others. Bad input only the model sees throws the model's
    // lstm::Error on the rank that has it, after the handshake: the other ranks then wait in the
    // next collective, so run steps under run_or_abort (lstm/dist/abort.hpp), which ends the
    // whole job with that message.
    T compute_gradients(TensorView<const T> x, Span<const int64_t> lengths,
                        Span<const int64_t> targets, Span<const int64_t> target_lengths = {}) {
        return step_gradients(detail::Call::compute_gradients, x, lengths, targets, target_lengths);
    }

    // Rank 0's state on every rank, overwritten: the LSTM and dense parameters and the optimizer's
    // state (Adam's moments and step count per buffer, and the learning rate), i.e. everything a
    // checkpoint restores except the dropout state, which stays each rank's own. So loading a
    // checkpoint on rank 0 only and then calling this resumes every rank exactly. A collective.
    void broadcast_parameters() {
        handshake_.exchange(detail::Call::broadcast_parameters, 0, nullptr);
        broadcast_state();
    }

    // Whether every rank's parameters equal rank 0's bit for bit; the same answer on every rank.
    // A collective that copies the parameters (allocates): for tests and occasional checks.
    bool parameters_in_sync() {
        handshake_.exchange(detail::Call::parameters_in_sync, 0, nullptr);
        std::vector<T> mine = host_copy(model_.lstm().parameters().view());
        const std::vector<T> dense = host_copy(dense_parameters());
        mine.insert(mine.end(), dense.begin(), dense.end());
        std::vector<T> root = mine;
        host().broadcast(root.data(), root.size() * sizeof(T), 0);
        double differs = std::memcmp(root.data(), mine.data(), mine.size() * sizeof(T)) != 0;
        host().allreduce_sum(&differs, 1, DType::f64);
        return differs == 0;
    }

    nn::SequenceModel<T>& model() { return model_; }
    Communicator& communicator() { return comm_; }
    Overlap overlap() const { return overlap_; }

private:
    Backend& host() const { return comm_.backend_for(Device::cpu); }

    // The step shared by train_step and compute_gradients; `call` names it in the handshake.
    T step_gradients(detail::Call call, TensorView<const T> x, Span<const int64_t> lengths,
                     Span<const int64_t> targets, Span<const int64_t> target_lengths) {
        double items = 0;
        std::exception_ptr refused;
        try {
            items = checked_items(x, lengths, targets, target_lengths);
        } catch (const Error&) {
            refused = std::current_exception();
        }
        const double total = handshake_.exchange(call, items, refused);
        check(total > 0,
              "DataParallel: the global batch is empty (every rank's x has N = 0, or every "
              "target is the ignore_index -100)");
        const bool empty = x.size(1) == 0;  // x has rank 3, or the handshake threw
        double local_loss = 0;
        if (empty) {
            // Nothing to learn from here; this rank adds zeros to the sums.
            model_.lstm().zero_grad();
            zero_dense_gradients();
            weight_ = 1.0;
            start_dense_allreduce();
        } else {
            weight_ = items / total;
            // The hooks start reductions only inside this call (a model trained on its own while
            // this object lives starts none).
            in_step_ = true;
            try {
                local_loss = static_cast<double>(
                    model_.compute_gradients(x, lengths, targets, target_lengths));
            } catch (...) {
                in_step_ = false;
                throw;
            }
            in_step_ = false;
            // The hook started it, unless someone replaced the model's hook since.
            if (!dense_request_.pending()) start_dense_allreduce();
        }
        start_lstm_allreduces();
        // The dense reduction, started first, is done (or nearly) by now; waiting for it frees
        // its slot, so a back-end whose blocking allreduce takes a slot (Backend's default) has
        // one for the loss sum even with a layer's allreduce in every other slot.
        comm_.wait(dense_request_);
        // The loss sum runs while the LSTM's reductions are in flight (MPI advances them in this
        // call too). A rank without items (none, or all ignored: its mean is NaN) adds 0, never
        // 0 * NaN.
        scalars_[0] = empty || items == 0 ? 0.0 : weight_ * local_loss;
        host().allreduce_sum(scalars_, 1, DType::f64);
        comm_.wait(lstm_request_);
        for (Request& r : layer_requests_) comm_.wait(r);
        return static_cast<T>(scalars_[0]);
    }

    // The items this rank's mean loss averages over (see the header comment), 0 for an empty
    // shard; throws for what DataParallel must refuse before its weights depend on it. x: (T, N,
    // I) on the host or the model's device (only its shape is read).
    double checked_items(TensorView<const T> x, Span<const int64_t> lengths,
                         Span<const int64_t> targets, Span<const int64_t> target_lengths) const {
        // The model's own message, but on every rank (the handshake carries the refusal).
        check(x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", x.shape_string());
        if (x.size(1) == 0) {
            // The model never sees an empty shard, so its checks are made here: an empty shard
            // with lengths or targets is a slicing bug, not something to ignore.
            const int64_t input = model_.lstm().config().input_size;
            constexpr const char* kEmpty = "DataParallel: x has N = 0 sequences on this rank, ";
            check(x.size(2) == input, kEmpty, "but its features (x.size(2)) must still be ",
                  "input_size = ", input, ", got ", x.size(2));
            check(lengths.empty(), kEmpty, "so lengths must be empty, got ", lengths.size,
                  " lengths");
            check(targets.empty(), kEmpty, "so targets must be empty, got ", targets.size,
                  " targets");
            check(target_lengths.empty(), kEmpty, "so target_lengths must be empty, got ",
                  target_lengths.size, " target lengths");
            return 0;
        }
        // The model's message, but here: T = 0 would make a per-frame shard count 0 items.
        check(x.size(0) >= 1, "x: T (x.size(0)) must be >= 1, got ", x.size(0));
        const int64_t steps = x.size(0), batch = x.size(1);
        const nn::Head head = model_.config().head;
        if (head == nn::Head::ctc) return static_cast<double>(batch);
        // The heads' cross-entropy leaves targets of -100 out of its mean, so they are no items;
        // the targets are read here, so their count is checked here too (the model's words).
        auto counted = [](int64_t target) { return target != loss::kDefaultIgnoreIndex; };
        if (head != nn::Head::ce_every_frame) {
            check(targets.size == batch,
                  "SequenceModel: targets must have one class per sequence (N = ", batch,
                  ") for the ", nn::to_string(head), " head, got ", targets.size);
            return static_cast<double>(std::count_if(targets.begin(), targets.end(), counted));
        }
        check(targets.size == steps * batch,
              "SequenceModel: targets must have one class per frame, time-major (T * N = ", steps,
              " * ", batch, " = ", steps * batch, ") for the ce_every_frame head, got ",
              targets.size);
        // Checked here, before the sum weights this rank's gradients: a length the model would
        // refuse could otherwise cancel real frames or empty the global batch first.
        check(lengths.empty() || lengths.size == batch,
              "DataParallel: lengths must have N = ", batch, " elements (or none), got ",
              lengths.size);
        double frames = 0;
        for (int64_t n = 0; n < batch; ++n) {
            const int64_t length = lengths.empty() ? steps : lengths[n];
            check(length >= 1 && length <= steps, "DataParallel: lengths[", n, "] = ", length,
                  " must be in 1..T = ", steps);
            for (int64_t t = 0; t < length; ++t) frames += counted(targets[t * batch + n]);
        }
        return frames;
    }

    // Rank 0's parameters, Adam moments (both on the model's device), step counts and lr (host)
    // on every rank; see broadcast_parameters.
    void broadcast_state() {
        comm_.broadcast(model_.lstm().parameters().view(), 0);
        comm_.broadcast(dense_parameters(), 0);
        nn::Adam<T>& adam = model_.optimizer();
        const int64_t buffers = adam.buffer_count();
        // The step counts, then the lr's bits: one host broadcast.
        std::vector<int64_t> scalars(static_cast<size_t>(buffers + 1));
        for (int64_t k = 0; k < buffers; ++k) {
            comm_.broadcast(adam.exp_avg(k), 0);
            comm_.broadcast(adam.exp_avg_sq(k), 0);
            scalars[static_cast<size_t>(k)] = adam.steps(k);
        }
        const double lr = adam.options().lr;
        std::memcpy(&scalars.back(), &lr, sizeof lr);
        host().broadcast(scalars.data(), scalars.size() * sizeof(int64_t), 0);
        for (int64_t k = 0; k < buffers; ++k) adam.set_steps(k, scalars[static_cast<size_t>(k)]);
        double root_lr = 0;
        std::memcpy(&root_lr, &scalars.back(), sizeof root_lr);
        adam.set_lr(root_lr);
    }

    void start_dense_allreduce() {
        dense_request_ = comm_.start_allreduce_sum(dense_gradients(), weight_);
    }
    void start_layer_allreduce(int64_t layer) {
        layer_requests_[static_cast<size_t>(layer)] =
            comm_.start_allreduce_sum(layer_gradients(layer), weight_);
    }
    // After the backward: per_layer starts the layers whose hook did not fire (all of them on a
    // rank without sequences), top first as backward would; dense_head starts the whole buffer.
    // Every rank thus issues dense, then the layers top first (or the whole LSTM), in one order.
    void start_lstm_allreduces() {
        if (overlap_ == Overlap::dense_head) {
            lstm_request_ = comm_.start_allreduce_sum(model_.lstm().gradients().view(), weight_);
            return;
        }
        for (int64_t l = static_cast<int64_t>(layer_requests_.size()) - 1; l >= 0; --l)
            if (!layer_requests_[static_cast<size_t>(l)].pending()) start_layer_allreduce(l);
    }
    // Layer `layer`'s slice of lstm().gradients() (both directions, in params.hpp's layout), on
    // the model's device; the elements the hook reports final.
    TensorView<T> layer_gradients(int64_t layer) {
        const Config& c = model_.lstm().config();
        const int64_t begin = layer_param_offset(c, layer);
        const int64_t end =
            layer + 1 < c.num_layers ? layer_param_offset(c, layer + 1) : param_count(c);
        const FlatSpan<T> g = model_.lstm().gradients();
        return TensorView<T>(g.data + begin, {end - begin}, g.device);
    }

    // The dense layer's flat buffers on the model's device (dense() on cpu, dense_cuda() on cuda).
    TensorView<T> dense_parameters() {
#if LSTM_WITH_CUDA
        if (model_.device() == Device::cuda) return model_.dense_cuda().parameters();
#endif
        const Span<T> p = model_.dense().parameters();
        return TensorView<T>(p.data, {p.size});
    }
    TensorView<T> dense_gradients() {
#if LSTM_WITH_CUDA
        if (model_.device() == Device::cuda) return model_.dense_cuda().gradients();
#endif
        const Span<T> g = model_.dense().gradients();
        return TensorView<T>(g.data, {g.size});
    }
    void zero_dense_gradients() {
#if LSTM_WITH_CUDA
        if (model_.device() == Device::cuda) return model_.dense_cuda().zero_grad();
#endif
        model_.dense().zero_grad();
    }

    // buffer (host or device) -> a host vector; waits for the model's stream on cuda.
    std::vector<T> host_copy(TensorView<T> buffer) {
        std::vector<T> out(static_cast<size_t>(buffer.numel()));
        if (buffer.device() == Device::cpu) {
            std::memcpy(out.data(), buffer.data(), out.size() * sizeof(T));
            return out;
        }
#if LSTM_WITH_CUDA
        cuda::copy_bytes(out.data(), Device::cpu, buffer.data(), Device::cuda,
                         out.size() * sizeof(T), model_.lstm().context());
#endif
        return out;
    }

    nn::SequenceModel<T>& model_;
    Communicator& comm_;
    Overlap overlap_;
    double weight_ = 1.0;   // this rank's share w_r / W of the current step
    bool in_step_ = false;  // inside compute_gradients: the hooks may start reductions
    Request dense_request_, lstm_request_;
    std::vector<Request> layer_requests_;  // per_layer: one per LSTM layer, sized once
    detail::Handshake handshake_{comm_};
    double scalars_[1] = {0};  // host scratch of the loss sum (no allocation per step)
};

}  // namespace lstm::dist
