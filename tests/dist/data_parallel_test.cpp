// DataParallel against one process: a step on shards across ranks gives the gradients and loss of
// one process's step on the whole batch (within the tolerance rule), for every CPU variant and
// head, balanced and unequal shards (one empty), ignored targets (one rank's all), with the
// per-layer overlap (the default) and without; parameters stay bit-identical over many steps; the
// per-layer allreduces start during the backward, one per layer, top first.

#include "lstm/dist/data_parallel.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "batches.hpp"
#include "dist_env.hpp"
#include "lstm/dist/shard.hpp"
#include "lstm/registry.hpp"
#include "tolerance.hpp"

using namespace lstm;
using lstm::test::world;

namespace {

constexpr int64_t kSteps = 6, kBatch = 7, kInput = 3, kClasses = 4;

nn::ModelConfig model_config(nn::Head head) {
    nn::ModelConfig mc;
    mc.lstm = Config{kInput, 5, 2, true};  // two bidirectional layers: every gradient path
    mc.classes = kClasses;
    mc.dense_bias = true;
    mc.head = head;
    return mc;
}

// How many sequences each rank takes: balanced, or all but one on rank 0, or none on the last.
enum class Split { balanced, one_on_the_others, last_empty };

std::vector<int64_t> shard_sizes(Split split, int64_t items, int ranks) {
    std::vector<int64_t> sizes(static_cast<size_t>(ranks));
    if (split == Split::balanced || ranks == 1) {
        for (int r = 0; r < ranks; ++r)
            sizes[static_cast<size_t>(r)] = dist::shard_range(items, r, ranks).size();
    } else if (split == Split::one_on_the_others) {
        for (int r = 1; r < ranks; ++r) sizes[static_cast<size_t>(r)] = 1;
        sizes[0] = items - (ranks - 1);
    } else {
        for (int r = 0; r + 1 < ranks; ++r)
            sizes[static_cast<size_t>(r)] = dist::shard_range(items, r, ranks - 1).size();
    }
    return sizes;
}

template <typename T>
std::vector<double> to_double(const T* data, int64_t n) {
    return std::vector<double>(data, data + n);
}

// One step of rank-local shards through DataParallel against compute_gradients of one model on
// the whole batch; CHECKs the LSTM and dense gradients and the loss under the tolerance rule.
// Every rank must call it with the same arguments (it is a collective).
// With `ignored`, a CE head's batch has targets of -100 (ignore_index, which the heads leave out
// of their mean): every third sequence's or frame's, and all of the last rank's shard, whose
// mean is then NaN and which must weigh nothing.
template <typename T>
void check_matches_one_process(const Variant& v, nn::Head head, Split split,
                               dist::Overlap overlap = dist::Overlap::per_layer,
                               bool ignored = false) {
    const nn::ModelConfig mc = model_config(head);
    const bool variable = !v.supports_variable_lengths().has_value();
    test::GlobalBatch global =
        test::make_batch(head, kSteps, kBatch, kInput, kClasses, variable, 17);
    const std::vector<int64_t> sizes = shard_sizes(split, kBatch, world().size());
    if (ignored) {
        const int64_t last_begin = kBatch - sizes.back();
        const bool per_frame = head == nn::Head::ce_every_frame;
        for (size_t i = 0; i < global.targets.size(); ++i) {
            const int64_t n =
                per_frame ? static_cast<int64_t>(i) % kBatch : static_cast<int64_t>(i);
            if (i % 3 == 1 || (world().size() > 1 && n >= last_begin))
                global.targets[i] = loss::kDefaultIgnoreIndex;
        }
    }

    nn::SequenceModel<T> whole(mc, v.name(), Device::cpu, /*seed=*/5);
    const test::Shard<T> all = test::cut_shard<T>(global, head, 0, kBatch);
    const T want_loss =
        whole.compute_gradients(all.view(), all.lengths, all.targets, all.target_lengths);

    const int rank = world().rank();
    const int64_t begin = std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
    const test::Shard<T> shard =
        test::cut_shard<T>(global, head, begin, sizes[static_cast<size_t>(rank)]);
    // Another seed on every other rank: the broadcast must make the models equal.
    nn::SequenceModel<T> model(mc, v.name(), Device::cpu, /*seed=*/5 + 1000 * rank);
    dist::DataParallel<T> dp(model, world(), overlap);
    const T loss =
        dp.compute_gradients(shard.view(), shard.lengths, shard.targets, shard.target_lengths);

    INFO("variant " << v.name() << ", " << to_string(dtype_of<T>()) << ", head "
                    << nn::to_string(head) << ", rank " << rank << " of " << world().size()
                    << ", shard of " << shard.batch << ", overlap " << dist::to_string(overlap));
    const double rtol =
        reference::lstm_rtol(dtype_of<T>(), mc.lstm, kSteps, reference::Pass::backward);
    const auto lstm_grad = model.lstm().gradients(), lstm_want = whole.lstm().gradients();
    LSTM_CHECK_CLOSE(test::compare_scaled("LSTM gradient",
                                          to_double(lstm_grad.data, lstm_grad.size),
                                          to_double(lstm_want.data, lstm_want.size), rtol));
    const auto dense_grad = model.dense().gradients(), dense_want = whole.dense().gradients();
    LSTM_CHECK_CLOSE(test::compare_scaled("dense gradient",
                                          to_double(dense_grad.data, dense_grad.size),
                                          to_double(dense_want.data, dense_want.size), rtol));
    CHECK(std::abs(static_cast<double>(loss) - static_cast<double>(want_loss)) <=
          rtol * std::abs(static_cast<double>(want_loss)));
}

// A host back-end that forwards to another and records every f32 allreduce start: where it
// starts in the watched buffer (the LSTM gradient; -1 elsewhere), how many elements, and whether
// every element of the watched buffer below it was still zero (the layers below had not run
// their backward yet).
class SpyBackend final : public dist::Backend {
public:
    struct Start {
        int64_t offset, count;
        bool below_zero;
        bool operator==(const Start& o) const {
            return offset == o.offset && count == o.count && below_zero == o.below_zero;
        }
    };

