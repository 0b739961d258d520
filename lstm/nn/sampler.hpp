#pragma once

// Epochs of training batches with a position that a checkpoint keeps (lstm/io/checkpoint.hpp):
// a run resumed from a checkpoint taken mid-epoch goes on with the batch after the last one it
// trained, in the same order, with no bookkeeping of its own. Host memory throughout.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/nn/batch.hpp"

namespace lstm::nn {

// Epoch e's batches, each a list of dataset indices in [0, dataset_size).
using EpochBatches = std::function<std::vector<std::vector<int64_t>>(int64_t epoch)>;

class BatchSampler {
public:
    // make_epoch(e) gives epoch e's batches; it is called once as each epoch begins (so it may
    // shuffle with a seed derived from e) and must give at least one non-empty batch.
    BatchSampler(int64_t dataset_size, EpochBatches make_epoch)
        : dataset_size_(dataset_size), make_epoch_(std::move(make_epoch)) {
        check(dataset_size >= 1, "BatchSampler: dataset_size must be >= 1, got ", dataset_size);
        check(static_cast<bool>(make_epoch_), "BatchSampler: make_epoch is empty");
        State first;
        first.batches = make_epoch_(0);
        set_state(std::move(first));
    }

    // bucket_by_length(lengths, batch_size, seed + epoch) for each epoch: batches of similar
    // lengths in an order reshuffled every epoch, as the examples train.
    static BatchSampler by_length(std::vector<int64_t> lengths, int64_t batch_size, uint64_t seed) {
        const auto size = static_cast<int64_t>(lengths.size());
        return BatchSampler(size, [lengths = std::move(lengths), batch_size, seed](int64_t e) {
            return bucket_by_length(lengths, batch_size, seed + static_cast<uint64_t>(e));
        });
    }

    // The next batch's indices (valid until the next call). After an epoch's last batch the
    // next epoch begins at once, so `while (sampler.epoch() < epochs)` trains whole epochs.
    const std::vector<int64_t>& next() {
        std::vector<int64_t> batch = state_.batches[static_cast<size_t>(state_.position)];
        if (state_.position + 1 == batches_in_epoch()) {
            // A make_epoch that throws, or gives batches set_state refuses, leaves the sampler
            // where it was.
            State following;
            following.epoch = state_.epoch + 1;
            following.batches = make_epoch_(following.epoch);
            set_state(std::move(following));
        } else {
            ++state_.position;
        }
        taken_ = std::move(batch);
        return taken_;
    }

    int64_t epoch() const { return state_.epoch; }        // the epoch next() takes from
    int64_t position() const { return state_.position; }  // batches of it already taken
    int64_t batches_in_epoch() const { return static_cast<int64_t>(state_.batches.size()); }
    int64_t dataset_size() const { return dataset_size_; }

    // What a checkpoint keeps: the epoch, the batches of it already taken and its whole order.
    struct State {
        int64_t epoch = 0;
        int64_t position = 0;
        std::vector<std::vector<int64_t>> batches;
    };
    const State& state() const { return state_; }

    // Restores a state (from a checkpoint), checked whole before it replaces the current one:
    // epoch >= 0, at least one batch, none empty, every index in [0, dataset_size()),
    // 0 <= position < the number of batches.
    void set_state(State state) {
        check_state(state);
        state_ = std::move(state);
    }

    // Throws what set_state would refuse, changing nothing.
    void check_state(const State& state) const {
        check(state.epoch >= 0, "BatchSampler: epoch must be >= 0, got ", state.epoch);
        const auto count = static_cast<int64_t>(state.batches.size());
        check(count >= 1, "BatchSampler: epoch ", state.epoch, " has no batches");
        check(state.position >= 0 && state.position < count,
              "BatchSampler: position must be in [0, ", count, ") for an epoch of ", count,
              " batches, got ", state.position);
        for (size_t b = 0; b < state.batches.size(); ++b) {
            check(!state.batches[b].empty(), "BatchSampler: batch ", b, " of epoch ", state.epoch,
                  " is empty");
            for (size_t k = 0; k < state.batches[b].size(); ++k) {
                const int64_t i = state.batches[b][k];
                check(i >= 0 && i < dataset_size_, "BatchSampler: batch ", b, "[", k, "] = ", i,
                      " is not an index of the ", dataset_size_, " sequences");
            }
        }
    }

private:
    int64_t dataset_size_;
    EpochBatches make_epoch_;
    State state_;
    std::vector<int64_t> taken_;
};

}  // namespace lstm::nn
