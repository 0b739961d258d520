// Establishes that the double-precision reference LSTM is right, so that it can judge every
// variant: its gradients against central finite differences of its own forward pass, and its
// forward pass against facts that do not depend on it (closed-form single steps, per-sequence
// runs, time reversal, layer composition).

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "finite_differences.hpp"
#include "lstm/params.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "test_util.hpp"

namespace {

using lstm::Config;
using lstm::reference::lstm_backward;
using lstm::reference::lstm_forward;
using lstm::reference::LstmInputGrads;
using lstm::reference::LstmInputs;
using lstm::reference::LstmOutputGrads;
using lstm::reference::LstmOutputs;
using lstm::test::check_against_finite_differences;
using lstm::test::compare;
using lstm::test::random_vector;

// Central differences in double (tests/finite_differences.hpp). Truncation error ~ step^2 is
// negligible; what limits agreement is rounding: each of the n outputs in F carries ~1 ulp of noise
// that the division by the step amplifies, giving ~sqrt(n) * eps / step absolute (observed: 5e-10
// for n = 120, 3e-9 for n = 1620). The absolute tolerance is ten times that; bugs show up as errors
// ~1e-3 and above.
using lstm::reference::max_abs;
using lstm::test::Functional;
using lstm::test::random_functional;

// Elements of h0/hn (L*D, N, S) and of c0/cn (L*D, N, H); they differ with a projection.
size_t h_state_size(const Config& c, int64_t N) {
    return static_cast<size_t>(c.num_cells() * N * c.state_size());
}
size_t c_state_size(const Config& c, int64_t N) {
    return static_cast<size_t>(c.num_cells() * N * c.hidden_size);
}

// Random inputs with a fixed seed. x is random at padded positions too, so that reading padding
// changes results. Weights span a range wide enough to drive gates away from the linear regime.
LstmInputs make_inputs(const Config& config, int64_t T, int64_t N, std::vector<int64_t> lengths,
                       bool with_h0, bool with_c0, uint64_t seed) {
    LstmInputs in;
    in.config = config;
    in.seq_len = T;
    in.batch = N;
    in.x = random_vector(static_cast<size_t>(T * N * config.input_size), seed);
    in.lengths = std::move(lengths);
    if (with_h0) in.h0 = random_vector(h_state_size(config, N), seed + 1);
    if (with_c0) in.c0 = random_vector(c_state_size(config, N), seed + 2, -2.0, 2.0);
    in.params = random_vector(static_cast<size_t>(lstm::param_count(config)), seed + 3, -0.7, 0.7);
    return in;
}

// Copies the [begin, begin + count) slice of every block of `block` elements out of a tensor
// with `outer` such blocks.
std::vector<double> gather(const std::vector<double>& v, int64_t outer, int64_t block,
                           int64_t begin, int64_t count) {
    std::vector<double> out;
    for (int64_t b = 0; b < outer; ++b)
        for (int64_t k = 0; k < count; ++k) out.push_back(v[b * block + begin + k]);
    return out;
}

// Sequence n of a (T, N, F) tensor, cut to its first len steps: -> (len, 1, F).
std::vector<double> sequence(const std::vector<double>& v, int64_t N, int64_t F, int64_t n,
                             int64_t len) {
    return gather(v, len, N * F, n * F, F);
}

// Sequence n of a (L*D, N, H) state tensor: -> (L*D, 1, H). Empty stays empty.
std::vector<double> state_of(const std::vector<double>& v, int64_t cells, int64_t N, int64_t H,
                             int64_t n) {
    return v.empty() ? v : gather(v, cells, N * H, n * H, H);
}

}  // namespace

TEST_CASE("reference LSTM: finite differences, 1 layer unidirectional, mixed lengths, h0/c0",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 1, false}, 6, 3, {6, 1, 4}, true, true, 100);
    check_against_finite_differences(in, 101);
}

TEST_CASE("reference LSTM: finite differences, 1 layer bidirectional, batch 1, no h0/c0",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 1, true}, 5, 1, {}, false, false, 200);
    check_against_finite_differences(in, 201);
}

TEST_CASE("reference LSTM: finite differences, 2 layers bidirectional, mixed lengths, h0/c0",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 2, true}, 5, 3, {3, 5, 1}, true, true, 300);
    check_against_finite_differences(in, 301);
}

TEST_CASE("reference LSTM: finite differences, 2 layers unidirectional, batch 1, c0 only",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 2, false}, 4, 1, {}, false, true, 400);
    check_against_finite_differences(in, 401);
}