    explicit SpyBackend(dist::Backend& inner) : inner_(inner) {}
    void watch(const float* begin, int64_t size) {
        begin_ = begin;
        size_ = size;
    }
    Device device() const override { return inner_.device(); }
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    dist::Request start_allreduce_sum(void* data, int64_t count, DType dtype,
                                      double scale) override {
        if (dtype == DType::f32) {
            const float* p = static_cast<const float*>(data);
            const bool inside = p >= begin_ && p < begin_ + size_;
            starts.push_back({inside ? p - begin_ : -1, count,
                              inside && std::all_of(begin_, p, [](float v) { return v == 0; })});
        }
        return inner_.start_allreduce_sum(data, count, dtype, scale);
    }
    void wait(dist::Request& request) override { inner_.wait(request); }
    void broadcast(void* data, size_t bytes, int root) override {
        inner_.broadcast(data, bytes, root);
    }
    [[noreturn]] void abort(int code) override {
        inner_.abort(code);
        std::abort();  // a virtual call does not carry [[noreturn]] to the compiler
    }

    std::vector<Start> starts;

private:
    dist::Backend& inner_;
    const float* begin_ = nullptr;
    int64_t size_ = 0;
};

std::ostream& operator<<(std::ostream& out, const SpyBackend::Start& s) {
    return out << "{offset " << s.offset << ", count " << s.count << ", below zero " << s.below_zero
               << "}";
}

template <typename Fn>
void for_each_cpu_variant(const Config& config, Fn&& fn) {
    for (const Variant* v : variants_on(Device::cpu))
        for (DType dt : {DType::f32, DType::f64})
            if (!v->supports(config, dt)) fn(*v, dt);
}

}  // namespace

TEST_CASE("a data-parallel step equals one process's step on the whole batch, every CPU variant",
          "[dist]") {
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ce_every_frame, nn::Head::ctc}) {
        for_each_cpu_variant(model_config(head).lstm, [&](const Variant& v, DType dt) {
            if (dt == DType::f32)
                check_matches_one_process<float>(v, head, Split::balanced);
            else
                check_matches_one_process<double>(v, head, Split::balanced);
        });
    }
}

TEST_CASE("without the per-layer overlap a data-parallel step equals one process's step too",
          "[dist]") {
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ctc})
        for (Split split : {Split::balanced, Split::last_empty})
            for_each_cpu_variant(model_config(head).lstm, [&](const Variant& v, DType dt) {
                if (dt == DType::f32)
                    check_matches_one_process<float>(v, head, split, dist::Overlap::dense_head);
            });
}

TEST_CASE("a data-parallel step equals one process's step for the pooled and final-state heads",
          "[dist]") {
    for (nn::Head head : {nn::Head::ce_mean_pool, nn::Head::ce_final_state}) {
        check_matches_one_process<float>(find_variant("basic", Device::cpu), head, Split::balanced);
        check_matches_one_process<double>(find_variant("basic", Device::cpu), head,
                                          Split::balanced);
    }
}

TEST_CASE("targets of -100 are no items: a rank whose targets are all ignored weighs nothing",
          "[dist]") {
    const Variant& v = find_variant("fused", Device::cpu);
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ce_every_frame}) {
        check_matches_one_process<float>(v, head, Split::balanced, dist::Overlap::per_layer, true);
        check_matches_one_process<double>(v, head, Split::balanced, dist::Overlap::per_layer, true);
    }
}

