// What a training program relies on between steps: a refused step changes nothing (parameters,
// gradients, optimizer moments and counts, dropout state) and the run goes on as if it never
// came; batch-first models and batches; parameter groups; clipping a whole model; the sampler's
// position.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "lstm/io/checkpoint.hpp"
#include "lstm/memory.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/nn/predict.hpp"
#include "lstm/nn/sampler.hpp"
#include "lstm/registry.hpp"
#include "test_util.hpp"

using namespace lstm;
using Catch::Contains;

namespace {

constexpr int64_t kSteps = 6, kBatch = 4, kInput = 5, kClasses = 4;

nn::ModelConfig model_config(nn::Head head, bool batch_first = false) {
    nn::ModelConfig c;
    c.lstm = Config{kInput, 7, 2, true};
    c.lstm.dropout = 0.3;
    c.lstm.batch_first = batch_first;
    c.classes = kClasses;
    c.dense_bias = true;
    c.head = head;
    c.adam = nn::adamw_options(0.01, 0.05);
    return c;
}

// Batch b of a run (time-major x), with the targets `head` takes.
struct Batch {
    std::vector<float> x;
    std::vector<int64_t> lengths, targets, target_lengths;
};

// full: every sequence of length T (for a variant without per-sequence lengths).
Batch make_batch(nn::Head head, int b, bool full = false) {
    Batch out;
    out.x = test::random_vector<float>(kSteps * kBatch * kInput, 700 + b, -1.0, 1.0);
    out.lengths = {6, 3, 5, 6};
    if (full) out.lengths.assign(kBatch, kSteps);
    if (head == nn::Head::ce_every_frame) {
        for (int64_t i = 0; i < kSteps * kBatch; ++i) out.targets.push_back((i + b) % kClasses);
    } else if (head == nn::Head::ctc) {
        out.target_lengths = {2, 1, 2, 3};
        for (int64_t n = 0; n < kBatch; ++n)
            for (int64_t k = 0; k < out.target_lengths[n]; ++k)
                out.targets.push_back(1 + (n + k + b) % (kClasses - 1));
    } else {
        for (int64_t n = 0; n < kBatch; ++n) out.targets.push_back((n + b) % kClasses);
    }
    return out;
}

float step(nn::SequenceModel<float>& model, const Batch& d) {
    return model.train_step(TensorView<const float>(d.x.data(), {kSteps, kBatch, kInput}),
                            Span<const int64_t>(d.lengths), Span<const int64_t>(d.targets),
                            Span<const int64_t>(d.target_lengths));
}

// Every bit a step may change, flattened: parameters, gradients, Adam's moments and step counts,
// the dropout state.
struct Snapshot {
    std::vector<float> values;
    std::vector<int64_t> counts;
};

void append(std::vector<float>& out, TensorView<const float> v) {
    out.insert(out.end(), v.data(), v.data() + v.numel());
}

Snapshot snapshot(nn::SequenceModel<float>& model) {
    Snapshot s;
    append(s.values, std::as_const(model.lstm()).parameters().view());
    const Span<const float> dense = std::as_const(model.dense()).parameters();
    s.values.insert(s.values.end(), dense.begin(), dense.end());
    for (const TensorView<float>& g : model.gradient_buffers()) append(s.values, g);
    nn::Adam<float>& adam = model.optimizer();
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        append(s.values, adam.exp_avg(k));
        append(s.values, adam.exp_avg_sq(k));
        s.counts.push_back(adam.steps(k));
    }
    s.counts.push_back(static_cast<int64_t>(model.lstm().dropout_seed()));
    s.counts.push_back(static_cast<int64_t>(model.lstm().dropout_count()));
    return s;
}

