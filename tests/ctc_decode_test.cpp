// Greedy CTC decoding against hand-worked frames and against an enumeration of every path, and
// the edit distance / label error rate against published examples and a naive recursion.

#include "lstm/loss/ctc_decode.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lstm/nn/predict.hpp"
#include "test_util.hpp"

namespace {

using lstm::Span;
using lstm::TensorView;
using lstm::loss::ctc_greedy_decode;
using lstm::loss::edit_distance;
using Labels = std::vector<int64_t>;

// Scores (T, 1, C) whose argmax at frame t is path[t]: 1 there, 0 elsewhere.
std::vector<float> one_hot_frames(const Labels& path, int64_t classes) {
    std::vector<float> out(path.size() * classes, 0.0f);
    for (size_t t = 0; t < path.size(); ++t) out[t * classes + path[t]] = 1.0f;
    return out;
}

// Collapse of a path: repeats merged, blanks dropped (the CTC many-to-one map).
Labels collapse(const Labels& path, int64_t blank) {
    Labels out;
    for (size_t t = 0; t < path.size(); ++t)
        if (path[t] != blank && (t == 0 || path[t] != path[t - 1])) out.push_back(path[t]);
    return out;
}

// The single most probable path by enumerating all C^T paths (ties: the lexicographically first,
// which is what a per-frame "first maximum" gives), then collapsed.
Labels best_path_by_enumeration(const std::vector<double>& scores, int64_t frames, int64_t classes,
                                int64_t blank) {
    Labels path(frames, 0), best;
    double best_score = -INFINITY;
    while (true) {
        double score = 0;
        for (int64_t t = 0; t < frames; ++t) score += scores[t * classes + path[t]];
        if (score > best_score) best_score = score, best = path;
        int64_t t = frames - 1;  // odometer, last frame fastest: lexicographic order
        while (t >= 0 && ++path[t] == classes) path[t--] = 0;
        if (t < 0) break;
    }
    return collapse(best, blank);
}

// Levenshtein distance by its defining recursion, exponential but obviously right.
int64_t naive_edit_distance(const Labels& a, const Labels& b, size_t i = 0, size_t j = 0) {
    if (i == a.size()) return static_cast<int64_t>(b.size() - j);
    if (j == b.size()) return static_cast<int64_t>(a.size() - i);
    const int64_t substitute = naive_edit_distance(a, b, i + 1, j + 1) + (a[i] != b[j]);
    const int64_t remove = naive_edit_distance(a, b, i + 1, j) + 1;
    const int64_t insert = naive_edit_distance(a, b, i, j + 1) + 1;
    return std::min({substitute, remove, insert});
}

Labels letters(const std::string& s) { return Labels(s.begin(), s.end()); }

}  // namespace

TEST_CASE("ctc_greedy_decode collapses repeats and drops blanks", "[ctc]") {
    const int64_t classes = 4;
    struct Case {
        Labels path, want;
    };
    const std::vector<Case> cases = {
        {{0, 1, 1, 0, 1, 2, 2, 0}, {1, 1, 2}},  // a blank separates the repeated 1s
        {{1, 1, 1, 1}, {1}},
        {{0, 0, 0}, {}},
        {{3, 0, 3, 3, 2, 0, 0, 2}, {3, 3, 2, 2}},
        {{2, 1, 2, 1}, {2, 1, 2, 1}},
    };
    for (const auto& c : cases) {
        const auto scores = one_hot_frames(c.path, classes);
        const auto got = ctc_greedy_decode(
            TensorView<const float>(scores.data(), {int64_t(c.path.size()), 1, classes}));
        REQUIRE(got.size() == 1);
        CHECK(got[0] == c.want);
    }
    // Another blank index: 3 is blank, 0 is a label.
    const auto scores = one_hot_frames({0, 3, 0, 0, 3, 1}, classes);
    const std::vector<int64_t> lengths = {6};
    CHECK(ctc_greedy_decode(TensorView<const float>(scores.data(), {6, 1, classes}), lengths,
                            3)[0] == Labels{0, 0, 1});
    // Ties go to the lowest class index: [0.5, 0.5, 0] decodes as blank 0, then 1 wins.
    const std::vector<double> tie = {0.5, 0.5, 0.0, 0.2, 0.7, 0.7};
    CHECK(ctc_greedy_decode(TensorView<const double>(tie.data(), {2, 1, 3}))[0] == Labels{1});
    // NaN is the largest score, as torch.argmax has it (and argmax_classes): frames pick 1, 0
    // and 0, which decode as [1]; a decoder that skipped NaN once returned [2] from these.
    const float nan = std::nanf("");
    const std::vector<float> poisoned = {0, nan, 5, nan, 1, 2, nan, nan, nan};
    const TensorView<const float> poisoned_view(poisoned.data(), {3, 1, 3});
    CHECK(lstm::nn::argmax_classes(poisoned_view) == std::vector<int64_t>{1, 0, 0});
    CHECK(ctc_greedy_decode(poisoned_view)[0] == Labels{1});
}

