// What DataParallel and MpiBackend refuse, and that every rank learns of it: ranks that build
// different models, make different calls, or refuse their own shard throw on every rank with the
// exact message (instead of an MPI abort, garbage or a hang); resuming from state loaded on rank 0
// only equals the single process's run; the per-layer overlap at its documented maximum of layers
// on a back-end whose blocking allreduce takes a slot; MpiBackend's argument checks leave the
// buffer untouched. Messages are compared whole: they are the contract.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "batches.hpp"
#include "dist_env.hpp"
#include "lstm/dist/data_parallel.hpp"
#include "lstm/dist/mpi_backend.hpp"
#include "lstm/dist/shard.hpp"
#include "lstm/io/checkpoint.hpp"
#include "tolerance.hpp"

using namespace lstm;
using lstm::test::world;

namespace {

constexpr int64_t kSteps = 4, kBatch = 5, kInput = 2, kClasses = 3;

nn::ModelConfig small_config() {
    nn::ModelConfig mc;
    mc.lstm = Config{kInput, 4, 2, false};
    mc.classes = kClasses;
    return mc;
}

// The message of the lstm::Error fn() throws, or "" when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Constructs a DataParallel<T> over a fresh model of `mc` on this rank; its error or "".
template <typename T>
std::string construct(const nn::ModelConfig& mc, dist::Overlap overlap) {
    nn::SequenceModel<T> model(mc, "basic", Device::cpu, 1);
    return error_of([&] { dist::DataParallel<T> dp(model, world(), overlap); });
}

const std::string kDiffers =
    "DataParallel: every rank must pass the same model config, dtype, device, optimizer options "
    "and overlap, but rank 1 has ";

// What every rank gets when rank `bad` alone refused its arguments to `call`.
std::string refused_by(const std::string& call, int bad) {
    return "DataParallel: " + call + " stopped on every rank because rank " + std::to_string(bad) +
           " refused its arguments (its own error says why); the others would otherwise wait "
           "for it";
}

// This rank's shard of a ce_last_step batch, host, float.
test::Shard<float> my_shard(uint64_t seed) {
    const test::GlobalBatch g =
        test::make_batch(nn::Head::ce_last_step, kSteps, kBatch, kInput, kClasses, true, seed);
    const auto range = dist::shard_range(kBatch, world().rank(), world().size());
    return test::cut_shard<float>(g, nn::Head::ce_last_step, range.begin, range.size());
}

// A host back-end over another with slots of its own, as a custom back-end has: it keeps
// Backend's default blocking allreduce (start + wait, taking a slot), refuses a start beyond
// kMaxPending, and records the most allreduces it had in flight.
class SlotBackend final : public dist::Backend {
public:
    explicit SlotBackend(dist::Backend& inner) : inner_(inner) {}
    Device device() const override { return inner_.device(); }
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    dist::Request start_allreduce_sum(void* data, int64_t count, DType dtype,
                                      double scale) override {
        int slot = 0;
        while (slot < kMaxPending && inner_requests_[static_cast<size_t>(slot)].pending()) ++slot;
        check(slot < kMaxPending, "SlotBackend: more than ", kMaxPending, " allreduces in flight");
        inner_requests_[static_cast<size_t>(slot)] =
            inner_.start_allreduce_sum(data, count, dtype, scale);
        most_in_flight = std::max(most_in_flight, ++in_flight_);
        return make_request(slot);
    }
    void wait(dist::Request& request) override {
        if (!request.pending()) return;
        inner_.wait(inner_requests_[static_cast<size_t>(request.slot)]);
        --in_flight_;
        request = dist::Request{};
    }
    void broadcast(void* data, size_t bytes, int root) override {
        inner_.broadcast(data, bytes, root);
    }
    [[noreturn]] void abort(int code) override {
        inner_.abort(code);
        std::abort();  // a virtual call does not carry [[noreturn]] to the compiler
    }

    int most_in_flight = 0;

private:
    dist::Backend& inner_;
    std::array<dist::Request, kMaxPending> inner_requests_{};
    int in_flight_ = 0;
};

}  // namespace

