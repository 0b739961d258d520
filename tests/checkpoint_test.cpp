// Exact checkpoints (lstm/io/checkpoint.hpp): training resumed from a checkpoint follows the
// uninterrupted run bit for bit, the file holds PyTorch's names, and bad checkpoints are refused
// without touching the model.

#include "lstm/io/checkpoint.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "lstm/nn/model.hpp"
#include "test_util.hpp"

using namespace lstm;
using Catch::Contains;

namespace {

constexpr int64_t kSteps = 6, kBatch = 4, kInput = 5;

nn::ModelConfig model_config(double dropout = 0.0, int64_t proj_size = 0) {
    nn::ModelConfig c;
    c.lstm = Config{kInput, 7, 2, true};
    c.lstm.dropout = dropout;
    c.lstm.proj_size = proj_size;
    c.classes = 3;
    c.dense_bias = true;
    c.head = nn::Head::ce_last_step;
    c.adam = nn::adamw_options(0.01, 0.05);
    return c;
}

// Training batch b (a different one per step) and its targets.
struct Batch {
    std::vector<float> x;
    std::vector<int64_t> lengths, targets;
};

Batch batch(int b) {
    Batch out;
    out.x = test::random_vector<float>(kSteps * kBatch * kInput, 500 + b, -1.0, 1.0);
    out.lengths = {6, 3, 5, 6};
    for (int64_t n = 0; n < kBatch; ++n) out.targets.push_back((n + b) % 3);
    return out;
}

void train(nn::SequenceModel<float>& model, int from, int to) {
    for (int b = from; b < to; ++b) {
        const Batch d = batch(b);
        model.train_step(TensorView<const float>(d.x.data(), {kSteps, kBatch, kInput}),
                         Span<const int64_t>(d.lengths), Span<const int64_t>(d.targets));
    }
}

template <typename T>
std::vector<T> all_params(nn::SequenceModel<T>& model) {
    std::vector<T> out(model.lstm().parameters().begin(), model.lstm().parameters().end());
    const Span<const T> dense = std::as_const(model.dense()).parameters();
    out.insert(out.end(), dense.data, dense.data + dense.size);
    return out;
}

}  // namespace

TEST_CASE("training resumed from a checkpoint is bit-identical to never stopping", "[io][nn]") {
    // Dropout draws new masks every step, so its random state must come back too; projections
    // run on basic only.
    struct Run {
        const char* variant;
        double dropout;
        int64_t proj_size;
    };
    for (const Run& r : {Run{"basic", 0.0, 0}, Run{"fused", 0.0, 0}, Run{"basic", 0.3, 0},
                         Run{"fused", 0.3, 0}, Run{"basic", 0.3, 4}}) {
        INFO("variant " << r.variant << ", dropout " << r.dropout << ", proj " << r.proj_size);
        const char* variant = r.variant;
        const nn::ModelConfig config = model_config(r.dropout, r.proj_size);
        nn::SequenceModel<float> straight(config, variant, Device::cpu, 11);
        train(straight, 0, 8);

        nn::SequenceModel<float> first(config, variant, Device::cpu, 11);
        train(first, 0, 3);
        io::TensorFile file;
        io::add_checkpoint(file, first);
        const io::TensorFile read = io::parse_safetensors(io::serialize_safetensors(file));
        // Another seed: everything the run depends on must come from the checkpoint.
        nn::SequenceModel<float> resumed(config, variant, Device::cpu, 99);
        resumed.lstm().set_dropout_state(12345, 0);  // a different state, overwritten by the file
        io::load_checkpoint(read, resumed);
        CHECK(resumed.optimizer().steps(0) == 3);
        CHECK(resumed.lstm().dropout_count() == (r.dropout > 0 ? 3u : 0u));
        train(resumed, 3, 8);

        const std::vector<float> want = all_params(straight), got = all_params(resumed);
        REQUIRE(got.size() == want.size());
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
        INFO(differ << " of " << got.size() << " parameters differ");
        CHECK(differ == 0);
        // And the moments: one more step from each gives the same parameters again.
        train(straight, 8, 9);
        train(resumed, 8, 9);
        CHECK(all_params(resumed) == all_params(straight));
    }
}

TEST_CASE("a checkpoint holds PyTorch's names and refuses another model", "[io][nn]") {
    nn::SequenceModel<float> model(model_config(), "basic", Device::cpu, 3);
    train(model, 0, 2);
    io::TensorFile file;
    io::add_checkpoint(file, model);
    for (const char* name : {"lstm.weight_ih_l0", "lstm.bias_hh_l1_reverse", "fc.weight", "fc.bias",
                             "optimizer.0.exp_avg", "optimizer.1.exp_avg_sq", "optimizer.1.step"})
        CHECK(file.contains(name));
    CHECK(file.at("fc.weight").shape == std::vector<int64_t>{3, 14});
    CHECK(file.at("optimizer.0.step").integers() == std::vector<int64_t>{2});

    const std::vector<float> before = all_params(model);
    nn::ModelConfig wider = model_config();
    wider.lstm.hidden_size = 8;
    nn::SequenceModel<float> other(wider, "basic", Device::cpu, 3);
    CHECK_THROWS_WITH(io::load_checkpoint(file, other),
                      Contains("the file's LSTM is input 5, hidden 7, 2 layer(s), "
                               "bidirectional, the model's input 5, hidden 8"));
    io::TensorFile no_format = file;
    no_format.metadata.clear();
    CHECK_THROWS_WITH(io::load_checkpoint(no_format, model),
                      Contains("not a checkpoint of this library"));
    // A truncated optimizer tensor is refused before anything is copied.
    io::TensorFile broken;
    broken.metadata = file.metadata;
    for (const io::Tensor& t : file.tensors()) {
        if (t.name == "optimizer.1.exp_avg")
            broken.add(io::Tensor::from(t.name, {2}, std::vector<float>{1.0f, 2.0f}));
        else
            broken.add(t);
    }
    nn::SequenceModel<float> target(model_config(), "basic", Device::cpu, 5);
    const std::vector<float> target_before = all_params(target);
    CHECK_THROWS_WITH(io::load_checkpoint(broken, target),
                      Contains("tensor 'optimizer.1.exp_avg' has shape (2)"));
    CHECK(all_params(target) == target_before);
    // A negative second moment (NaN in every parameter after the next step) likewise.
    io::TensorFile negative;
    negative.metadata = file.metadata;
    for (const io::Tensor& t : file.tensors()) {
        if (t.name != "optimizer.0.exp_avg_sq") {
            negative.add(t);
            continue;
        }
        std::vector<float> v = t.values<float>();
        v[3] = -0.5f;
        negative.add(io::Tensor::from(t.name, t.shape, v));
    }
    CHECK_THROWS_WITH(io::load_checkpoint(negative, target),
                      Contains("optimizer.0.exp_avg_sq[3] = -0.5 is negative"));
    CHECK(all_params(target) == target_before);
    CHECK(all_params(model) == before);
}

