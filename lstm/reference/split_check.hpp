#pragma once

// Runs a variant's backward as a sequence of BackwardPart calls (data, then weights, as DeepBench
// and cuDNN split it) on a problem given in double, so tests and the bench's pre-check compare
// the split with the one-call backward and with the reference (run_variant_parts and
// check_result live in variant_check.hpp).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lstm/reference/variant_check.hpp"
#include "lstm/variant.hpp"

namespace lstm::reference {

// check_variant() for both backward forms: the one call (BackwardPart::all) and, when the
// variant supports the split, data then weights; the reference runs once for both. Returns the
// first disagreement, prefixed with the form, or std::nullopt. `path`: one of variant.paths(),
// empty for the default; `precision`: what the products compute in (bf16: check_bf16_result).
template <typename T>
std::optional<std::string> check_variant_with_split(const Variant& variant, const LstmCase& c,
                                                    const std::string& path = {},
                                                    Precision precision = Precision::full) {
    std::vector<std::pair<std::string, VariantResult>> runs;
    runs.emplace_back(
        "", run_variant_parts<T>(variant, c, {BackwardPart::all}, {}, false, path, precision));
    if (!variant.supports_split_backward())
        runs.emplace_back(
            "backward as data + weights: ",
            run_variant_parts<T>(variant, c, {BackwardPart::data, BackwardPart::weights}, {}, false,
                                 path, precision));
    if (precision == Precision::bf16) {
        const Bf16Oracles o = bf16_oracles(c, variant.cell());
        for (const auto& [label, got] : runs)
            if (auto why = check_bf16_result(got, c, o, label, 0,
                                             variant.rounds_at_library_points(precision)))
                return why;
        return std::nullopt;
    }
    const LstmOutputs want = lstm_forward(c.in, variant.cell());
    const LstmInputGrads want_grads = lstm_backward(c.in, c.out_grads, variant.cell());
    for (const auto& [label, got] : runs)
        if (auto why = check_result<T>(got, c, want, want_grads, label)) return why;
    return std::nullopt;
}

}  // namespace lstm::reference
