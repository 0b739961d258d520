#pragma once

// Runs a variant's backward as a sequence of BackwardPart calls (data, then weights, as DeepBench
// and cuDNN split it) on a problem given in double, so tests and the bench's pre-check compare
// the split with the one-call backward and with the reference (run_variant_parts and
// check_result live in variant_check.hpp).

#include <optional>
#include <string>

#include "lstm/reference/variant_check.hpp"
#include "lstm/variant.hpp"

namespace lstm::reference {

// check_variant() for both backward forms: the one call (BackwardPart::all) and, when the
// variant supports the split, data then weights; the reference runs once for both. Returns the
// first disagreement, prefixed with the form, or std::nullopt. `path`: one of variant.paths(),
// empty for the default.
template <typename T>
std::optional<std::string> check_variant_with_split(const Variant& variant, const LstmCase& c,
                                                    const std::string& path = {}) {
    const LstmOutputs want = lstm_forward(c.in, variant.cell());
    const LstmInputGrads want_grads = lstm_backward(c.in, c.out_grads, variant.cell());
    const VariantResult whole =
        run_variant_parts<T>(variant, c, {BackwardPart::all}, {}, false, path);
    if (auto why = check_result<T>(whole, c, want, want_grads, "")) return why;
    if (variant.supports_split_backward()) return std::nullopt;
    const VariantResult split = run_variant_parts<T>(
        variant, c, {BackwardPart::data, BackwardPart::weights}, {}, false, path);
    return check_result<T>(split, c, want, want_grads, "backward as data + weights: ");
}

}  // namespace lstm::reference