TEMPLATE_TEST_CASE("ctc_greedy_decode equals the collapse of the most probable path", "[ctc]",
                   float, double) {
    using T = TestType;
    // Time-major batch with variable lengths: padded frames hold huge scores that must be
    // ignored. The oracle enumerates every path of each sample's own length.
    const int64_t steps = 6, batch = 4, classes = 3;
    const std::vector<int64_t> lengths = {6, 4, 1, 5};
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        auto scores = lstm::test::random_vector<T>(steps * batch * classes, seed, -3.0, 3.0);
        for (int64_t t = 0; t < steps; ++t)
            for (int64_t n = 0; n < batch; ++n)
                if (t >= lengths[n]) scores[(t * batch + n) * classes + 1] = T(1e6);
        const int64_t blank = static_cast<int64_t>(seed % classes);
        const auto got = ctc_greedy_decode(TensorView<T>(scores.data(), {steps, batch, classes}),
                                           lengths, blank);
        REQUIRE(static_cast<int64_t>(got.size()) == batch);
        for (int64_t n = 0; n < batch; ++n) {
            INFO("seed " << seed << " sample " << n);
            std::vector<double> rows;
            for (int64_t t = 0; t < lengths[n]; ++t)
                for (int64_t k = 0; k < classes; ++k)
                    rows.push_back(static_cast<double>(scores[(t * batch + n) * classes + k]));
            CHECK(got[n] == best_path_by_enumeration(rows, lengths[n], classes, blank));
        }
    }
}

TEST_CASE("edit_distance reproduces the textbook examples and the naive recursion", "[ctc]") {
    // Published examples (Levenshtein / Jurafsky & Martin with unit substitution cost).
    CHECK(edit_distance(letters("kitten"), letters("sitting")) == 3);
    CHECK(edit_distance(letters("flaw"), letters("lawn")) == 2);
    CHECK(edit_distance(letters("intention"), letters("execution")) == 5);
    CHECK(edit_distance(letters("saturday"), letters("sunday")) == 3);
    CHECK(edit_distance(letters(""), letters("abc")) == 3);
    CHECK(edit_distance(letters("abc"), letters("")) == 3);
    CHECK(edit_distance(letters(""), letters("")) == 0);
    CHECK(edit_distance(letters("same"), letters("same")) == 0);

    std::mt19937_64 rng(17);
    for (int i = 0; i < 300; ++i) {
        Labels a(rng() % 8), b(rng() % 8);
        for (auto& v : a) v = static_cast<int64_t>(rng() % 3);
        for (auto& v : b) v = static_cast<int64_t>(rng() % 3);
        INFO("case " << i);
        CHECK(edit_distance(a, b) == naive_edit_distance(a, b));
        CHECK(edit_distance(a, b) == edit_distance(b, a));
    }
}

TEST_CASE("label error rate is total edits over total reference labels", "[ctc]") {
    const std::vector<Labels> hyps = {letters("kitten"), letters("abc"), {}, {1, 2}};
    const std::vector<Labels> refs = {letters("sitting"), letters("abd"), {5, 6}, {1, 2}};
    // 3 + 1 + 2 + 0 edits over 7 + 3 + 2 + 2 labels.
    const auto errors = lstm::loss::label_errors(hyps, refs);
    CHECK(errors.edits == 6);
    CHECK(errors.reference_labels == 14);
    CHECK(lstm::loss::label_error_rate(hyps, refs) == Approx(6.0 / 14.0).epsilon(1e-15));
    // Accumulating over batches gives the same rate as one big batch.
    lstm::loss::LabelErrors total;
    total += lstm::loss::label_errors({hyps[0], hyps[1]}, {refs[0], refs[1]});
    total += lstm::loss::label_errors({hyps[2], hyps[3]}, {refs[2], refs[3]});
    CHECK(total.rate() == lstm::loss::label_error_rate(hyps, refs));
    // Decoding then scoring: a perfect model has rate 0.
    const auto scores = one_hot_frames({0, 1, 1, 0, 2, 0, 2}, 3);
    const auto decoded = ctc_greedy_decode(TensorView<const float>(scores.data(), {7, 1, 3}));
    CHECK(lstm::loss::label_error_rate(decoded, {{1, 2, 2}}) == 0.0);
}

TEST_CASE("ctc decoding and error rates reject bad arguments", "[ctc]") {
    using Catch::Contains;
    std::vector<float> scores(4 * 2 * 3, 0.0f);
    const TensorView<const float> view(scores.data(), {4, 2, 3});
    std::vector<int64_t> lengths = {4, 5};
    CHECK_THROWS_WITH(ctc_greedy_decode(view, lengths),
                      Contains("input_lengths[1] = 5 exceeds T = 4"));
    lengths = {0, 4};
    CHECK_THROWS_WITH(ctc_greedy_decode(view, lengths),
                      Contains("input_lengths[0] = 0 must be >= 1"));
    lengths = {4};
    CHECK_THROWS_WITH(ctc_greedy_decode(view, lengths), Contains("input_lengths must have N = 2"));
    CHECK_THROWS_WITH(ctc_greedy_decode(view, {}, 3), Contains("blank = 3 is out of range"));
    CHECK_THROWS_WITH(ctc_greedy_decode(TensorView<const float>(scores.data(), {8, 3})),
                      Contains("scores must have rank 3"));
    // No frames is said as such, not as a length of 0 the caller never passed.
    CHECK_THROWS_WITH(ctc_greedy_decode(TensorView<const float>(scores.data(), {0, 1, 3})),
                      Contains("scores must have T >= 1 frames, got shape (0, 1, 3)"));
    CHECK(ctc_greedy_decode(TensorView<const float>(scores.data(), {0, 0, 3})).empty());
    CHECK_THROWS_WITH(ctc_greedy_decode(view, Span<const int64_t>(nullptr, 2)),
                      Contains("input_lengths has no data"));
    CHECK_THROWS_AS(lstm::loss::label_error_rate({{1}}, {{}}), lstm::Error);
    CHECK_THROWS_WITH(lstm::loss::label_error_rate({{1}}, {{}}),
                      Contains("references hold no labels"));
    CHECK_THROWS_WITH(lstm::loss::label_errors({{1}, {2}}, {{1}}),
                      Contains("2 hypotheses but 1 references"));
}