TEST_CASE("ranks that build different models get an error naming the difference on every rank",
          "[dist]") {
    const nn::ModelConfig mc = small_config();
    const bool one = world().rank() == 1;
    const bool alone = world().size() == 1;  // nothing can differ: every case constructs
    auto expect = [&](const std::string& got, const std::string& difference) {
        INFO("rank " << world().rank() << " of " << world().size());
        CHECK(got == (alone ? "" : kDiffers + difference));
    };

    nn::ModelConfig hidden = mc;
    hidden.lstm.hidden_size = one ? 5 : 4;  // a larger and, below, a smaller LSTM on rank 1
    expect(construct<float>(hidden, dist::Overlap::per_layer),
           "lstm.hidden_size = 5 where rank 0 has 4");
    hidden.lstm.hidden_size = one ? 3 : 4;
    expect(construct<float>(hidden, dist::Overlap::per_layer),
           "lstm.hidden_size = 3 where rank 0 has 4");
    nn::ModelConfig layers = mc;
    layers.lstm.num_layers = one ? 3 : 2;
    expect(construct<float>(layers, dist::Overlap::per_layer),
           "lstm.num_layers = 3 where rank 0 has 2");
    nn::ModelConfig classes = mc;
    classes.classes = one ? 4 : 3;
    expect(construct<float>(classes, dist::Overlap::per_layer), "classes = 4 where rank 0 has 3");
    // Same parameters, another loss weighting: once silently trained with the wrong weights.
    nn::ModelConfig head = mc;
    head.head = one ? nn::Head::ce_every_frame : nn::Head::ce_last_step;
    expect(construct<float>(head, dist::Overlap::per_layer),
           "head = ce_every_frame where rank 0 has ce_last_step");
    nn::ModelConfig lr = mc;
    lr.adam.lr = one ? 0.5 : 1e-3;
    expect(construct<float>(lr, dist::Overlap::per_layer),
           "the optimizer's lr = 0.5 where rank 0 has 0.001");
    // The overlap modes issue different collectives: once a hang.
    expect(construct<float>(mc, one ? dist::Overlap::dense_head : dist::Overlap::per_layer),
           "overlap = dense_head where rank 0 has per_layer");
    // float against double, also where every buffer has the same bytes (twice the elements in
    // float): once NaN and exit status 0.
    nn::ModelConfig wide = mc;
    wide.lstm = Config{4, 2, 1, false};
    wide.classes = 3;
    nn::ModelConfig narrow = mc;
    narrow.lstm = Config{2, 4, 1, false};
    narrow.classes = 3;
    expect(one ? construct<double>(wide, dist::Overlap::per_layer)
               : construct<float>(narrow, dist::Overlap::per_layer),
           "dtype = float64 where rank 0 has float32");
}

TEST_CASE("ranks that make different calls get an error naming each rank's call", "[dist]") {
    nn::SequenceModel<float> model(small_config(), "basic", Device::cpu, 1);
    dist::DataParallel<float> dp(model, world());
    const test::Shard<float> s = my_shard(3);
    const bool one = world().rank() == 1;
    // Rank 1 checks the parameters where the others take a step (once a hang).
    const std::string got = error_of([&] {
        if (one)
            dp.parameters_in_sync();
        else
            dp.train_step(s.view(), s.lengths, s.targets);
    });
    std::string want =
        "DataParallel: the ranks made different calls (every rank must make the same "
        "DataParallel calls in the same order; call n counts this object's calls, the "
        "constructor being call 1):";
    for (int r = 0; r < world().size(); ++r)
        want += std::string(r == 0 ? " " : ", ") + "rank " + std::to_string(r) + ": " +
                (r == 1 ? "parameters_in_sync" : "train_step") + " (call 2)";
    INFO("rank " << world().rank() << " of " << world().size());
    CHECK(got == (world().size() == 1 ? "" : want));

    // The same call on another object, whose count differs: rank 1 steps a second model while
    // the others step this one a second time.
    nn::SequenceModel<float> other_model(small_config(), "basic", Device::cpu, 1);
    dist::DataParallel<float> other(other_model, world());
    const std::string got2 =
        error_of([&] { (one ? other : dp).train_step(s.view(), s.lengths, s.targets); });
    std::string want2 =
        "DataParallel: the ranks made different calls (every rank must make the same "
        "DataParallel calls in the same order; call n counts this object's calls, the "
        "constructor being call 1):";
    for (int r = 0; r < world().size(); ++r)
        want2 += std::string(r == 0 ? " " : ", ") + "rank " + std::to_string(r) +
                 ": train_step (call " + (r == 1 ? "2" : "3") + ")";
    CHECK(got2 == (world().size() == 1 ? "" : want2));

    // Every rank threw at the same point, so the communicator is still usable (the objects,
    // whose call counts now differ between ranks, are not).
    nn::SequenceModel<float> fresh_model(small_config(), "basic", Device::cpu, 1);
    dist::DataParallel<float> fresh(fresh_model, world());
    fresh.train_step(s.view(), s.lengths, s.targets);
    CHECK(fresh.parameters_in_sync());
}