// Bitwise equality; prints how many values differ and the first ones.
bool same_bits(const Snapshot& got, const Snapshot& want) {
    if (got.counts != want.counts) {
        std::string text;
        for (size_t k = 0; k < got.counts.size() && k < want.counts.size(); ++k)
            if (got.counts[k] != want.counts[k])
                text += " [" + std::to_string(k) + "] " + std::to_string(got.counts[k]) +
                        " != " + std::to_string(want.counts[k]);
        UNSCOPED_INFO("step counts / dropout state differ:" << text);
        return false;
    }
    if (got.values.size() != want.values.size()) {
        UNSCOPED_INFO(got.values.size() << " values, expected " << want.values.size());
        return false;
    }
    size_t differ = 0;
    std::string first;
    for (size_t i = 0; i < got.values.size(); ++i) {
        if (std::memcmp(&got.values[i], &want.values[i], sizeof(float)) == 0) continue;
        if (++differ <= 5)
            first += " [" + std::to_string(i) + "] " + std::to_string(got.values[i]) + " vs " +
                     std::to_string(want.values[i]);
    }
    if (differ != 0)
        UNSCOPED_INFO(differ << " of " << got.values.size() << " values differ:" << first);
    return differ == 0;
}

const char* head_name(nn::Head head) { return nn::to_string(head); }

}  // namespace

TEST_CASE("a refused training step changes nothing, and the run goes on as if it never came",
          "[nn][rollback]") {
    for (const Variant* variant : variants_on(Device::cpu)) {
        for (const nn::Head head :
             {nn::Head::ce_last_step, nn::Head::ce_every_frame, nn::Head::ctc}) {
            INFO("variant " << variant->name() << ", head " << head_name(head));
            const bool full = variant->supports_variable_lengths().has_value();
            const nn::ModelConfig config = model_config(head);
            nn::SequenceModel<float> model(config, variant->name(), Device::cpu, 21);
            nn::SequenceModel<float> twin(config, variant->name(), Device::cpu, 21);
            for (int b = 0; b < 2; ++b) {
                step(model, make_batch(head, b, full));
                step(twin, make_batch(head, b, full));
            }
            // Each bad batch breaks one thing a step checks; each must throw and change nothing.
            struct Bad {
                const char* what;
                std::function<void(Batch&)> spoil;
            };
            std::vector<Bad> bad = {
                {"a length past T", [](Batch& d) { d.lengths[1] = kSteps + 1; }},
                {"a zero length", [](Batch& d) { d.lengths[2] = 0; }},
                {"too few lengths", [](Batch& d) { d.lengths.pop_back(); }},
            };
            if (head == nn::Head::ctc) {
                bad.push_back({"a label equal to blank", [](Batch& d) { d.targets[0] = 0; }});
                bad.push_back(
                    {"a label past the classes", [](Batch& d) { d.targets[1] = kClasses; }});
                bad.push_back({"target_lengths summing to more than the targets",
                               [](Batch& d) { d.target_lengths[3] += 1; }});
            } else {
                bad.push_back({"class C of C", [](Batch& d) { d.targets[1] = kClasses; }});
                bad.push_back({"class -5", [](Batch& d) { d.targets[0] = -5; }});
                bad.push_back({"one target too few", [](Batch& d) { d.targets.pop_back(); }});
                bad.push_back({"target_lengths for a head without CTC", [](Batch& d) {
                                   d.target_lengths = {1, 1, 1, 1};
                               }});
            }
            for (const Bad& b : bad) {
                INFO("bad batch: " << b.what);
                Batch d = make_batch(head, 2, full);
                b.spoil(d);
                const Snapshot before = snapshot(model);
                CHECK_THROWS_AS(step(model, d), Error);
                CHECK(same_bits(snapshot(model), before));
            }
            for (int b = 2; b < 6; ++b) {
                step(model, make_batch(head, b, full));
                step(twin, make_batch(head, b, full));
            }
            CHECK(same_bits(snapshot(model), snapshot(twin)));
        }
    }
}

