#pragma once

// The gate every benchmark case passes before it is timed: the variant, in fp32, against the
// double reference on the case's own configuration, data and parameters. A timing of a variant
// that computes something else would be meaningless, so a disagreement is reported as an error.

#include <cstdint>
#include <optional>
#include <string>

#include "lstm/config.hpp"
#include "lstm/tensor.hpp"
#include "lstm/variant.hpp"

namespace lstm::bench {

// The reference is naive double code: the full Braun shapes (4x320 bidirectional over 1000 steps
// is about a TFLOP for it) would take far longer than the benchmark itself. A slice of two
// sequences and the leading steps still runs every layer, direction, gate and weight of the
// exact configuration, which is what a wrong kernel gets wrong.
constexpr int64_t kCheckSteps = 16;

// Runs `variant` forward (y, hn, cn) and backward (dx, dh0, dc0, dparams, from a fixed random dy
// and zero initial states, as the training step has) on the first and last sequence of x
// (T, N, I, host) over min(T, kCheckSteps) steps, lengths (N, host) scaled to that, with
// `params` (param_count(config), host). Tolerances: reference::lstm_rtol. With `with_split`,
// backward also runs as BackwardPart::data then weights (the variant must support the split) and
// that result is checked too. `path`: one of variant.paths(), empty for the default; `precision`:
// what the products compute in (bf16: reference::check_bf16_result's rule). Returns why it
// disagrees (or threw), std::nullopt when it agrees.
std::optional<std::string> check_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, Span<const float> params, bool with_split = false,
    const std::string& path = {}, Precision precision = Precision::full);

}  // namespace lstm::bench
