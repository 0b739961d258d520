// Batch building and predictions (lstm/nn/batch.hpp, lstm/nn/predict.hpp): the padded layout of
// torch.nn.utils.rnn.pad_sequence, the concatenated CTC targets, bucketing, argmax and accuracy,
// and a model's logits() against its own loss.

#include "lstm/nn/batch.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "lstm/nn/model.hpp"
#include "lstm/nn/predict.hpp"
#include "test_util.hpp"

using namespace lstm;
using Catch::Contains;

TEST_CASE("pad_sequences lays sequences out as pad_sequence does, time-major", "[nn]") {
    // Three sequences of 2 features: lengths 2, 3, 1 (values name their sequence and step).
    const std::vector<std::vector<float>> seqs = {
        {10, 11, 12, 13}, {20, 21, 22, 23, 24, 25}, {30, 31}};
    const nn::PaddedBatch<float> b = nn::pad_sequences(seqs, 2);
    CHECK(b.seq_len == 3);
    CHECK(b.batch == 3);
    CHECK(b.lengths == std::vector<int64_t>{2, 3, 1});
    // torch.nn.utils.rnn.pad_sequence([a, b, c]) of those, flattened (T, N, 2):
    const std::vector<float> want = {10, 11, 20, 21, 30, 31,  // t = 0
                                     12, 13, 22, 23, 0,  0,   // t = 1
                                     0,  0,  24, 25, 0,  0};  // t = 2
    CHECK(b.x == want);
    CHECK(b.view().shape_string() == "(3, 3, 2)");
    // A chosen subset in a chosen order.
    const nn::PaddedBatch<float> sub = nn::pad_sequences(seqs, 2, {2, 0});
    CHECK(sub.x == std::vector<float>{30, 31, 10, 11, 0, 0, 12, 13});
    CHECK_THROWS_WITH(
        nn::pad_sequences(seqs, 4),
        Contains("sequence 1 has 6 values, expected a positive multiple of features = 4"));
    CHECK_THROWS_WITH(nn::pad_sequences(seqs, 2, {0, 5}),
                      Contains("indices[1] = 5 is not a sequence (there are 3)"));
}

TEST_CASE("concat_targets and bucket_by_length", "[nn]") {
    const nn::CtcTargets t = nn::concat_targets({{1, 2}, {3}, {4, 4, 5}}, {2, 1});
    CHECK(t.labels == std::vector<int64_t>{4, 4, 5, 3});
    CHECK(t.lengths == std::vector<int64_t>{3, 1});

    const std::vector<int64_t> lengths = {7, 3, 9, 3, 5, 8, 1};
    const auto batches = nn::bucket_by_length(lengths, 3, 42);
    REQUIRE(batches.size() == 3);
    // Sorted by length (ties by index): 6, 1, 3 | 4, 0, 5 | 2; then the batches shuffled.
    std::vector<std::vector<int64_t>> sorted = batches;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<std::vector<int64_t>>{{2}, {4, 0, 5}, {6, 1, 3}});
    CHECK(nn::bucket_by_length(lengths, 3, 42) == batches);  // the seed fixes the order
    CHECK_THROWS_WITH(nn::bucket_by_length(lengths, 0, 1), Contains("batch_size must be >= 1"));
}

TEST_CASE("argmax_classes and accuracy", "[nn]") {
    // Rows: a clear winner, a tie (the lowest index wins, as torch.argmax), a negative row.
    const std::vector<float> scores = {0.1f, 2.0f, -1.0f, 3.0f, 3.0f, 0.0f, -5.0f, -4.0f, -6.0f};
    const auto classes = nn::argmax_classes(TensorView<const float>(scores.data(), {3, 3}));
    CHECK(classes == std::vector<int64_t>{1, 0, 1});
    const std::vector<int64_t> targets = {1, 2, 1};
    CHECK(nn::accuracy(classes, targets) == Approx(2.0 / 3.0));
    const std::vector<int64_t> one = {1};
    CHECK_THROWS_WITH(nn::accuracy(classes, one), Contains("3 predictions but 1 targets"));
    // torch.argmax takes NaN as the largest value, the first NaN of a row winning.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> with_nan = {1.0f, nan, 0.0f, nan, 5.0f, nan, 2.0f, 3.0f, nan};
    CHECK(nn::argmax_classes(TensorView<const float>(with_nan.data(), {3, 3})) ==
          std::vector<int64_t>{1, 0, 2});
    CHECK_THROWS_WITH(nn::argmax_classes(TensorView<const float>(nullptr, {2, 3})),
                      Contains("scores has no data"));
}