TEST_CASE("a step refused for memory at any of its requests changes nothing", "[nn][rollback]") {
    for (const Variant* variant : variants_on(Device::cpu)) {
        for (const nn::Head head : {nn::Head::ce_last_step, nn::Head::ctc}) {
            INFO("variant " << variant->name() << ", head " << head_name(head));
            const bool full = variant->supports_variable_lengths().has_value();
            const nn::ModelConfig config = model_config(head);
            nn::SequenceModel<float> model(config, variant->name(), Device::cpu, 5);
            nn::SequenceModel<float> twin(config, variant->name(), Device::cpu, 5);
            int64_t refused = 0;
            for (int64_t k = 0;; ++k) {
                const Snapshot before = snapshot(model);
                const test::MemoryFailureDisarm disarm;
                testing::fail_memory_request_after(k);
                bool threw = false;
                try {
                    step(model, make_batch(head, 1, full));
                } catch (const OutOfMemory& e) {
                    threw = true;
                    INFO("request " << k << ": " << e.what());
                    CHECK(same_bits(snapshot(model), before));
                }
                testing::fail_memory_request_after(-1);
                if (!threw) break;
                ++refused;
                REQUIRE(k < 200);
            }
            INFO(refused << " memory requests refused one at a time");
            CHECK(refused >= 2);  // at least the forward's and the backward's
            step(twin, make_batch(head, 1, full));
            for (int b = 2; b < 4; ++b) {
                step(model, make_batch(head, b, full));
                step(twin, make_batch(head, b, full));
            }
            CHECK(same_bits(snapshot(model), snapshot(twin)));
        }
    }
}

TEST_CASE("a batch-first model trains bit for bit as the time-major one", "[nn][batch_first]") {
    for (const nn::Head head : {nn::Head::ce_last_step, nn::Head::ce_every_frame, nn::Head::ctc}) {
        INFO("head " << head_name(head));
        nn::SequenceModel<float> time_major(model_config(head), "fused", Device::cpu, 8);
        nn::SequenceModel<float> batch_major(model_config(head, true), "fused", Device::cpu, 8);
        for (int b = 0; b < 3; ++b) {
            const Batch d = make_batch(head, b);
            Batch t = d;  // x (N, T, I), per-frame targets (N, T)
            for (int64_t s = 0; s < kSteps; ++s)
                for (int64_t n = 0; n < kBatch; ++n) {
                    std::copy_n(d.x.begin() + (s * kBatch + n) * kInput, kInput,
                                t.x.begin() + (n * kSteps + s) * kInput);
                    if (head == nn::Head::ce_every_frame)
                        t.targets[n * kSteps + s] = d.targets[s * kBatch + n];
                }
            const float want = step(time_major, d);
            const float got = batch_major.train_step(
                TensorView<const float>(t.x.data(), {kBatch, kSteps, kInput}),
                Span<const int64_t>(t.lengths), Span<const int64_t>(t.targets),
                Span<const int64_t>(t.target_lengths));
            CHECK(got == want);
        }
        CHECK(same_bits(snapshot(batch_major), snapshot(time_major)));
        const TensorView<const float> tm = time_major.logits(), bm = batch_major.logits();
        if (head == nn::Head::ce_last_step) {
            CHECK(bm.shape_string() == tm.shape_string());
            continue;
        }
        REQUIRE(bm.size(0) == kBatch);
        REQUIRE(bm.size(1) == kSteps);
        int64_t differ = 0;
        for (int64_t s = 0; s < kSteps; ++s)
            for (int64_t n = 0; n < kBatch; ++n)
                for (int64_t c = 0; c < kClasses; ++c)
                    differ += bm.data()[(n * kSteps + s) * kClasses + c] !=
                              tm.data()[(s * kBatch + n) * kClasses + c];
        CHECK(differ == 0);
    }
}