TEST_CASE("reference LSTM: finite differences, 3 layers unidirectional, equal lengths, no h0/c0",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 3, false}, 4, 3, {}, false, false, 500);
    check_against_finite_differences(in, 501);
}

TEST_CASE("reference LSTM: finite differences, 3 layers bidirectional, mixed lengths, h0 only",
          "[reference]") {
    const LstmInputs in = make_inputs(Config{3, 5, 3, true}, 4, 3, {2, 4, 1}, true, false, 600);
    check_against_finite_differences(in, 601);
}

TEST_CASE("reference LSTM: finite differences, long sequence T = 50, 2 layers bidirectional",
          "[reference]") {
    // Off-by-one errors in the time loop hide at small T. Checking every parameter (1080 of them)
    // still takes well under a second, so no subset is needed.
    const LstmInputs in = make_inputs(Config{3, 5, 2, true}, 50, 3, {50, 1, 37}, true, true, 700);
    check_against_finite_differences(in, 701);
}

TEST_CASE("reference LSTM: finite differences, projections (proj_size), 2 layers bidirectional",
          "[reference]") {
    Config config{3, 5, 2, true};
    config.proj_size = 2;
    const LstmInputs in = make_inputs(config, 5, 3, {5, 2, 4}, true, true, 1200);
    check_against_finite_differences(in, 1201);
}

TEST_CASE("reference LSTM: finite differences, no biases, with and without projections",
          "[reference]") {
    for (int64_t proj : {0, 3}) {
        INFO("proj_size " << proj);
        Config config{3, 5, 2, false};
        config.bias = false;
        config.proj_size = proj;
        const LstmInputs in = make_inputs(config, 4, 2, {4, 3}, true, true, 1300);
        check_against_finite_differences(in, 1301);
    }
}

TEST_CASE("reference LSTM: closed-form single step, both directions", "[reference]") {
    // T = N = H = I = 1: each gate is a scalar, so the whole step can be written out by hand.
    const Config config{1, 1, 1, true};
    LstmInputs in;
    in.config = config;
    in.seq_len = 1;
    in.batch = 1;
    in.x = {0.7};
    in.h0 = {0.3, -0.4};  // forward cell, reverse cell
    in.c0 = {-0.5, 0.9};
    in.params.assign(static_cast<size_t>(lstm::param_count(config)), 0.0);
    // Per cell: weight_ih (4), weight_hh (4), bias_ih (4), bias_hh (4), gates i, f, g, o.
    const double w_ih[2][4] = {{0.5, -0.3, 0.8, 0.2}, {-0.6, 0.4, 0.1, -0.9}};
    const double w_hh[2][4] = {{0.1, 0.7, -0.4, 0.6}, {0.3, -0.2, 0.5, 0.4}};
    const double b_ih[2][4] = {{0.05, 0.6, -0.1, 0.2}, {-0.3, 0.1, 0.25, 0.0}};
    const double b_hh[2][4] = {{-0.2, 0.3, 0.15, -0.1}, {0.2, 0.45, -0.05, 0.35}};
    for (int d = 0; d < 2; ++d) {
        const lstm::CellOffsets off = lstm::cell_offsets(config, 0, d);
        for (int k = 0; k < 4; ++k) {
            in.params[off.weight_ih + k] = w_ih[d][k];
            in.params[off.weight_hh + k] = w_hh[d][k];
            in.params[off.bias_ih + k] = b_ih[d][k];
            in.params[off.bias_hh + k] = b_hh[d][k];
        }
    }
    auto sig = [](double a) { return 1.0 / (1.0 + std::exp(-a)); };

    // Output gradient: dy = 1 on the forward half only, so the reverse cell gets no gradient.
    LstmOutputGrads grads{{1.0, 0.0}, {}, {}};
    const LstmOutputs out = lstm_forward(in);
    const LstmInputGrads grad = lstm_backward(in, grads);
    REQUIRE(out.y.size() == 2);
    double dx_expected = 0.0;
    for (int d = 0; d < 2; ++d) {
        INFO("direction " << d);
        double a[4];
        for (int k = 0; k < 4; ++k)
            a[k] = w_ih[d][k] * in.x[0] + b_ih[d][k] + w_hh[d][k] * in.h0[d] + b_hh[d][k];
        const double i = sig(a[0]), f = sig(a[1]), g = std::tanh(a[2]), o = sig(a[3]);
        const double c = f * in.c0[d] + i * g;
        const double h = o * std::tanh(c);
        CHECK(out.y[d] == Approx(h).epsilon(1e-14));
        CHECK(out.hn[d] == Approx(h).epsilon(1e-14));
        CHECK(out.cn[d] == Approx(c).epsilon(1e-14));

        // dL/dh = dy[d]; chain rule written out for h = o tanh(c), c = f c0 + i g.
        const double dh = grads.dy[d];
        const double dc = dh * o * (1.0 - std::tanh(c) * std::tanh(c));
        const double da[4] = {dc * g * i * (1.0 - i), dc * in.c0[d] * f * (1.0 - f),
                              dc * i * (1.0 - g * g), dh * std::tanh(c) * o * (1.0 - o)};
        const lstm::CellOffsets off = lstm::cell_offsets(config, 0, d);
        double dh0 = 0.0;
        for (int k = 0; k < 4; ++k) {
            INFO("gate " << k);
            CHECK(grad.dparams[off.bias_ih + k] == Approx(da[k]).margin(1e-15));
            CHECK(grad.dparams[off.bias_hh + k] == Approx(da[k]).margin(1e-15));
            CHECK(grad.dparams[off.weight_ih + k] == Approx(da[k] * in.x[0]).margin(1e-15));
            CHECK(grad.dparams[off.weight_hh + k] == Approx(da[k] * in.h0[d]).margin(1e-15));
            dh0 += w_hh[d][k] * da[k];
            dx_expected += w_ih[d][k] * da[k];
        }
        CHECK(grad.dh0[d] == Approx(dh0).margin(1e-15));
        CHECK(grad.dc0[d] == Approx(dc * f).margin(1e-15));
    }
    CHECK(grad.dx[0] == Approx(dx_expected).margin(1e-15));
}

