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
// sequences), valid frames for ce_every_frame. A rank with w_r items and local mean gradient g_r
// contributes (w_r / W) g_r, W = sum of w_r, which is exactly the global mean's gradient. W is
// one tiny allreduce at the start of the step (it also lets a rank hold no sequences).
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

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lstm/dist/communicator.hpp"
#include "lstm/error.hpp"
#include "lstm/layer.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/params.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm::dist {

// Which gradient allreduces run during the backward pass. Every rank must use the same (the
// collectives must match).
enum class Overlap {
    dense_head,  // the dense head's during the LSTM backward; the LSTM's as one after it
    per_layer,   // also each LSTM layer's, from the top, during the backward of the layers below
};

inline const char* to_string(Overlap overlap) {
    return overlap == Overlap::per_layer ? "per_layer" : "dense_head";
}

template <typename T>
class DataParallel {
public:
    // Broadcasts rank 0's parameters (LSTM and dense) into `model` on every rank (a collective),
    // so ranks may construct their models from any seed. Every rank must pass a model of the same
    // config, dtype and device, and the same `overlap`. `model` and `comm` must outlive this
    // object, which owns the model's gradient hooks while it lives.
    DataParallel(nn::SequenceModel<T>& model, Communicator& comm,
                 Overlap overlap = Overlap::per_layer)
        : model_(model), comm_(comm), overlap_(overlap) {
        const int64_t layers = model_.lstm().config().num_layers;
        if (overlap_ == Overlap::per_layer)
            check(
                layers + 1 <= Backend::kMaxPending,
                "DataParallel: Overlap::per_layer keeps one allreduce per LSTM layer and the dense "
                "head's in flight, at most Backend::kMaxPending = ",
                Backend::kMaxPending, ", so num_layers must be <= ", Backend::kMaxPending - 1,
                ", got ", layers, " (use Overlap::dense_head)");
        layer_requests_.resize(static_cast<size_t>(layers));
        broadcast_parameters();
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
        const T loss = compute_gradients(x, lengths, targets, target_lengths);
        model_.optimizer().step();
        return loss;
    }

    // The model's compute_gradients on this rank's shard, then the gradients (lstm().gradients()
    // and the dense ones, overwritten) replaced by the global batch's on every rank. Returns the
    // global batch-mean loss. A collective: every rank must call it, each with its own shard.
    // Bad input throws the model's own lstm::Error on the rank that has it, after the first
    // collective: the other ranks then wait in the next one, so run steps under run_or_abort
    // (lstm/dist/abort.hpp), which ends the whole job with that message.
    T compute_gradients(TensorView<const T> x, Span<const int64_t> lengths,
                        Span<const int64_t> targets, Span<const int64_t> target_lengths = {}) {
        const bool empty = x.rank() == 3 && x.size(1) == 0;
        scalars_[0] = empty ? 0.0 : local_items(x, lengths);
        comm_.backend_for(Device::cpu).allreduce_sum(scalars_, 1, DType::f64);
        const double total = scalars_[0];
        check(total > 0, "DataParallel: the global batch is empty (every rank's x has N = 0)");
        double local_loss = 0;
        if (empty) {
            // Nothing to learn from here; this rank adds zeros to the sums.
            model_.lstm().zero_grad();
            zero_dense_gradients();
            weight_ = 1.0;
            start_dense_allreduce();
        } else {
            weight_ = local_items(x, lengths) / total;
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
        // The loss sum runs while the gradient reductions are in flight (MPI advances them in
        // this call too). A rank without items adds 0, never 0 * NaN.
        scalars_[0] = empty ? 0.0 : weight_ * local_loss;
        comm_.backend_for(Device::cpu).allreduce_sum(scalars_, 1, DType::f64);
        comm_.wait(dense_request_);
        comm_.wait(lstm_request_);
        for (Request& r : layer_requests_) comm_.wait(r);
        return static_cast<T>(scalars_[0]);
    }

    // Rank 0's LSTM and dense parameters on every rank (after loading a checkpoint on rank 0 only,
    // for instance); overwrites. A collective.
    void broadcast_parameters() {
        comm_.broadcast(model_.lstm().parameters().view(), 0);
        comm_.broadcast(dense_parameters(), 0);
    }

    // Whether every rank's parameters equal rank 0's bit for bit; the same answer on every rank.
    // A collective that copies the parameters (allocates): for tests and occasional checks.
    bool parameters_in_sync() {
        std::vector<T> mine = host_copy(model_.lstm().parameters().view());
        const std::vector<T> dense = host_copy(dense_parameters());
        mine.insert(mine.end(), dense.begin(), dense.end());
        std::vector<T> root = mine;
        comm_.backend_for(Device::cpu).broadcast(root.data(), root.size() * sizeof(T), 0);
        double differs = std::memcmp(root.data(), mine.data(), mine.size() * sizeof(T)) != 0;
        comm_.backend_for(Device::cpu).allreduce_sum(&differs, 1, DType::f64);
        return differs == 0;
    }

    nn::SequenceModel<T>& model() { return model_; }
    Communicator& communicator() { return comm_; }
    Overlap overlap() const { return overlap_; }

private:
    // The number of items this rank's mean loss averages over (see the header comment).
    double local_items(TensorView<const T> x, Span<const int64_t> lengths) const {
        if (x.rank() != 3) return 1;  // the model rejects it with its own message
        if (model_.config().head != nn::Head::ce_every_frame) return static_cast<double>(x.size(1));
        if (lengths.empty()) return static_cast<double>(x.size(0) * x.size(1));
        // Checked here, before the sum weights this rank's gradients: a length the model would
        // refuse could otherwise cancel real frames or empty the global batch first.
        const int64_t steps = x.size(0);
        double frames = 0;
        for (int64_t n = 0; n < lengths.size; ++n) {
            check(lengths[n] >= 1 && lengths[n] <= steps, "DataParallel: lengths[", n,
                  "] = ", lengths[n], " must be in 1..T = ", steps);
            frames += static_cast<double>(lengths[n]);
        }
        return frames;
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
    double scalars_[1] = {0};  // host scratch of the small reductions (no allocation per step)
};

}  // namespace lstm::dist