TEST_CASE("frame_accuracy scores each sequence's valid frames only, targets of -100 not at all",
          "[nn]") {
    // T 3, N 2, lengths {3, 1}: sequence 0 has frames 0, 2, 4 (time-major), sequence 1 frame 1;
    // frames 3 and 5 are padding, wrong on purpose. Valid: 0 right, 2 wrong, 4 right, 1 right.
    const std::vector<int64_t> predicted = {1, 2, 0, 7, 3, 7};
    const std::vector<int64_t> targets = {1, 2, 1, 0, 3, 0};
    const std::vector<int64_t> lengths = {3, 1};
    CHECK(nn::frame_accuracy(predicted, targets, lengths) == 0.75);
    CHECK(nn::accuracy(predicted, targets) == Approx(0.5));  // the padding counted too
    const std::vector<int64_t> four = {1, 1, 1, 1}, over = {4, 1}, none = {0, 0};
    CHECK_THROWS_WITH(nn::frame_accuracy(predicted, targets, four),
                      "frame_accuracy: 6 predictions are not T frames of each of the 4 sequences "
                      "lengths describes");
    CHECK_THROWS_WITH(nn::frame_accuracy(predicted, targets, over),
                      "frame_accuracy: lengths[0] = 4 is outside 0..T = 3");
    CHECK_THROWS_WITH(
        nn::frame_accuracy(predicted, targets, none),
        "frame_accuracy: lengths and targets leave no frame to score (valid, target not -100)");
    // Frames whose target is -100 (ignore_index) count for nothing, as in the per-frame loss:
    // frame 2 (wrong) left out gives 3 of 3.
    std::vector<int64_t> ignored = targets;
    ignored[2] = -100;
    CHECK(nn::frame_accuracy(predicted, ignored, lengths) == 1.0);
    ignored = {-100, -100, -100, 0, -100, 0};
    CHECK_THROWS_WITH(
        nn::frame_accuracy(predicted, ignored, lengths),
        "frame_accuracy: lengths and targets leave no frame to score (valid, target not -100)");
}

TEST_CASE("a model's logits() are what its loss was computed from", "[nn]") {
    nn::ModelConfig mc;
    mc.lstm = Config{3, 5, 1, true};
    mc.classes = 4;
    const int64_t steps = 4, batch = 3;
    const auto x = test::random_vector<float>(steps * batch * 3, 8, -1.0, 1.0);
    const std::vector<int64_t> lengths = {4, 2, 3}, targets = {3, 0, 2};
    for (nn::Head head : {nn::Head::ce_last_step, nn::Head::ce_every_frame}) {
        mc.head = head;
        nn::SequenceModel<float> model(mc, "basic", Device::cpu, 2);
        std::vector<int64_t> frame_targets(steps * batch, 1);
        const Span<const int64_t> t = head == nn::Head::ce_last_step
                                          ? Span<const int64_t>(targets)
                                          : Span<const int64_t>(frame_targets);
        const float loss =
            model.evaluate(TensorView<const float>(x.data(), {steps, batch, 3}), lengths, t);
        const TensorView<const float> logits = model.logits();
        INFO("head " << static_cast<int>(head));
        if (head != nn::Head::ce_last_step) {
            CHECK(logits.shape_string() == "(4, 3, 4)");
            continue;
        }
        REQUIRE(logits.shape_string() == "(3, 4)");
        // The batch-mean cross-entropy recomputed in double from the reported logits.
        double sum = 0;
        for (int64_t n = 0; n < batch; ++n) {
            const float* row = logits.data() + n * 4;
            double m = row[0], z = 0;
            for (int c = 1; c < 4; ++c) m = std::max(m, double(row[c]));
            for (int c = 0; c < 4; ++c) z += std::exp(row[c] - m);
            sum += m + std::log(z) - row[targets[n]];
        }
        CHECK(loss == Approx(sum / batch).epsilon(1e-6));
    }
}

