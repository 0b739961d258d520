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
// set_dense_gradients_ready hook), so its allreduce starts then and runs during the LSTM backward;
// the LSTM gradient's allreduce starts after it, and the global loss is summed while that runs.
// Per-layer overlap of the LSTM stack is not done (the stack's backward is one call).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lstm/dist/communicator.hpp"
#include "lstm/error.hpp"
#include "lstm/nn/model.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm::dist {

template <typename T>
class DataParallel {
public:
    // Broadcasts rank 0's parameters (LSTM and dense) into `model` on every rank (a collective),
    // so ranks may construct their models from any seed. Every rank must pass a model of the same
    // config, dtype and device. `model` and `comm` must outlive this object.
    DataParallel(nn::SequenceModel<T>& model, Communicator& comm) : model_(model), comm_(comm) {
        broadcast_parameters();
        model_.set_dense_gradients_ready([this] { start_dense_allreduce(); });
    }
    ~DataParallel() { model_.set_dense_gradients_ready({}); }
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
            local_loss =
                static_cast<double>(model_.compute_gradients(x, lengths, targets, target_lengths));
            // The hook started it, unless someone replaced the model's hook since.
            if (!dense_request_.pending()) start_dense_allreduce();
        }
        lstm_request_ = comm_.start_allreduce_sum(model_.lstm().gradients().view(), weight_);
        // The loss sum runs while the gradient reductions are in flight (MPI advances them in
        // this call too). A rank without items adds 0, never 0 * NaN.
        scalars_[0] = empty ? 0.0 : weight_ * local_loss;
        comm_.backend_for(Device::cpu).allreduce_sum(scalars_, 1, DType::f64);
        comm_.wait(dense_request_);
        comm_.wait(lstm_request_);
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

private:
    // The number of items this rank's mean loss averages over (see the header comment).
    double local_items(TensorView<const T> x, Span<const int64_t> lengths) const {
        if (x.rank() != 3) return 1;  // the model rejects it with its own message
        if (model_.config().head != nn::Head::ce_every_frame) return static_cast<double>(x.size(1));
        if (lengths.empty()) return static_cast<double>(x.size(0) * x.size(1));
        double frames = 0;
        for (int64_t v : lengths) frames += static_cast<double>(v);
        return frames;
    }

    void start_dense_allreduce() {
        dense_request_ = comm_.start_allreduce_sum(dense_gradients(), weight_);
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
    double weight_ = 1.0;  // this rank's share w_r / W of the current step
    Request dense_request_, lstm_request_;
    double scalars_[1] = {0};  // host scratch of the small reductions (no allocation per step)
};

}  // namespace lstm::dist
