// The cell as a part of its own (lstm/cell.hpp, kernels/common/gates.hpp): the oracle computes
// whatever cell it is handed, forward and backward, and the built-in cell's description is the
// very arithmetic the kernels run.

#include "lstm/cell.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "finite_differences.hpp"
#include "kernels/common/gates.hpp"
#include "lstm/params.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "test_util.hpp"

namespace {

using lstm::CellFunctions;
using lstm::Config;
using lstm::kernels::CellGrads;
using lstm::kernels::Gates;
using lstm::reference::lstm_backward;
using lstm::reference::lstm_forward;
using lstm::reference::LstmInputGrads;
using lstm::reference::LstmInputs;
using lstm::reference::LstmOutputGrads;
using lstm::reference::LstmOutputs;
using lstm::test::compare;
using lstm::test::finite_differences;
using lstm::test::Functional;
using lstm::test::kFdRtol;
using lstm::test::random_functional;
using lstm::test::random_vector;

// A cell that differs from PyTorch's in each part: softsign x / (1 + |x|) for g, and a forget gate
// coupled to the input, c_t = f c_{t-1} + (1 - f) i g. Every gate still matters, so a gradient
// dropped for any of them shows up.
struct CoupledSoftsignCell {
    static constexpr const char* name = "coupled-softsign";

    template <typename T>
    static T softsign(T x) {
        return x / (T(1) + std::abs(x));
    }