TEST_CASE("reference LSTM: padded positions give zero outputs and gradients and are ignored",
          "[reference]") {
    for (bool bidirectional : {false, true}) {
        INFO("bidirectional " << bidirectional);
        const Config config{3, 5, 2, bidirectional};
        const int64_t T = 5, N = 3, I = 3, DH = config.output_size();
        LstmInputs in = make_inputs(config, T, N, {4, 1, 5}, true, true, 800);
        const Functional f = random_functional(in, 801);
        const LstmOutputs out = lstm_forward(in);
        const LstmInputGrads grad = lstm_backward(in, f.grads());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                if (t < in.lengths[n]) continue;
                INFO("t " << t << ", n " << n);
                for (int64_t k = 0; k < DH; ++k) CHECK(out.y[(t * N + n) * DH + k] == 0.0);
                for (int64_t k = 0; k < I; ++k) CHECK(grad.dx[(t * N + n) * I + k] == 0.0);
            }

        // Changing x and dy at padded positions must change nothing at all.
        LstmInputs in2 = in;
        Functional f2 = f;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                if (t < in.lengths[n]) continue;
                for (int64_t k = 0; k < I; ++k) in2.x[(t * N + n) * I + k] = 1e3;
                for (int64_t k = 0; k < DH; ++k) f2.wy[(t * N + n) * DH + k] = -1e3;
            }
        const LstmOutputs out2 = lstm_forward(in2);
        const LstmInputGrads grad2 = lstm_backward(in2, f2.grads());
        CHECK(out2.y == out.y);
        CHECK(out2.hn == out.hn);
        CHECK(out2.cn == out.cn);
        CHECK(grad2.dx == grad.dx);
        CHECK(grad2.dh0 == grad.dh0);
        CHECK(grad2.dc0 == grad.dc0);
        CHECK(grad2.dparams == grad.dparams);
    }
}