TEST_CASE("pad_sequences builds batch-first batches as the transpose of time-major ones",
          "[nn][batch_first]") {
    const std::vector<std::vector<double>> seqs = {{1, 2, 3, 4, 5, 6}, {7, 8}, {9, 10, 11, 12}};
    const nn::PaddedBatch<double> tm = nn::pad_sequences(seqs, 2);
    const nn::PaddedBatch<double> bm = nn::pad_sequences(seqs, 2, {}, true);
    CHECK(bm.view().shape_string() == "(3, 3, 2)");
    CHECK(bm.lengths == tm.lengths);
    // PyTorch's pad_sequence(batch_first=True) of the same sequences.
    const std::vector<double> want = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 9, 10, 11, 12, 0, 0};
    CHECK(bm.x == want);
}

TEST_CASE("parameter groups set their own weight decay and learning-rate scale", "[nn][optim]") {
    const std::vector<float> grads = test::random_vector<float>(16, 3, -1.0, 1.0);
    const std::vector<float> start = test::random_vector<float>(16, 4, -1.0, 1.0);
    auto run = [&](const nn::AdamOptions& options, const nn::ParamGroup& group) {
        std::vector<float> p = start;
        nn::Adam<float> adam(options);
        adam.add(Span<float>(p), Span<const float>(grads), group);
        for (int s = 0; s < 3; ++s) adam.step();
        return p;
    };
    const nn::AdamOptions decayed = nn::adamw_options(0.01, 0.1);
    const nn::AdamOptions undecayed = nn::adamw_options(0.01, 0.0);
    nn::ParamGroup no_decay;
    no_decay.weight_decay = 0.0;
    CHECK(run(decayed, no_decay) == run(undecayed, {}));
    CHECK(run(decayed, {}) != run(undecayed, {}));
    nn::ParamGroup half;
    half.lr_scale = 0.5;
    CHECK(run(decayed, half) == run(nn::adamw_options(0.005, 0.1), {}));
    nn::ParamGroup negative;
    negative.weight_decay = -1.0;
    std::vector<float> p = start;
    nn::Adam<float> adam(decayed);
    CHECK_THROWS_WITH(adam.add(Span<float>(p), Span<const float>(grads), negative),
                      Contains("group.weight_decay must be >= 0, got -1"));
    CHECK(adam.buffer_count() == 0);
}

TEST_CASE("bias_weight_decay exempts every bias of a model from decay", "[nn][optim]") {
    nn::ModelConfig exempt = model_config(nn::Head::ce_last_step);
    exempt.lstm.dropout = 0.0;
    exempt.adam = nn::adamw_options(0.01, 0.2);
    exempt.bias_weight_decay = 0.0;
    nn::ModelConfig decayed = exempt;
    decayed.bias_weight_decay.reset();
    nn::ModelConfig none = exempt;
    none.adam.weight_decay = 0.0;
    none.bias_weight_decay.reset();
    nn::SequenceModel<float> a(exempt, "basic", Device::cpu, 4),
        b(decayed, "basic", Device::cpu, 4), c(none, "basic", Device::cpu, 4);
    // One step: each parameter's update is elementwise, so a bias of `a` must equal `c`'s and a
    // weight of `a` must equal `b`'s, bit for bit.
    for (nn::SequenceModel<float>* m : {&a, &b, &c})
        step(*m, make_batch(nn::Head::ce_last_step, 0));
    const std::vector<ParamEntry> entries = param_entries(exempt.lstm);
    const float* pa = a.lstm().parameters().data;
    const float* pb = b.lstm().parameters().data;
    const float* pc = c.lstm().parameters().data;
    int64_t wrong = 0, biases = 0;
    for (const ParamEntry& e : entries) {
        const float* want = e.cols == 0 ? pc : pb;
        biases += e.cols == 0 ? e.numel() : 0;
        for (int64_t i = e.offset; i < e.offset + e.numel(); ++i) wrong += pa[i] != want[i];
    }
    CHECK(biases == 2 * 2 * 2 * 4 * 7);
    CHECK(wrong == 0);
    const Span<float> da = a.dense().parameters(), db = b.dense().parameters(),
                      dc = c.dense().parameters();
    const int64_t weights = kClasses * 14;
    for (int64_t i = 0; i < da.size; ++i) wrong += da[i] != (i < weights ? db[i] : dc[i]);
    CHECK(wrong == 0);
    CHECK(a.optimizer().buffer_count() == 2 * 2 * 2 + 2);
    CHECK(*a.optimizer().group(1).weight_decay == 0.0);
}