    template <typename T>
    static Gates<T> activate(T pre_i, T pre_f, T pre_g, T pre_o) {
        using lstm::kernels::sigmoid;
        return {sigmoid(pre_i), sigmoid(pre_f), softsign(pre_g), sigmoid(pre_o)};
    }
    template <typename T>
    static T cell_state(const Gates<T>& a, T c_prev) {
        return a.f * c_prev + (T(1) - a.f) * a.i * a.g;
    }
    template <typename T>
    static T hidden_state(const Gates<T>& a, T c) {
        return a.o * std::tanh(c);
    }
    template <typename T>
    static CellGrads<T> cell_backward(const Gates<T>& a, T c_prev, T c, T dh, T dc) {
        const T tanh_c = std::tanh(c);
        const T dc_total = dc + dh * a.o * (T(1) - tanh_c * tanh_c);
        const T one_g = T(1) - std::abs(a.g);  // softsign'(x) = (1 - |softsign(x)|)^2
        CellGrads<T> out;
        out.d_o = dh * tanh_c * a.o * (T(1) - a.o);
        out.di = dc_total * (T(1) - a.f) * a.g * a.i * (T(1) - a.i);
        out.df = dc_total * (c_prev - a.i * a.g) * a.f * (T(1) - a.f);
        out.dg = dc_total * (T(1) - a.f) * a.i * one_g * one_g;
        out.dc_prev = dc_total * a.f;
        return out;
    }
};

// The coupled cell's forward with PyTorch's backward: what a researcher gets who changes the
// forward and forgets the backward. The finite-difference check must catch it.
struct ForgotBackwardCell : CoupledSoftsignCell {
    static constexpr const char* name = "coupled-softsign-stale-backward";
    template <typename T>
    static CellGrads<T> cell_backward(const Gates<T>& a, T c_prev, T c, T dh, T dc) {
        return lstm::kernels::PyTorchCell::cell_backward(a, c_prev, c, dh, dc);
    }
};

template <typename T>
bool same_bits(T a, T b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// PyTorchCell's statics against the free functions the kernels call, bit for bit, over a grid
// that reaches saturation and both signs; returns the first few mismatches, empty when none.
template <typename T>
std::string pytorch_cell_vs_free_functions() {
    using lstm::kernels::PyTorchCell;
    const T grid[] = {T(-40), T(-7.5), T(-1), T(-0.3), T(0), T(1e-3), T(0.45), T(2), T(9), T(40)};
    std::ostringstream bad;
    int misses = 0;
    auto miss = [&](const char* what, double got, double want) {
        if (++misses <= 8) bad << what << ": PyTorchCell " << got << " vs free " << want << "\n";
    };
    for (T p0 : grid)
        for (T p1 : grid)
            for (T p2 : grid) {
                const T p3 = p0 - p2;
                const Gates<T> a = PyTorchCell::activate(p0, p1, p2, p3);
                const Gates<T> b = lstm::kernels::activate(p0, p1, p2, p3);
                if (!same_bits(a.i, b.i) || !same_bits(a.f, b.f) || !same_bits(a.g, b.g) ||
                    !same_bits(a.o, b.o))
                    miss("activate", a.i + a.f + a.g + a.o, b.i + b.f + b.g + b.o);
                const T c_prev = p1 / T(8);
                const T c = PyTorchCell::cell_state(a, c_prev);
                const T c_free = lstm::kernels::cell_state(b, c_prev);
                if (!same_bits(c, c_free)) miss("cell_state", c, c_free);
                const T h = PyTorchCell::hidden_state(a, c);
                const T h_free = lstm::kernels::hidden_state(b, c);
                if (!same_bits(h, h_free)) miss("hidden_state", h, h_free);
                const T dh = p2 / T(3), dc = T(0.25) - p0 / T(50);
                const CellGrads<T> g = PyTorchCell::cell_backward(a, c_prev, c, dh, dc);
                const CellGrads<T> g_free = lstm::kernels::cell_backward(b, c_prev, c, dh, dc);
                if (!same_bits(g.di, g_free.di) || !same_bits(g.df, g_free.df) ||
                    !same_bits(g.dg, g_free.dg) || !same_bits(g.d_o, g_free.d_o) ||
                    !same_bits(g.dc_prev, g_free.dc_prev))
                    miss("cell_backward", g.di + g.df + g.dg + g.d_o + g.dc_prev,
                         g_free.di + g_free.df + g_free.dg + g_free.d_o + g_free.dc_prev);
                if constexpr (std::is_same_v<T, double>) {
                    // The oracle's description, through its function pointers.
                    const CellFunctions& fn = lstm::pytorch_cell();
                    const Gates<double> d = fn.activate(p0, p1, p2, p3);
                    if (!same_bits<double>(d.i, b.i) || !same_bits<double>(d.f, b.f) ||
                        !same_bits<double>(d.g, b.g) || !same_bits<double>(d.o, b.o))
                        miss("pytorch_cell().activate", d.i + d.f + d.g + d.o,
                             b.i + b.f + b.g + b.o);
                    const double dc_state = fn.cell_state(d, c_prev);
                    if (!same_bits<double>(dc_state, c_free))
                        miss("pytorch_cell().cell_state", dc_state, c_free);
                    const double dh_state = fn.hidden_state(d, dc_state);
                    if (!same_bits<double>(dh_state, h_free))
                        miss("pytorch_cell().hidden_state", dh_state, h_free);
                    const CellGrads<double> e = fn.cell_backward(d, c_prev, dc_state, dh, dc);
                    if (!same_bits<double>(e.di, g_free.di) ||
                        !same_bits<double>(e.df, g_free.df) ||
                        !same_bits<double>(e.dg, g_free.dg) ||
                        !same_bits<double>(e.d_o, g_free.d_o) ||
                        !same_bits<double>(e.dc_prev, g_free.dc_prev))
                        miss("pytorch_cell().cell_backward", e.di + e.df + e.dg + e.d_o + e.dc_prev,
                             g_free.di + g_free.df + g_free.dg + g_free.d_o + g_free.dc_prev);
                }
            }
    if (misses > 0) bad << misses << " mismatches in all\n";
    return bad.str();
}

// Random inputs with a fixed seed; weights wide enough to drive gates out of the linear regime.
LstmInputs make_inputs(const Config& config, int64_t T, int64_t N, std::vector<int64_t> lengths,
                       uint64_t seed) {
    LstmInputs in;
    in.config = config;
    in.seq_len = T;
    in.batch = N;
    in.x = random_vector(static_cast<size_t>(T * N * config.input_size), seed);
    in.lengths = std::move(lengths);
    in.h0 =
        random_vector(static_cast<size_t>(config.num_cells() * N * config.state_size()), seed + 1);
    in.c0 = random_vector(static_cast<size_t>(config.num_cells() * N * config.hidden_size),
                          seed + 2, -2.0, 2.0);
    in.params = random_vector(static_cast<size_t>(lstm::param_count(config)), seed + 3, -0.8, 0.8);
    return in;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0.0;
    for (size_t k = 0; k < a.size(); ++k) m = std::max(m, std::abs(a[k] - b[k]));
    return m;
}

// The shapes the finite-difference checks run on: stacking, both directions, unequal lengths,
// and a projection.
std::vector<LstmInputs> fd_cases() {
    Config stacked;
    stacked.input_size = 3;
    stacked.hidden_size = 4;
    stacked.num_layers = 2;
    stacked.bidirectional = true;
    Config projected;
    projected.input_size = 3;
    projected.hidden_size = 5;
    projected.proj_size = 2;
    return {make_inputs(stacked, 4, 2, {4, 2}, 101), make_inputs(projected, 5, 2, {}, 202)};
}

}  // namespace

TEST_CASE("cell: PyTorchCell is bit for bit the free functions the kernels call", "[cell]") {
    const std::string f = pytorch_cell_vs_free_functions<float>();
    INFO("float:\n" << f);
    CHECK(f.empty());
    const std::string d = pytorch_cell_vs_free_functions<double>();
    INFO("double:\n" << d);
    CHECK(d.empty());
    CHECK(std::string(lstm::pytorch_cell().name) == lstm::kernels::PyTorchCell::name);
    // One description per cell type, whoever asks for it.
    CHECK(&lstm::pytorch_cell() == &lstm::cell_functions<lstm::kernels::PyTorchCell>());
}

TEST_CASE("cell: the oracle's backward of another cell matches finite differences of its forward",
          "[cell]") {
    const CellFunctions& cell = lstm::cell_functions<CoupledSoftsignCell>();
    CHECK(std::string(cell.name) == "coupled-softsign");
    uint64_t seed = 7;
    for (const LstmInputs& in : fd_cases()) {
        INFO("L " << in.config.num_layers << " D " << in.config.num_directions() << " P "
                  << in.config.proj_size);
        lstm::test::check_against_finite_differences(in, seed++, cell);
    }
}

TEST_CASE("cell: the finite-difference check catches a cell whose backward is stale", "[cell]") {
    // Same forward as the coupled cell, PyTorch's backward: the check above must fail on it,
    // or it could not tell a right backward from a wrong one.
    const CellFunctions& stale = lstm::cell_functions<ForgotBackwardCell>();
    const LstmInputs in = fd_cases().front();
    const Functional f = random_functional(in, 7);
    const std::vector<double> got = lstm_backward(in, f.grads(), stale).dparams;
    const std::vector<double> fd = finite_differences(in, &LstmInputs::params, f, stale);
    const double worst = max_abs_difference(got, fd);
    INFO("largest |stale backward - finite difference| over dparams: " << worst);
    CHECK(worst > 1e3 * (f.atol() + kFdRtol));
}

TEST_CASE("cell: the oracle computes the cell it is given, not PyTorch's", "[cell]") {
    const CellFunctions& coupled = lstm::cell_functions<CoupledSoftsignCell>();
    for (const LstmInputs& in : fd_cases()) {
        const LstmOutputs mine = lstm_forward(in, coupled);
        const LstmOutputs pytorch = lstm_forward(in);
        const double dy = max_abs_difference(mine.y, pytorch.y);
        const double dcn = max_abs_difference(mine.cn, pytorch.cn);
        INFO("largest |coupled - pytorch|: y " << dy << ", cn " << dcn);
        CHECK(dy > 1e-2);
        CHECK(dcn > 1e-2);
        // The default is PyTorch's cell, named or not.
        CHECK(lstm_forward(in, lstm::pytorch_cell()).y == pytorch.y);
    }

    // One step of one unit, by hand from the cell's own functions: the oracle adds nothing of
    // its own between the pre-activations and h.
    Config one;
    one.input_size = 2;
    one.hidden_size = 1;
    LstmInputs in = make_inputs(one, 1, 1, {}, 303);
    const LstmOutputs out = lstm_forward(in, coupled);
    const lstm::CellOffsets off = lstm::cell_offsets(one, 0, 0);
    const double* w_ih = in.params.data() + off.weight_ih;  // (4, 2)
    const double* w_hh = in.params.data() + off.weight_hh;  // (4, 1)
    const double* b_ih = in.params.data() + off.bias_ih;
    const double* b_hh = in.params.data() + off.bias_hh;
    double pre[4];
    for (int k = 0; k < 4; ++k)
        pre[k] = b_ih[k] + b_hh[k] + w_ih[2 * k] * in.x[0] + w_ih[2 * k + 1] * in.x[1] +
                 w_hh[k] * in.h0[0];
    const Gates<double> a = coupled.activate(pre[0], pre[1], pre[2], pre[3]);
    const double c = coupled.cell_state(a, in.c0[0]);
    const double h = coupled.hidden_state(a, c);
    INFO("oracle c " << out.cn[0] << " h " << out.y[0] << "; by hand c " << c << " h " << h);
    CHECK(std::abs(out.cn[0] - c) <= 1e-14);
    CHECK(std::abs(out.y[0] - h) <= 1e-14);
    CHECK(out.hn[0] == out.y[0]);
}
