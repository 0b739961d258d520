#pragma once

// The oracle's backward against central finite differences of its own forward, for any cell
// description (tests/reference_lstm_test.cpp with PyTorch's cell, tests/cell_test.cpp with others).

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "lstm/cell.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/reference/tolerance.hpp"
#include "test_util.hpp"

namespace lstm::test {

// Central differences: truncation ~ step^2 is negligible, rounding gives ~sqrt(outputs) * eps /
// step absolute; the tolerance is ten times that.
constexpr double kFdStep = 1e-6;
constexpr double kFdRtol = 1e-6;

// F = sum(wy * y) + sum(whn * hn) + sum(wcn * cn): a random linear functional of every output, so
// its gradient with respect to the outputs is (wy, whn, wcn).
struct Functional {
    std::vector<double> wy, whn, wcn;

    double operator()(const reference::LstmOutputs& out) const {
        return std::inner_product(wy.begin(), wy.end(), out.y.begin(), 0.0) +
               std::inner_product(whn.begin(), whn.end(), out.hn.begin(), 0.0) +
               std::inner_product(wcn.begin(), wcn.end(), out.cn.begin(), 0.0);
    }
    reference::LstmOutputGrads grads() const { return {wy, whn, wcn}; }
    size_t outputs() const { return wy.size() + whn.size() + wcn.size(); }
    // The absolute tolerance of a finite difference of F.
    double atol() const {
        return 10.0 * std::sqrt(static_cast<double>(outputs())) *
               std::numeric_limits<double>::epsilon() / kFdStep;
    }
};

// Weights for y (T, N, D*S), hn (L*D, N, S) and cn (L*D, N, H).
inline Functional random_functional(const reference::LstmInputs& in, uint64_t seed) {
    const Config& c = in.config;
    const size_t ny = static_cast<size_t>(in.seq_len * in.batch * c.output_size());
    const size_t nh = static_cast<size_t>(c.num_cells() * in.batch * c.state_size());
    const size_t nc = static_cast<size_t>(c.num_cells() * in.batch * c.hidden_size);
    return {random_vector(ny, seed + 10), random_vector(nh, seed + 11),
            random_vector(nc, seed + 12)};
}

// dF/d(in.*field) for every element, by central differences of the oracle's forward with `cell`.
inline std::vector<double> finite_differences(reference::LstmInputs in,
                                              std::vector<double> reference::LstmInputs::*field,
                                              const Functional& f, const CellFunctions& cell) {
    std::vector<double>& v = in.*field;
    std::vector<double> out(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
        const double saved = v[k];
        v[k] = saved + kFdStep;
        const double plus = f(reference::lstm_forward(in, cell));
        v[k] = saved - kFdStep;
        const double minus = f(reference::lstm_forward(in, cell));
        v[k] = saved;
        out[k] = (plus - minus) / (2.0 * kFdStep);
    }
    return out;
}

// Checks the oracle's backward with `cell` against finite differences for every element of x, h0,
// c0 and params, printing the worst mismatches.
inline void check_against_finite_differences(const reference::LstmInputs& in, uint64_t seed,
                                             const CellFunctions& cell = pytorch_cell()) {
    using reference::LstmInputs;
    const Functional f = random_functional(in, seed);
    const reference::LstmInputGrads grad = reference::lstm_backward(in, f.grads(), cell);
    const double atol = f.atol();
    // An empty h0/c0 means zeros, so its gradient is the one at zero: probe explicit zeros.
    LstmInputs probe = in;
    const Config& c = in.config;
    if (probe.h0.empty()) probe.h0.assign(c.num_cells() * in.batch * c.state_size(), 0.0);
    if (probe.c0.empty()) probe.c0.assign(c.num_cells() * in.batch * c.hidden_size, 0.0);
    auto fd = [&](std::vector<double> LstmInputs::*field) {
        return finite_differences(probe, field, f, cell);
    };
    LSTM_CHECK_CLOSE(compare("dx", grad.dx, fd(&LstmInputs::x), atol, kFdRtol));
    LSTM_CHECK_CLOSE(compare("dh0", grad.dh0, fd(&LstmInputs::h0), atol, kFdRtol));
    LSTM_CHECK_CLOSE(compare("dc0", grad.dc0, fd(&LstmInputs::c0), atol, kFdRtol));
    LSTM_CHECK_CLOSE(compare("dparams", grad.dparams, fd(&LstmInputs::params), atol, kFdRtol));
    // Guards against a vacuous pass where both sides are zero.
    CHECK(reference::max_abs(grad.dparams) > 1e-2);
    CHECK(reference::max_abs(grad.dx) > 1e-2);
}

}  // namespace lstm::test