TEST_CASE("clip_grad_norm over a model clips every gradient buffer it has", "[nn][clip]") {
    nn::SequenceModel<float> model(model_config(nn::Head::ce_last_step), "basic", Device::cpu, 2);
    nn::SequenceModel<float> twin(model_config(nn::Head::ce_last_step), "basic", Device::cpu, 2);
    const Batch d = make_batch(nn::Head::ce_last_step, 0);
    for (nn::SequenceModel<float>* m : {&model, &twin})
        m->compute_gradients(TensorView<const float>(d.x.data(), {kSteps, kBatch, kInput}),
                             Span<const int64_t>(d.lengths), Span<const int64_t>(d.targets));
    const std::vector<TensorView<float>> buffers = model.gradient_buffers();
    REQUIRE(buffers.size() == 2);
    CHECK(buffers[0].numel() == param_count(model.config().lstm));
    CHECK(buffers[1].numel() == kClasses * 14 + kClasses);
    const double norm = nn::clip_grad_norm(model, 1e-3);
    const double by_hand =
        nn::clip_grad_norm<float>({twin.lstm().gradients(), twin.dense().gradients()}, 1e-3);
    CHECK(norm == by_hand);
    CHECK(norm > 1e-3);  // so clipping happened
    CHECK(same_bits(snapshot(model), snapshot(twin)));
}

TEST_CASE("a read-only Span binds a temporary container", "[nn]") {
    const std::vector<float> scores = {0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f};
    const std::vector<int64_t> targets = {1, 0, 0};
    // argmax gives {1, 0, 1}: two of three right.
    CHECK(nn::accuracy(nn::argmax_classes(TensorView<const float>(scores.data(), {3, 2})),
                       targets) == Approx(2.0 / 3.0));
}

TEST_CASE("the batch sampler walks epochs and resumes from its state", "[nn][sampler]") {
    const std::vector<int64_t> lengths = {5, 3, 9, 2, 7, 7, 1, 4, 6, 8};
    nn::BatchSampler sampler = nn::BatchSampler::by_length(lengths, 3, 40);
    std::vector<std::vector<int64_t>> seen;
    while (sampler.epoch() < 2) seen.push_back(sampler.next());
    std::vector<std::vector<int64_t>> want = nn::bucket_by_length(lengths, 3, 40);
    const std::vector<std::vector<int64_t>> second = nn::bucket_by_length(lengths, 3, 41);
    want.insert(want.end(), second.begin(), second.end());
    CHECK(seen == want);
    CHECK(sampler.position() == 0);

    // Stopped after two batches of epoch 2, resumed in a sampler built as the first (at epoch 0).
    sampler.next();
    sampler.next();
    const nn::BatchSampler::State saved = sampler.state();
    nn::BatchSampler resumed = nn::BatchSampler::by_length(lengths, 3, 40);
    resumed.set_state(saved);
    for (int k = 0; k < 6; ++k) CHECK(resumed.next() == sampler.next());
    CHECK(resumed.epoch() == sampler.epoch());

    nn::BatchSampler::State bad = saved;
    bad.batches[1][0] = 10;
    const nn::BatchSampler::State kept = resumed.state();
    CHECK_THROWS_WITH(resumed.set_state(bad),
                      Contains("batch 1[0] = 10 is not an index of the 10 sequences"));
    bad = saved;
    bad.position = static_cast<int64_t>(bad.batches.size());
    CHECK_THROWS_WITH(resumed.set_state(bad), Contains("position must be in [0, 4)"));
    CHECK(resumed.state().batches == kept.batches);
    CHECK(resumed.position() == kept.position);
}