TEST_CASE("unequal shards, one of them empty, weigh each rank by its share", "[dist]") {
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ce_every_frame, nn::Head::ctc})
        for (Split split : {Split::one_on_the_others, Split::last_empty})
            for_each_cpu_variant(model_config(head).lstm, [&](const Variant& v, DType dt) {
                if (dt == DType::f32) check_matches_one_process<float>(v, head, split);
            });
}

TEST_CASE("parameters stay bit-identical across ranks over several steps", "[dist]") {
    const nn::ModelConfig mc = model_config(nn::Head::ctc);
    for (dist::Overlap overlap : {dist::Overlap::per_layer, dist::Overlap::dense_head})
        for_each_cpu_variant(mc.lstm, [&](const Variant& v, DType dt) {
            if (dt != DType::f32) return;
            INFO("variant " << v.name() << ", rank " << world().rank() << ", overlap "
                            << dist::to_string(overlap));
            const bool variable = !v.supports_variable_lengths().has_value();
            nn::SequenceModel<float> model(mc, v.name(), Device::cpu, 3 + 100 * world().rank());
            dist::DataParallel<float> dp(model, world(), overlap);
            const std::vector<float> before(model.lstm().parameters().begin(),
                                            model.lstm().parameters().end());
            const auto range = dist::shard_range(kBatch, world().rank(), world().size());
            for (int step = 0; step < 5; ++step) {
                const test::GlobalBatch g = test::make_batch(nn::Head::ctc, kSteps, kBatch, kInput,
                                                             kClasses, variable, 40 + step);
                const auto s = test::cut_shard<float>(g, nn::Head::ctc, range.begin, range.size());
                const float loss = dp.train_step(s.view(), s.lengths, s.targets, s.target_lengths);
                CHECK(std::isfinite(loss));
            }
            CHECK(dp.parameters_in_sync());
            // The training moved the parameters (a check of a model that never changed proves
            // little).
            CHECK(std::memcmp(before.data(), model.lstm().parameters().data,
                              before.size() * sizeof(float)) != 0);
            // And the check itself can fail: one ulp on one rank is seen on every rank.
            if (world().size() > 1) {
                float& p = model.lstm().parameters()[0];
                if (world().rank() == 1) p = std::nextafter(p, 2 * p + 1);
                CHECK_FALSE(dp.parameters_in_sync());
            }
        });
}

TEST_CASE("the loss of a data-parallel step is the same global mean on every rank", "[dist]") {
    const nn::ModelConfig mc = model_config(nn::Head::ce_every_frame);
    nn::SequenceModel<double> model(mc, "basic", Device::cpu, 1);
    dist::DataParallel<double> dp(model, world());
    const auto range = dist::shard_range(kBatch, world().rank(), world().size());
    const test::GlobalBatch g =
        test::make_batch(nn::Head::ce_every_frame, kSteps, kBatch, kInput, kClasses, true, 9);
    const auto s = test::cut_shard<double>(g, nn::Head::ce_every_frame, range.begin, range.size());
    double loss = dp.compute_gradients(s.view(), s.lengths, s.targets);
    double root = loss;
    world().broadcast(TensorView<double>(&root, {1}), 0);
    CHECK(std::memcmp(&root, &loss, sizeof loss) == 0);
}

TEST_CASE("an empty global batch is an error on every rank", "[dist]") {
    const nn::ModelConfig mc = model_config(nn::Head::ce_last_step);
    nn::SequenceModel<float> model(mc, "basic", Device::cpu, 1);
    dist::DataParallel<float> dp(model, world());
    const TensorView<const float> empty(nullptr, {kSteps, 0, kInput});
    CHECK_THROWS_WITH(dp.compute_gradients(empty, {}, {}),
                      Catch::Contains("the global batch is empty"));
}

TEST_CASE("a per-frame head's lengths are checked before they weight a rank's gradients",
          "[dist]") {
    // Summed unchecked, lengths of 0 once made a batch of 4 sequences read as empty, and a
    // negative one could have cancelled real frames in the ranks' weights.
    nn::SequenceModel<float> model(model_config(nn::Head::ce_every_frame), "basic", Device::cpu, 1);
    dist::DataParallel<float> dp(model, world());
    const std::vector<float> x(static_cast<size_t>(kSteps * 2 * kInput), 0.5f);
    const TensorView<const float> xv(x.data(), {kSteps, 2, kInput});
    const std::vector<int64_t> targets(static_cast<size_t>(kSteps * 2), 0);
    for (const std::vector<int64_t>& lengths :
         {std::vector<int64_t>{0, 1}, std::vector<int64_t>{-5, 1}})
        CHECK_THROWS_WITH(dp.compute_gradients(xv, lengths, targets),
                          Catch::Contains("DataParallel: lengths[0] = " +
                                          std::to_string(lengths[0]) + " must be in 1..T"));
}

