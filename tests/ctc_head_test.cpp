// The ctc head of SequenceModel and its options (ModelConfig::ctc): another blank, zero_infinity
// and infeasible_is_error, checked against loss::ctc_loss on the model's own logits.

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "lstm/loss/ctc.hpp"
#include "lstm/nn/model.hpp"
#include "test_util.hpp"

using namespace lstm;
using Catch::Contains;

namespace {

constexpr int64_t kSteps = 5, kBatch = 3, kInput = 2, kClasses = 4;

nn::ModelConfig ctc_config(int64_t blank) {
    nn::ModelConfig mc;
    mc.lstm = Config{kInput, 6, 1, true};
    mc.classes = kClasses;
    mc.head = nn::Head::ctc;
    mc.ctc.blank = blank;
    return mc;
}

// loss::ctc_loss (PyTorch's mean) of logits (T, N, C) with `blank`: the oracle of the head.
double direct_ctc(TensorView<const float> logits, const std::vector<int64_t>& lengths,
                  const std::vector<int64_t>& labels, const std::vector<int64_t>& label_lengths,
                  int64_t blank) {
    loss::CtcArgs<float> args;
    args.logits = logits;
    args.targets = TensorView<const int64_t>(labels.data(), {int64_t(labels.size())});
    args.input_lengths = lengths;
    args.target_lengths = label_lengths;
    args.blank = blank;
    args.reduction = loss::Reduction::mean;
    loss::CtcOutputs<float> out;
    return loss::ctc_loss(args, out);
}

}  // namespace

TEST_CASE("target_lengths is refused for a head other than ctc", "[nn][ctc]") {
    // It was dropped without a word, so a pipeline wired for the wrong head trained on.
    const auto x = test::random_vector<float>(kSteps * kBatch * kInput, 31, -1.0, 1.0);
    const TensorView<const float> xv(x.data(), {kSteps, kBatch, kInput});
    nn::ModelConfig config = ctc_config(0);
    config.head = nn::Head::ce_last_step;
    nn::SequenceModel<float> model(config, "basic", Device::cpu, 4);
    const std::vector<int64_t> classes = {0, 1, 2}, label_lengths = {1, 1, 1};
    CHECK_THROWS_WITH(model.evaluate(xv, {}, classes, label_lengths),
                      Contains("target_lengths is for the ctc head only; this model's head, "
                               "ce_last_step, takes none, got 3 entries"));
    CHECK(std::isfinite(model.evaluate(xv, {}, classes)));
}

TEST_CASE("the ctc head uses its configured blank", "[nn][ctc]") {
    const auto x = test::random_vector<float>(kSteps * kBatch * kInput, 31, -1.0, 1.0);
    const TensorView<const float> xv(x.data(), {kSteps, kBatch, kInput});
    const std::vector<int64_t> lengths = {5, 4, 5};
    const std::vector<int64_t> labels = {0, 1, 2, 2, 1, 0}, label_lengths = {2, 2, 2};
    nn::SequenceModel<float> model(ctc_config(3), "basic", Device::cpu, 4);
    const float loss = model.evaluate(xv, lengths, labels, label_lengths);
    CHECK(std::isfinite(loss));
    CHECK(loss ==
          Approx(direct_ctc(model.logits(), lengths, labels, label_lengths, 3)).epsilon(1e-6));
    // Blank 3 and blank 0 read different classes: the losses differ.
    CHECK(std::abs(loss - direct_ctc(model.logits(), lengths, {1, 2, 2, 1, 3, 3}, label_lengths,
                                     0)) > 1e-3);
    CHECK_THROWS_WITH(nn::SequenceModel<float>(ctc_config(4), "basic"),
                      Contains("ctc.blank must be in [0, classes = 4), got 4"));
}

TEST_CASE("the ctc head's infeasible samples: +inf, zero_infinity, or an error", "[nn][ctc]") {
    const auto x = test::random_vector<float>(kSteps * kBatch * kInput, 32, -1.0, 1.0);
    const TensorView<const float> xv(x.data(), {kSteps, kBatch, kInput});
    // Sample 1 has 2 frames for 3 labels: no alignment exists.
    const std::vector<int64_t> lengths = {5, 2, 5};
    const std::vector<int64_t> labels = {1, 2, 1, 2, 3, 3}, label_lengths = {1, 3, 2};
    nn::ModelConfig mc = ctc_config(0);
    {
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 4);
        CHECK(std::isinf(model.evaluate(xv, lengths, labels, label_lengths)));
    }
    {
        mc.ctc.zero_infinity = true;
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 4);
        const float loss = model.evaluate(xv, lengths, labels, label_lengths);
        CHECK(std::isfinite(loss));
        // PyTorch's mean divides each loss by its target length, then averages over all N.
        loss::CtcArgs<float> args;
        args.logits = model.logits();
        args.targets = TensorView<const int64_t>(labels.data(), {6});
        args.input_lengths = lengths;
        args.target_lengths = label_lengths;
        args.zero_infinity = true;
        loss::CtcOutputs<float> out;
        CHECK(loss == Approx(loss::ctc_loss(args, out)).epsilon(1e-6));
    }
    {
        mc.ctc.infeasible_is_error = true;  // wins over zero_infinity
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 4);
        CHECK_THROWS_WITH(model.evaluate(xv, lengths, labels, label_lengths),
                          Contains("ctc head: sample(s) 1 cannot be aligned"));
    }
}