TEST_CASE("a state dict of only lstm.* and fc.* loads the parameters and nothing else",
          "[io][nn]") {
    nn::SequenceModel<float> trained(model_config(), "basic", Device::cpu, 3);
    train(trained, 0, 2);
    io::TensorFile checkpoint;
    io::add_checkpoint(checkpoint, trained);
    // What torch.save(module.state_dict()) holds for a module with members lstm and fc.
    io::TensorFile state_dict;
    for (const io::Tensor& t : checkpoint.tensors())
        if (t.name.rfind("lstm.", 0) == 0 || t.name.rfind("fc.", 0) == 0) state_dict.add(t);

    nn::SequenceModel<float> fresh(model_config(), "basic", Device::cpu, 5);
    io::load_model_parameters(state_dict, fresh);
    CHECK(all_params(fresh) == all_params(trained));
    CHECK(fresh.optimizer().steps(0) == 0);
    CHECK(fresh.optimizer().steps(1) == 0);
    // F32 tensors fill a double model exactly, the head as the LSTM (as PyTorch's
    // load_state_dict copies into a double module).
    nn::SequenceModel<double> wide(model_config(), "basic", Device::cpu, 5);
    io::load_model_parameters(state_dict, wide);
    const std::vector<float> narrow = all_params(trained);
    CHECK(all_params(wide) == std::vector<double>(narrow.begin(), narrow.end()));
    // The whole checkpoint is refused there (its moments stay F32), and the message says what does
    // load it (it once named only the tensor and the dtypes), changing nothing.
    const std::vector<double> wide_before = all_params(wide);
    CHECK_THROWS_WITH(io::load_checkpoint(checkpoint, wide),
                      Contains("tensor 'optimizer.0.exp_avg' has dtype F32, the model needs F64; "
                               "load_checkpoint restores a checkpoint in its own dtype only, while "
                               "io::load_model_parameters widens its F32 parameters (lstm.*, fc.*) "
                               "into a double model exactly"));
    CHECK(all_params(wide) == wide_before);
    // A checkpoint is not a state dict of this kind: load_checkpoint needs the optimizer too.
    CHECK_THROWS_WITH(io::load_checkpoint(state_dict, fresh),
                      Contains("not a checkpoint of this library"));

    // Without fc.bias for a dense layer that has one: refused, nothing changed.
    io::TensorFile no_bias;
    for (const io::Tensor& t : state_dict.tensors())
        if (t.name != "fc.bias") no_bias.add(t);
    nn::SequenceModel<float> other(model_config(), "basic", Device::cpu, 7);
    const std::vector<float> before = all_params(other);
    CHECK_THROWS_WITH(io::load_model_parameters(no_bias, other),
                      Contains("the file lacks fc.bias, the model's dense layer has a bias"));
    CHECK(all_params(other) == before);
}

TEST_CASE("a checkpoint of a bf16-trained model holds its fp32 masters and says bf16", "[io][nn]") {
    nn::SequenceModel<float> full(model_config(), "basic", Device::cpu, 3);
    nn::SequenceModel<float> bf16(model_config(), "basic", Device::cpu, 3);
    bf16.lstm().set_precision(Precision::bf16);
    train(full, 0, 2);
    train(bf16, 0, 2);
    io::TensorFile a, b;
    io::add_checkpoint(a, full);
    io::add_checkpoint(b, bf16);
    CHECK(a.metadata.at("precision") == "full");
    CHECK(b.metadata.at("precision") == "bf16");
    // The masters are fp32 and not rounded: some weight is no bf16 value after two Adam steps,
    // and the two runs differ (their products rounded differently).
    const std::vector<float> w = b.at("lstm.weight_hh_l0").values<float>();
    size_t off_grid = 0;
    for (float v : w) off_grid += kernels::round_to_bf16(v) != v;
    CHECK(off_grid > 0);
    CHECK(a.at("lstm.weight_hh_l0").values<float>() != w);
    // Loading leaves the model's own precision.
    nn::SequenceModel<float> loaded(model_config(), "basic", Device::cpu, 5);
    io::load_checkpoint(b, loaded);
    CHECK(loaded.lstm().precision() == Precision::full);
    CHECK(all_params(loaded) == all_params(bf16));
}
