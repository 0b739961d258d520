#pragma once

// The tolerance rule every comparison with the reference uses (docs/testing.md, from
// docs/testing.md). Error grows with accumulation depth, so fp32 allows
// rtol = c * ceil(log2((in + H) * T)) * 1.2e-7 with c = 4 forward and 8 backward; fp64 allows
// 1e-12. Elements near zero come out of sums with cancellation, so the absolute floor is rtol
// times the largest magnitude of the tensor being compared.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/config.hpp"
#include "lstm/tensor.hpp"

namespace lstm::reference {

enum class Pass { forward, backward };

inline double lstm_rtol(DType dtype, const Config& config, int64_t seq_len, Pass pass) {
    if (dtype == DType::f64) return 1e-12;
    // The widest dot product of the stack: layer inputs above the first are D*H wide.
    const int64_t widest = std::max(
        config.input_size, config.num_layers > 1 ? config.output_size() : config.input_size);
    const double depth = std::ceil(
        std::log2(static_cast<double>(widest + config.hidden_size) * static_cast<double>(seq_len)));
    // 1.2e-7 is fp32's machine epsilon 2^-23, rounded up.
    const double c = pass == Pass::forward ? 4.0 : 8.0;
    return c * depth * 1.2e-7;
}

// The bound of a Precision::bf16 run against the unrounded problem (the double oracle at full
// precision), in the style of benchdnn's bf16 RNN checks: each operand rounded to bf16 errs by at
// most 2^-9 of itself, so a product of two by about 2^-8, and the error of a sum of K such
// products over T steps grows like the depth log2(K T) of the fp32 rule above. rtol =
// ceil(log2((in + H) * T)) * 2^-9, applied to whole tensors (check_norm_close) where T > 1, since
// a single element's share of the rounding errors varies too much to bound it alone, and element
// by element (check_close) at T = 1. Forward and backward alike: the backward's extra rounding
// points (dgates, dh) are of the same kind as the forward's.
inline double bf16_rtol(const Config& config, int64_t seq_len) {
    const int64_t widest = std::max(
        config.input_size, config.num_layers > 1 ? config.output_size() : config.input_size);
    const double depth = std::ceil(
        std::log2(static_cast<double>(widest + config.hidden_size) * static_cast<double>(seq_len)));
    return depth * std::ldexp(1.0, -9);
}

// ||got - want|| / ||want||, Euclidean norms over the whole tensor (0 for two zero tensors,
// infinite when got has a NaN).
inline double relative_norm_error(const std::vector<double>& got, const std::vector<double>& want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
        err += (got[i] - want[i]) * (got[i] - want[i]);
        ref += want[i] * want[i];
    }
    if (std::isnan(err)) return HUGE_VAL;
    if (err == 0) return 0;
    return ref > 0 ? std::sqrt(err / ref) : HUGE_VAL;
}

inline double max_abs(const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
}

// Checks |got - want| <= rtol * (max|want| + |want|) element-wise; returns a message naming
// `what` and the worst element when it fails, std::nullopt when it passes. NaN always fails.
inline std::optional<std::string> check_close(const std::string& what,
                                              const std::vector<double>& got,
                                              const std::vector<double>& want, double rtol) {
    if (got.size() != want.size())
        return what + ": " + std::to_string(got.size()) + " elements, expected " +
               std::to_string(want.size());
    const double floor = rtol * max_abs(want);
    size_t worst = 0, failures = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::abs(got[i] - want[i]);
        const double limit = floor + rtol * std::abs(want[i]);
        if (err <= limit) continue;
        ++failures;
        const double ratio = std::isfinite(err) ? err / std::max(limit, 1e-300) : HUGE_VAL;
        if (ratio >= worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    if (failures == 0) return std::nullopt;
    std::ostringstream msg;
    msg.precision(9);
    msg << what << ": " << failures << " of " << got.size() << " elements beyond rtol " << rtol
        << "; worst [" << worst << "] got " << got[worst] << ", expected " << want[worst];
    return msg.str();
}

}  // namespace lstm::reference