TEST_CASE("a refused Lstm forward or backward leaves the layer as it was", "[nn][rollback]") {
    for (const Variant* variant : variants_on(Device::cpu)) {
        INFO("variant " << variant->name());
        Config config{kInput, 7, 2, true};
        config.dropout = 0.25;
        Lstm layer(config, variant->name()), twin(config, variant->name());
        const int64_t out = config.output_size();
        const std::vector<float> xa =
            test::random_vector<float>(kSteps * kBatch * kInput, 1, -1, 1);
        const std::vector<float> xb =
            test::random_vector<float>(2 * kSteps * 3 * kBatch * kInput, 2, -1, 1);
        const std::vector<float> dy = test::random_vector<float>(kSteps * kBatch * out, 3, -1, 1);
        const TensorView<const float> a(xa.data(), {kSteps, kBatch, kInput});
        const TensorView<const float> b(xb.data(), {2 * kSteps, 3 * kBatch, kInput});
        const TensorView<const float> dya(dy.data(), {kSteps, kBatch, out});
        const uint64_t seed = 77;
        twin.set_dropout_state(seed, 0);
        twin.forward(a);
        twin.backward(dya);
        const std::vector<float> want(twin.gradients().begin(), twin.gradients().end());
        // A larger forward refused at each of its memory requests leaves the dropout count, and
        // the first forward's pending backward gives the twin's bits.
        int64_t refused = 0;
        for (int64_t k = 0;; ++k) {
            layer.zero_grad();
            layer.set_dropout_state(seed, 0);
            layer.forward(a);
            {
                const test::MemoryFailureDisarm disarm;
                testing::fail_memory_request_after(k);
                try {
                    layer.forward(b);
                    break;
                } catch (const OutOfMemory&) {
                    ++refused;
                }
            }
            CHECK(layer.dropout_count() == 1);
            layer.backward(dya);
            CHECK(std::vector<float>(layer.gradients().begin(), layer.gradients().end()) == want);
            REQUIRE(k < 100);
        }
        CHECK(refused >= 1);
        twin.zero_grad();
        twin.set_dropout_state(seed, 0);
        twin.forward(a);
        layer.zero_grad();
        layer.set_dropout_state(seed, 0);
        layer.forward(a);
        // The backward refused at each request adds nothing; the next one adds the twin's.
        const std::vector<float> grads_before(layer.gradients().begin(), layer.gradients().end());
        refused = 0;
        for (int64_t k = 0;; ++k) {
            const test::MemoryFailureDisarm disarm;
            testing::fail_memory_request_after(k);
            try {
                layer.backward(dya);
            } catch (const OutOfMemory&) {
                CHECK(std::vector<float>(layer.gradients().begin(), layer.gradients().end()) ==
                      grads_before);
                ++refused;
                continue;
            }
            break;
        }
        twin.backward(dya);
        INFO(refused << " backward requests refused");
        CHECK(std::vector<float>(layer.gradients().begin(), layer.gradients().end()) ==
              std::vector<float>(twin.gradients().begin(), twin.gradients().end()));
    }
}

namespace {

// A data set of 10 sequences of 1..6 steps (kInput features) with one class each.
struct Data {
    std::vector<std::vector<float>> sequences;
    std::vector<int64_t> lengths, labels;
};

Data make_data() {
    Data d;
    for (int64_t i = 0; i < 10; ++i) {
        const int64_t steps = 1 + (i * 7) % kSteps;
        d.sequences.push_back(test::random_vector<float>(steps * kInput, 900 + i, -1.0, 1.0));
        d.lengths.push_back(steps);
        d.labels.push_back(i % kClasses);
    }
    return d;
}

void train_batches(nn::SequenceModel<float>& model, nn::BatchSampler& sampler, const Data& data,
                   int count) {
    for (int k = 0; k < count; ++k) {
        const std::vector<int64_t>& idx = sampler.next();
        const nn::PaddedBatch<float> batch = nn::pad_sequences(data.sequences, kInput, idx);
        std::vector<int64_t> targets;
        for (int64_t i : idx) targets.push_back(data.labels[static_cast<size_t>(i)]);
        model.train_step(batch.view(), batch.lengths, targets);
    }
}

std::string temp_path(const char* name) {
    return (std::filesystem::temp_directory_path() /
            (std::string("lstm_step_guarantees_") + name + ".safetensors"))
        .string();
}

}  // namespace