TEST_CASE("reference LSTM: a variable-length batch equals each sequence run alone", "[reference]") {
    const Config config{3, 5, 2, true};
    const int64_t T = 6, N = 4, I = 3, H = 5, DH = config.output_size(), cells = config.num_cells();
    const LstmInputs in = make_inputs(config, T, N, {6, 1, 4, 3}, true, true, 900);
    const Functional f = random_functional(in, 901);
    const LstmOutputs out = lstm_forward(in);
    const LstmInputGrads grad = lstm_backward(in, f.grads());

    std::vector<double> dparams_sum(in.params.size(), 0.0);
    for (int64_t n = 0; n < N; ++n) {
        INFO("sequence " << n);
        const int64_t len = in.lengths[n];
        // A single sequence with T = its own length: no padding anywhere.
        LstmInputs one;
        one.config = config;
        one.seq_len = len;
        one.batch = 1;
        one.x = sequence(in.x, N, I, n, len);
        one.h0 = state_of(in.h0, cells, N, H, n);
        one.c0 = state_of(in.c0, cells, N, H, n);
        one.params = in.params;
        const LstmOutputGrads g{sequence(f.wy, N, DH, n, len), state_of(f.whn, cells, N, H, n),
                                state_of(f.wcn, cells, N, H, n)};
        const LstmOutputs o = lstm_forward(one);
        const LstmInputGrads gr = lstm_backward(one, g);
        // The same arithmetic in the same order, so agreement is exact up to last-bit noise.
        LSTM_CHECK_CLOSE(compare("y", sequence(out.y, N, DH, n, len), o.y, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("hn", state_of(out.hn, cells, N, H, n), o.hn, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("cn", state_of(out.cn, cells, N, H, n), o.cn, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("dx", sequence(grad.dx, N, I, n, len), gr.dx, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("dh0", state_of(grad.dh0, cells, N, H, n), gr.dh0, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("dc0", state_of(grad.dc0, cells, N, H, n), gr.dc0, 1e-15, 1e-13));
        for (size_t k = 0; k < dparams_sum.size(); ++k) dparams_sum[k] += gr.dparams[k];
    }
    // Parameter gradients of a batch are the sums over its sequences.
    LSTM_CHECK_CLOSE(compare("dparams", grad.dparams, dparams_sum, 1e-14, 1e-12));
}

TEST_CASE("reference LSTM: the reverse direction is the forward cell on the reversed sequence",
          "[reference]") {
    const Config bi{3, 5, 1, true};
    const int64_t T = 5, N = 3, I = 3, H = 5;
    const LstmInputs in = make_inputs(bi, T, N, {5, 2, 4}, true, true, 1000);
    const LstmOutputs out = lstm_forward(in);

    // A unidirectional LSTM whose only cell holds the reverse cell's parameters.
    const Config uni{3, 5, 1, false};
    const int64_t begin = lstm::cell_offsets(bi, 0, 1).weight_ih;
    const std::vector<double> reverse_params(in.params.begin() + begin,
                                             in.params.begin() + begin + lstm::param_count(uni));
    for (int64_t n = 0; n < N; ++n) {
        INFO("sequence " << n);
        const int64_t len = in.lengths[n];
        LstmInputs one;
        one.config = uni;
        one.seq_len = len;
        one.batch = 1;
        for (int64_t t = len - 1; t >= 0; --t)
            for (int64_t k = 0; k < I; ++k) one.x.push_back(in.x[(t * N + n) * I + k]);
        one.h0 = gather(in.h0, 1, 0, (1 * N + n) * H, H);
        one.c0 = gather(in.c0, 1, 0, (1 * N + n) * H, H);
        one.params = reverse_params;
        const LstmOutputs o = lstm_forward(one);
        std::vector<double> reverse_half;  // y[t, n, H:2H] for t = len-1 .. 0
        for (int64_t t = len - 1; t >= 0; --t)
            for (int64_t k = 0; k < H; ++k)
                reverse_half.push_back(out.y[(t * N + n) * 2 * H + H + k]);
        LSTM_CHECK_CLOSE(compare("reverse half of y", reverse_half, o.y, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("hn of the reverse cell", gather(out.hn, 1, 0, (1 * N + n) * H, H),
                                 o.hn, 1e-15, 1e-13));
        LSTM_CHECK_CLOSE(compare("cn of the reverse cell", gather(out.cn, 1, 0, (1 * N + n) * H, H),
                                 o.cn, 1e-15, 1e-13));
    }
}

TEST_CASE("reference LSTM: a 2-layer stack equals two 1-layer LSTMs in sequence", "[reference]") {
    const Config two{3, 5, 2, true};
    const int64_t T = 5, N = 3, H = 5;
    const LstmInputs in = make_inputs(two, T, N, {5, 3, 1}, true, true, 1100);
    const Functional f = random_functional(in, 1101);
    const LstmOutputs out = lstm_forward(in);
    const LstmInputGrads grad = lstm_backward(in, f.grads());

    // Layer 0 reads x; layer 1 reads layer 0's (T, N, 2H) output. Parameters, states and state
    // gradients split at the layer boundary (cells 0, 1 | cells 2, 3).
    const Config bottom_cfg{3, 5, 1, true}, top_cfg{10, 5, 1, true};
    const size_t split = static_cast<size_t>(lstm::cell_offsets(two, 1, 0).weight_ih);
    const size_t state_split = static_cast<size_t>(2 * N * H);
    auto head = [](const std::vector<double>& v, size_t k) {
        return std::vector<double>(v.begin(), v.begin() + k);
    };
    auto tail = [](const std::vector<double>& v, size_t k) {
        return std::vector<double>(v.begin() + k, v.end());
    };
    LstmInputs bottom{bottom_cfg,
                      T,
                      N,
                      in.x,
                      in.lengths,
                      head(in.h0, state_split),
                      head(in.c0, state_split),
                      head(in.params, split)};
    const LstmOutputs bottom_out = lstm_forward(bottom);
    LstmInputs top{top_cfg,
                   T,
                   N,
                   bottom_out.y,
                   in.lengths,
                   tail(in.h0, state_split),
                   tail(in.c0, state_split),
                   tail(in.params, split)};
    const LstmOutputs top_out = lstm_forward(top);
    const LstmInputGrads top_grad =
        lstm_backward(top, {f.wy, tail(f.whn, state_split), tail(f.wcn, state_split)});
    const LstmInputGrads bottom_grad =
        lstm_backward(bottom, {top_grad.dx, head(f.whn, state_split), head(f.wcn, state_split)});

    auto concat = [](std::vector<double> a, const std::vector<double>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    LSTM_CHECK_CLOSE(compare("y", out.y, top_out.y, 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("hn", out.hn, concat(bottom_out.hn, top_out.hn), 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("cn", out.cn, concat(bottom_out.cn, top_out.cn), 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("dx", grad.dx, bottom_grad.dx, 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("dh0", grad.dh0, concat(bottom_grad.dh0, top_grad.dh0), 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("dc0", grad.dc0, concat(bottom_grad.dc0, top_grad.dc0), 1e-15, 1e-13));
    LSTM_CHECK_CLOSE(compare("dparams", grad.dparams, concat(bottom_grad.dparams, top_grad.dparams),
                             1e-15, 1e-13));
}

TEST_CASE("reference LSTM: bias_ih and bias_hh receive identical gradients", "[reference]") {
    const Config config{3, 5, 3, true};
    const LstmInputs in = make_inputs(config, 4, 3, {4, 2, 1}, true, true, 1200);
    const LstmInputGrads grad = lstm_backward(in, random_functional(in, 1201).grads());
    for (int64_t l = 0; l < config.num_layers; ++l)
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            INFO("layer " << l << ", direction " << d);
            const lstm::CellOffsets off = lstm::cell_offsets(config, l, d);
            const auto b_ih = grad.dparams.begin() + off.bias_ih;
            const auto b_hh = grad.dparams.begin() + off.bias_hh;
            // They enter the pre-activation identically, so any difference is a bug, not noise.
            CHECK(std::vector<double>(b_ih, b_ih + 4 * config.hidden_size) ==
                  std::vector<double>(b_hh, b_hh + 4 * config.hidden_size));
            CHECK(max_abs(std::vector<double>(b_ih, b_ih + 4 * config.hidden_size)) > 1e-3);
        }
}

TEST_CASE("reference LSTM: bad input throws lstm::Error naming the argument", "[reference]") {
    using Catch::Contains;
    const Config config{3, 5, 2, true};
    const LstmInputs good = make_inputs(config, 4, 3, {4, 2, 1}, true, true, 1300);
    const Functional f = random_functional(good, 1301);
    REQUIRE_NOTHROW(lstm_backward(good, f.grads()));

    LstmInputs bad = good;
    bad.x.pop_back();
    CHECK_THROWS_AS(lstm_forward(bad), lstm::Error);
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("x has 35 elements") && Contains("T*N*I = 36"));
    CHECK_THROWS_WITH(lstm_backward(bad, f.grads()), Contains("x has 35 elements"));

    bad = good;
    bad.lengths[1] = 0;
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("lengths[1] = 0"));
    bad.lengths[1] = 5;
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("lengths[1] = 5 exceeds T = 4"));
    bad.lengths = {4, 2};
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("lengths has 2 elements") && Contains("N = 3"));

    bad = good;
    bad.params.push_back(0.0);
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("params has"));
    bad = good;
    bad.h0.resize(7);
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("h0 has 7 elements") && Contains("60"));
    bad = good;
    bad.c0.resize(61);
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("c0 has 61 elements"));
    bad = good;
    bad.seq_len = 0;
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("seq_len"));
    bad = good;
    bad.config.hidden_size = 0;
    CHECK_THROWS_WITH(lstm_forward(bad), Contains("hidden_size"));

    LstmOutputGrads g = f.grads();
    g.dy.pop_back();
    CHECK_THROWS_WITH(lstm_backward(good, g), Contains("dy has"));
    g = f.grads();
    g.dhn.pop_back();
    CHECK_THROWS_WITH(lstm_backward(good, g), Contains("dhn has"));
    g = f.grads();
    g.dcn.push_back(0.0);
    CHECK_THROWS_WITH(lstm_backward(good, g), Contains("dcn has"));
}
