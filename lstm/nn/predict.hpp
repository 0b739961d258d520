#pragma once

// Turning scores into predictions and predictions into a score: the class of each row, and
// accuracy. For CTC heads, lstm/loss/ctc_decode.hpp decodes label sequences and computes the
// label error rate. Host memory.

#include <cstdint>
#include <vector>

#include "lstm/detail/argmax.hpp"
#include "lstm/error.hpp"
#include "lstm/loss/cross_entropy.hpp"  // kDefaultIgnoreIndex
#include "lstm/tensor.hpp"

namespace lstm::nn {

// The class with the highest score in each row of `scores` (rank 2 (N, C) or rank 3 (T, N, C),
// host; logits, log-probabilities or probabilities alike), the lowest index on ties and NaN as
// the largest, as torch.argmax(scores, dim=-1).flatten(): N or T * N classes.
template <typename T>
std::vector<int64_t> argmax_classes(TensorView<const T> scores) {
    check(scores.rank() == 2 || scores.rank() == 3,
          "argmax_classes: scores must have rank 2 (N, C) or 3 (T, N, C), got shape ",
          scores.shape_string());
    check(scores.device() == Device::cpu, "argmax_classes: scores is on ",
          to_string(scores.device()), "; copy it to the host first");
    const int64_t classes = scores.size(scores.rank() - 1);
    check(classes >= 1, "argmax_classes: scores has no classes (shape ", scores.shape_string(),
          ")");
    check(scores.numel() == 0 || scores.data() != nullptr, "argmax_classes: scores has no data");
    const int64_t rows = scores.numel() / classes;
    std::vector<int64_t> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
        out[static_cast<size_t>(r)] =
            lstm::detail::argmax_row(scores.data() + r * classes, classes);
    return out;
}

// The fraction of predictions equal to their targets (both of one length >= 1).
inline double accuracy(Span<const int64_t> predicted, Span<const int64_t> targets) {
    check(predicted.size == targets.size, "accuracy: ", predicted.size, " predictions but ",
          targets.size, " targets");
    check(predicted.size >= 1, "accuracy: no predictions");
    check(predicted.data != nullptr && targets.data != nullptr,
          "accuracy: predicted or targets has no data");
    int64_t right = 0;
    for (int64_t i = 0; i < predicted.size; ++i) right += predicted[i] == targets[i];
    return static_cast<double>(right) / static_cast<double>(predicted.size);
}

// The accuracy of per-frame predictions (argmax_classes of (T, N, C) logits, time-major: frame
// t of sequence n at t * N + n) over the frames the per-frame loss counts: valid ones, t <
// lengths[n], whose target is not the ignore_index -100 (plain accuracy() would also score the
// padding). predicted and targets T * N values each (targets at padded frames are not read);
// lengths N values in 0..T, leaving at least one frame counted.
inline double frame_accuracy(Span<const int64_t> predicted, Span<const int64_t> targets,
                             Span<const int64_t> lengths) {
    constexpr const char* fn = "frame_accuracy";
    check(predicted.size == targets.size, fn, ": ", predicted.size, " predictions but ",
          targets.size, " targets");
    const int64_t batch = lengths.size;
    check(batch >= 1 && predicted.size % batch == 0, fn, ": ", predicted.size,
          " predictions are not T frames of each of the ", batch, " sequences lengths describes");
    check(predicted.data != nullptr && targets.data != nullptr && lengths.data != nullptr, fn,
          ": predicted, targets or lengths has no data");
    const int64_t steps = predicted.size / batch;
    int64_t right = 0, frames = 0;
    for (int64_t n = 0; n < batch; ++n) {
        check(lengths[n] >= 0 && lengths[n] <= steps, fn, ": lengths[", n, "] = ", lengths[n],
              " is outside 0..T = ", steps);
        for (int64_t t = 0; t < lengths[n]; ++t) {
            const int64_t target = targets[t * batch + n];
            if (target == loss::kDefaultIgnoreIndex) continue;
            right += predicted[t * batch + n] == target;
            ++frames;
        }
    }
    check(frames >= 1, fn,
          ": lengths and targets leave no frame to score (valid, target not -100)");
    return static_cast<double>(right) / static_cast<double>(frames);
}

}  // namespace lstm::nn