TEST_CASE("shard_range cuts a batch into contiguous, balanced, ordered shards", "[dist]") {
    for (int size : {1, 2, 3, 5})
        for (int64_t items : {0, 1, 4, 7, 10}) {
            int64_t next = 0;
            for (int r = 0; r < size; ++r) {
                const auto range = dist::shard_range(items, r, size);
                CHECK(range.begin == next);
                CHECK(range.size() >= items / size);
                CHECK(range.size() <= items / size + 1);
                next = range.end;
            }
            CHECK(next == items);
        }
    CHECK_THROWS_WITH(dist::shard_range(4, 2, 2), Catch::Contains("rank must be in [0, size = 2)"));
}

TEST_CASE("the per-layer overlap starts one allreduce per layer during the backward, top first",
          "[dist]") {
    nn::ModelConfig mc = model_config(nn::Head::ce_last_step);
    mc.lstm.num_layers = 3;
    for (dist::Overlap overlap : {dist::Overlap::per_layer, dist::Overlap::dense_head})
        for_each_cpu_variant(mc.lstm, [&](const Variant& v, DType dt) {
            if (dt != DType::f32) return;
            INFO("variant " << v.name() << ", rank " << world().rank() << ", overlap "
                            << dist::to_string(overlap));
            const bool variable = !v.supports_variable_lengths().has_value();
            const test::GlobalBatch g = test::make_batch(nn::Head::ce_last_step, kSteps, kBatch,
                                                         kInput, kClasses, variable, 23);
            nn::SequenceModel<float> whole(mc, v.name(), Device::cpu, 4);
            const auto all = test::cut_shard<float>(g, nn::Head::ce_last_step, 0, kBatch);
            whole.compute_gradients(all.view(), all.lengths, all.targets);

            SpyBackend spy(world().backend_for(Device::cpu));
            dist::Communicator comm(spy);
            nn::SequenceModel<float> model(mc, v.name(), Device::cpu, 4 + 10 * world().rank());
            dist::DataParallel<float> dp(model, comm, overlap);
            const auto grads = model.lstm().gradients();
            spy.watch(grads.data, grads.size);
            const auto range = dist::shard_range(kBatch, world().rank(), world().size());
            const auto s =
                test::cut_shard<float>(g, nn::Head::ce_last_step, range.begin, range.size());
            spy.starts.clear();
            dp.compute_gradients(s.view(), s.lengths, s.targets);

            // The dense head's first (outside the watched buffer), then the LSTM's: per layer,
            // each started while the layers below were still zero, or the whole buffer at once.
            const int64_t dense = model.dense().gradients().size;
            std::vector<SpyBackend::Start> want = {{-1, dense, false}};
            if (overlap == dist::Overlap::per_layer) {
                for (int64_t l = mc.lstm.num_layers - 1; l >= 0; --l) {
                    const int64_t begin = layer_param_offset(mc.lstm, l);
                    const int64_t end = l + 1 < mc.lstm.num_layers
                                            ? layer_param_offset(mc.lstm, l + 1)
                                            : param_count(mc.lstm);
                    want.push_back({begin, end - begin, true});
                }
            } else {
                want.push_back({0, param_count(mc.lstm), true});
            }
            CHECK(spy.starts == want);

            // And the sum is the one process's gradient.
            const double rtol =
                reference::lstm_rtol(DType::f32, mc.lstm, kSteps, reference::Pass::backward);
            const auto want_grads = whole.lstm().gradients();
            LSTM_CHECK_CLOSE(
                test::compare_scaled("LSTM gradient", to_double(grads.data, grads.size),
                                     to_double(want_grads.data, want_grads.size), rtol));
        });
}

TEST_CASE("the per-layer overlap rejects more layers than a back-end keeps allreduces in flight",
          "[dist]") {
    nn::ModelConfig mc = model_config(nn::Head::ce_last_step);
    mc.lstm = Config{kInput, 2, dist::Backend::kMaxPending, false};
    nn::SequenceModel<float> model(mc, "basic", Device::cpu, 1);
    CHECK_THROWS_AS(dist::DataParallel<float>(model, world()), InvalidArgument);
    CHECK_THROWS_WITH(dist::DataParallel<float>(model, world()),
                      Catch::Contains("num_layers must be <= 31, got 32"));
    // Without the per-layer overlap it is fine (one allreduce for the whole stack).
    dist::DataParallel<float> dp(model, world(), dist::Overlap::dense_head);
    CHECK(dp.parameters_in_sync());
}