TEST_CASE("a checkpoint with the sampler resumes mid-epoch bit for bit", "[nn][sampler][io]") {
    const Data data = make_data();
    const nn::ModelConfig config = model_config(nn::Head::ce_last_step);
    nn::SequenceModel<float> straight(config, "fused", Device::cpu, 3);
    nn::BatchSampler straight_order = nn::BatchSampler::by_length(data.lengths, 3, 50);
    train_batches(straight, straight_order, data, 9);  // 2 epochs of 4 batches and one more

    nn::SequenceModel<float> first(config, "fused", Device::cpu, 3);
    nn::BatchSampler first_order = nn::BatchSampler::by_length(data.lengths, 3, 50);
    train_batches(first, first_order, data, 6);  // mid-way through epoch 1
    const std::string path = temp_path("sampler");
    io::save_checkpoint(path, first, first_order);

    nn::SequenceModel<float> resumed(config, "fused", Device::cpu, 77);
    nn::BatchSampler resumed_order = nn::BatchSampler::by_length(data.lengths, 3, 50);
    io::load_checkpoint(path, resumed, resumed_order);
    CHECK(resumed_order.epoch() == 1);
    CHECK(resumed_order.position() == 2);
    train_batches(resumed, resumed_order, data, 3);
    CHECK(same_bits(snapshot(resumed), snapshot(straight)));
    CHECK(resumed_order.state().batches == straight_order.state().batches);

    // A sampler over another data set, or a checkpoint without a sampler: refused, nothing
    // changed.
    nn::BatchSampler smaller = nn::BatchSampler::by_length({1, 2, 3}, 3, 50);
    nn::SequenceModel<float> other(config, "fused", Device::cpu, 78);
    const Snapshot before = snapshot(other);
    CHECK_THROWS_WITH(io::load_checkpoint(path, other, smaller),
                      Contains("is not an index of the 3 sequences"));
    CHECK(same_bits(snapshot(other), before));
    CHECK(smaller.position() == 0);
    io::save_checkpoint(path, first);
    CHECK_THROWS_WITH(io::load_checkpoint(path, other, resumed_order),
                      Contains("has no 'sampler.position' (it was saved without a sampler)"));
    CHECK(same_bits(snapshot(other), before));
    std::filesystem::remove(path);
}

TEST_CASE("a checkpoint load refused for memory at any request changes nothing",
          "[nn][rollback][io]") {
    const nn::ModelConfig config = model_config(nn::Head::ce_last_step);
    nn::SequenceModel<float> saved(config, "basic", Device::cpu, 3);
    for (int b = 0; b < 2; ++b) step(saved, make_batch(nn::Head::ce_last_step, b));
    const std::string path = temp_path("load");
    io::save_checkpoint(path, saved);
    nn::SequenceModel<float> model(config, "basic", Device::cpu, 9);
    step(model, make_batch(nn::Head::ce_last_step, 7));
    int64_t refused = 0;
    for (int64_t k = 0;; ++k) {
        const Snapshot before = snapshot(model);
        const test::MemoryFailureDisarm disarm;
        testing::fail_memory_request_after(k);
        try {
            io::load_checkpoint(path, model);
        } catch (const OutOfMemory&) {
            CHECK(same_bits(snapshot(model), before));
            ++refused;
            REQUIRE(k < 100);
            continue;
        }
        break;
    }
    INFO(refused << " requests refused");
    CHECK(refused >= 1);
    // Loaded: the saved model's state (its gradients aside, which a checkpoint does not hold).
    const Snapshot got = snapshot(model), want = snapshot(saved);
    CHECK(got.counts == want.counts);
    std::filesystem::remove(path);
}