TEST_CASE(
    "a rank with an empty shard refuses lengths, targets and a wrong feature size, and "
    "every rank stops",
    "[dist]") {
    nn::SequenceModel<float> model(small_config(), "basic", Device::cpu, 1);
    dist::DataParallel<float> dp(model, world());
    const int last = world().size() - 1;
    const bool bad = world().rank() == last;
    const std::vector<float> x(static_cast<size_t>(kSteps * 2 * kInput), 0.25f);
    const std::vector<int64_t> lengths{kSteps, kSteps}, targets{0, 2};
    const std::string prefix = "DataParallel: x has N = 0 sequences on this rank, ";
    struct Case {
        int64_t features;
        std::vector<int64_t> lengths, targets, target_lengths;
        std::string message;
    };
    // Once accepted silently: x (T, 0, I) with lengths {99, -3} and three targets.
    const std::vector<Case> cases = {
        {kInput, {99, -3}, {7, 8, 9}, {}, "so lengths must be empty, got 2 lengths"},
        {kInput, {}, {7, 8, 9}, {}, "so targets must be empty, got 3 targets"},
        {kInput, {}, {}, {1}, "so target_lengths must be empty, got 1 target lengths"},
        {kInput + 3,
         {},
         {},
         {},
         "but its features (x.size(2)) must still be input_size = 2, got 5"},
    };
    for (const Case& c : cases) {
        const std::vector<float> none;
        const std::string got = error_of([&] {
            if (bad)
                dp.train_step(TensorView<const float>(none.data(), {kSteps, 0, c.features}),
                              c.lengths, c.targets, c.target_lengths);
            else
                dp.train_step(TensorView<const float>(x.data(), {kSteps, 2, kInput}), lengths,
                              targets);
        });
        INFO("rank " << world().rank() << " of " << world().size() << ": " << c.message);
        CHECK(got == (bad ? prefix + c.message : refused_by("train_step", last)));
    }
    // T = 0 with sequences (once counted as an empty per-frame shard on that rank alone).
    const std::string got = error_of([&] {
        if (bad)
            dp.train_step(TensorView<const float>(x.data(), {0, 2, kInput}), {}, targets);
        else
            dp.train_step(TensorView<const float>(x.data(), {kSteps, 2, kInput}), lengths, targets);
    });
    CHECK(got == (bad ? "x: T (x.size(0)) must be >= 1, got 0" : refused_by("train_step", last)));
    // An empty shard without them is fine.
    const std::vector<float> none;
    const test::Shard<float> s = my_shard(5);
    if (world().size() > 1) {
        if (bad)
            dp.train_step(TensorView<const float>(none.data(), {kSteps, 0, kInput}), {}, {});
        else
            dp.train_step(TensorView<const float>(x.data(), {kSteps, 2, kInput}), lengths, targets);
    }
    CHECK(dp.parameters_in_sync());
}

TEST_CASE("an Overlap outside the enumeration is refused on every rank", "[dist]") {
    const std::string own =
        "DataParallel: overlap must be Overlap::dense_head or Overlap::per_layer, got Overlap(7)";
    CHECK(construct<float>(small_config(), static_cast<dist::Overlap>(7)) == own);
    // On rank 1 only, the others learn of it instead of waiting in the parameter broadcast.
    if (world().size() == 1) return;
    const bool one = world().rank() == 1;
    const std::string got = construct<float>(
        small_config(), one ? static_cast<dist::Overlap>(7) : dist::Overlap::per_layer);
    CHECK(got == (one ? own : refused_by("the DataParallel constructor", 1)));
}

TEST_CASE("state loaded on rank 0 only and broadcast resumes every rank as one process would",
          "[dist]") {
    // The run being resumed: three steps of one process on the whole batch, checkpointed.
    const nn::ModelConfig mc = small_config();
    const test::GlobalBatch g =
        test::make_batch(nn::Head::ce_last_step, kSteps, kBatch, kInput, kClasses, true, 11);
    const test::Shard<double> all = test::cut_shard<double>(g, nn::Head::ce_last_step, 0, kBatch);
    nn::SequenceModel<double> earlier(mc, "basic", Device::cpu, 7);
    for (int step = 0; step < 3; ++step) earlier.train_step(all.view(), all.lengths, all.targets);
    io::TensorFile checkpoint;
    io::add_checkpoint(checkpoint, earlier);
    // The oracle: the same process's next step, at the lr a schedule gives it there.
    earlier.optimizer().set_lr(0.01);
    earlier.train_step(all.view(), all.lengths, all.targets);

    nn::SequenceModel<double> model(mc, "basic", Device::cpu, 100 + world().rank());
    dist::DataParallel<double> dp(model, world());
    if (world().rank() == 0) {
        io::load_checkpoint(checkpoint, model);
        model.optimizer().set_lr(0.01);
    }
    dp.broadcast_parameters();
    INFO("rank " << world().rank() << " of " << world().size());
    CHECK(model.optimizer().steps(0) == 3);
    CHECK(model.optimizer().options().lr == 0.01);
    const auto range = dist::shard_range(kBatch, world().rank(), world().size());
    const auto s = test::cut_shard<double>(g, nn::Head::ce_last_step, range.begin, range.size());
    dp.train_step(s.view(), s.lengths, s.targets);
    CHECK(dp.parameters_in_sync());
    const double rtol =
        reference::lstm_rtol(DType::f64, mc.lstm, kSteps, reference::Pass::backward);
    const auto got = model.lstm().parameters(), want = earlier.lstm().parameters();
    LSTM_CHECK_CLOSE(test::compare_scaled("LSTM parameters",
                                          std::vector<double>(got.begin(), got.end()),
                                          std::vector<double>(want.begin(), want.end()), rtol));
    const auto dense = model.dense().parameters(), dense_want = earlier.dense().parameters();
    LSTM_CHECK_CLOSE(
        test::compare_scaled("dense parameters", std::vector<double>(dense.begin(), dense.end()),
                             std::vector<double>(dense_want.begin(), dense_want.end()), rtol));
}