TEST_CASE("the final-state head reads cat(hn[-2], hn[-1]) and its gradients are exact", "[nn]") {
    nn::ModelConfig mc;
    mc.lstm = Config{3, 4, 2, true};
    mc.classes = 3;
    mc.dense_bias = true;
    mc.head = nn::Head::ce_final_state;
    const int64_t steps = 5, batch = 3;
    const auto x = test::random_vector<double>(steps * batch * 3, 9, -1.0, 1.0);
    const TensorView<const double> xv(x.data(), {steps, batch, 3});
    const std::vector<int64_t> lengths = {5, 2, 4}, targets = {2, 0, 1};
    for (const char* variant : {"basic", "fused"}) {
        INFO("variant " << variant);
        nn::SequenceModel<double> model(mc, variant, Device::cpu, 6);
        const double loss = model.compute_gradients(xv, lengths, targets);
        // Forward: the logits are the dense layer of the top layer's two final states.
        const TensorView<const double> hn = model.lstm().hn(), logits = model.logits();
        const nn::Dense<double>& dense = std::as_const(model).dense();
        for (int64_t n = 0; n < batch; ++n)
            for (int64_t c = 0; c < 3; ++c) {
                double z = dense.bias().data()[c];
                for (int64_t d = 0; d < 2; ++d)
                    for (int64_t u = 0; u < 4; ++u)
                        z += dense.weight().data()[c * 8 + d * 4 + u] *
                             hn.data()[((2 + d) * batch + n) * 4 + u];
                CHECK(logits.data()[n * 3 + c] == Approx(z).epsilon(1e-12));
            }
        // Backward: central differences of the loss (step 1e-6) for a spread of LSTM parameters
        // of both layers and directions, and of the dense weights.
        const std::vector<double> grads(model.lstm().gradients().begin(),
                                        model.lstm().gradients().end());
        const int64_t count = static_cast<int64_t>(grads.size());
        for (int64_t k = 0; k < count; k += 37) {
            double& p = model.lstm().parameters()[k];
            const double saved = p;
            p = saved + 1e-6;
            const double up = model.evaluate(xv, lengths, targets);
            p = saved - 1e-6;
            const double down = model.evaluate(xv, lengths, targets);
            p = saved;
            INFO("parameter " << k << " of " << count);
            CHECK(grads[k] == Approx((up - down) / 2e-6).margin(1e-7).epsilon(1e-5));
        }
        CHECK(std::isfinite(loss));
    }
}

TEST_CASE("the last-step head's gradients do not depend on the batches before", "[nn]") {
    // The model clears only the dy rows its previous step scattered into (rescatter_last_step).
    // A step right after one of the same shape but other lengths (and, before that, another T)
    // must give the bits of the same step on a fresh model.
    nn::ModelConfig mc;
    mc.lstm = Config{3, 5, 1, false};
    mc.classes = 4;
    mc.head = nn::Head::ce_last_step;
    const int64_t batch = 4;
    const auto x = test::random_vector<float>(7 * batch * 3, 21, -1.0f, 1.0f);
    const std::vector<int64_t> targets = {3, 0, 2, 1};
    auto step = [&](nn::SequenceModel<float>& model, int64_t steps, std::vector<int64_t> lengths) {
        const TensorView<const float> xv(x.data(), {steps, batch, 3});
        model.compute_gradients(xv, lengths, targets);
        std::vector<float> g(model.lstm().gradients().begin(), model.lstm().gradients().end());
        const auto& dense = std::as_const(model).dense().gradients();
        g.insert(g.end(), dense.begin(), dense.end());
        return g;
    };
    const std::vector<int64_t> last = {2, 7, 5, 7};
    for (const char* variant : {"basic", "fused"}) {
        INFO("variant " << variant);
        nn::SequenceModel<float> fresh(mc, variant, Device::cpu, 8);
        const std::vector<float> want = step(fresh, 7, last);
        nn::SequenceModel<float> used(mc, variant, Device::cpu, 8);
        step(used, 7, {7, 1, 3, 6});
        step(used, 6, {6, 5, 1, 3});
        step(used, 7, {4, 4, 7, 2});
        const std::vector<float> got = step(used, 7, last);
        REQUIRE(got.size() == want.size());
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (got[i] != want[i] && differ++ < 5)
                UNSCOPED_INFO("gradient " << i << ": " << got[i] << " after other steps, "
                                          << want[i] << " on a fresh model");
        CHECK(differ == 0);
    }
}