TEST_CASE(
    "the per-layer overlap runs its maximum of layers on a back-end whose blocking "
    "allreduce takes a slot",
    "[dist]") {
    nn::ModelConfig mc = small_config();
    mc.lstm = Config{kInput, 2, dist::Backend::kMaxPending - 1, false};
    const test::GlobalBatch g =
        test::make_batch(nn::Head::ce_last_step, kSteps, kBatch, kInput, kClasses, true, 13);
    nn::SequenceModel<float> whole(mc, "basic", Device::cpu, 2);
    const auto all = test::cut_shard<float>(g, nn::Head::ce_last_step, 0, kBatch);
    const float want = whole.compute_gradients(all.view(), all.lengths, all.targets);

    SlotBackend counting(world().backend_for(Device::cpu));
    dist::Communicator comm(counting);
    nn::SequenceModel<float> model(mc, "basic", Device::cpu, 2);
    dist::DataParallel<float> dp(model, comm);
    const auto range = dist::shard_range(kBatch, world().rank(), world().size());
    const auto s = test::cut_shard<float>(g, nn::Head::ce_last_step, range.begin, range.size());
    // Once "more than 32 allreduces in flight" mid-step: the loss sum took a 33rd slot.
    const std::string error = error_of([&] {
        const float loss = dp.compute_gradients(s.view(), s.lengths, s.targets);
        const double rtol =
            reference::lstm_rtol(DType::f32, mc.lstm, kSteps, reference::Pass::backward);
        CHECK(std::abs(loss - want) <= rtol * std::abs(want));
    });
    CHECK(error == "");
    CHECK(counting.most_in_flight == dist::Backend::kMaxPending);
}

TEST_CASE(
    "MpiBackend refuses a full set of requests, a non-finite scale and MPI_COMM_NULL "
    "without touching the buffer",
    "[dist]") {
    dist::MpiBackend host(MPI_COMM_WORLD);
    const int p = host.size();
    std::vector<std::vector<float>> buffers(dist::Backend::kMaxPending + 1,
                                            std::vector<float>(4, 1.0f));
    std::vector<dist::Request> requests;
    for (int k = 0; k < dist::Backend::kMaxPending; ++k)
        requests.push_back(
            host.start_allreduce_sum(buffers[static_cast<size_t>(k)].data(), 4, DType::f32, 0.5));
    std::vector<float>& extra = buffers.back();
    CHECK(error_of([&] { host.start_allreduce_sum(extra.data(), 4, DType::f32, 0.5); }) ==
          "MpiBackend: more than 32 allreduces in flight; wait() for some");
    CHECK(extra == std::vector<float>(4, 1.0f));  // was scaled by 0.5 before the refusal
    for (dist::Request& r : requests) host.wait(r);
    CHECK(buffers[0] == std::vector<float>(4, 0.5f * static_cast<float>(p)));

    // Once accepted: every rank's sum NaN. Checked before any collective, so on one rank alone.
    std::vector<float> v(4, 1.0f);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(error_of([&] { host.allreduce_sum(v.data(), 4, DType::f32, nan); }) ==
          "MpiBackend::start_allreduce_sum: scale must be finite in float32, got nan");
    CHECK(error_of([&] {
              host.allreduce_sum(v.data(), 4, DType::f64, -std::numeric_limits<double>::infinity());
          }) == "MpiBackend::start_allreduce_sum: scale must be finite in float64, got -inf");
    CHECK(error_of([&] { host.start_allreduce_sum(v.data(), 4, DType::f32, 1e300); }) ==
          "MpiBackend::start_allreduce_sum: scale must be finite in float32, got 1e+300");
    CHECK(v == std::vector<float>(4, 1.0f));

    CHECK(error_of([] { dist::MpiBackend none(MPI_COMM_NULL); }) ==
          "MpiBackend: comm must be a communicator, got MPI_COMM_NULL (this process is not in the "
          "group the communicator was made for)");
}
