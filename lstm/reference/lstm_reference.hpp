#pragma once

// The double-precision LSTM oracle every variant is judged against. It is written to be obviously
// right rather than fast: one sequence at a time, one time step at a time, naive loops, no Eigen.
// The one concession to speed: sequences are independent, so with OpenMP they run on several
// threads, and every sum still adds its terms in the serial order, so the result is the same
// bits for any number of threads. Its own correctness is established by finite differences in
// tests/reference_lstm_test.cpp. Conventions are PyTorch nn.LSTM's (docs/architecture.md).
// What one hidden unit computes from its four pre-activations (and back) is a CellFunctions
// (lstm/cell.hpp), PyTorch's cell unless the caller names another; tests/cell_test.cpp shows the
// oracle follows a different one.
//
// Precision::bf16 (lstm/tensor.hpp) models the library's mixed precision: every operand entering
// a matrix product is rounded to the nearest bf16 (kernels/common/bf16.hpp's round_to_bf16, in one
// step from double) where the library rounds it, and everything else is computed in double as at
// full precision. The rounding points (docs/precision.md): forward, the weights W_ih, W_hh, W_hr,
// the layer input x_t, h_{t-1} entering the recurrent product and h_raw entering the projection;
// backward, dh_t entering dh_raw = dh W_hr, the gate gradients entering dx and dh_{t-1} and the
// weight gradients, and there x_t, h_{t-1} and h_raw too. Biases and their gradients are never
// rounded. A value the oracle computes (h, dgates) differs from the library's fp32 one in its
// last bits, so where it lies within a hair of a tie between two bf16 values the two may round
// apart, and the difference then grows like any other through the steps after it: RoundingReport
// counts such near ties, so a test knows when the oracle's exact rounding is the library's.

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "lstm/cell.hpp"
#include "lstm/config.hpp"
#include "lstm/error.hpp"
#include "lstm/params.hpp"
#include "lstm/tensor.hpp"

namespace lstm::reference {

// Everything the forward pass reads, on the host, in double.
struct LstmInputs {
    Config config;
    int64_t seq_len = 0, batch = 0;  // T, N
    std::vector<double> x;           // (T, N, I) time-major
    std::vector<int64_t> lengths;    // (N), each in 1..T; empty = every sequence has length T
    std::vector<double> h0;          // (L*D, N, S), S = config.state_size(); empty = zeros
    std::vector<double> c0;          // (L*D, N, H); empty = zeros
    std::vector<double> params;      // (param_count(config)), PyTorch parameters() order
};

// y (T, N, D*S) with the forward direction in the first S = config.state_size() features; hn
// (L*D, N, S) and cn (L*D, N, H) indexed by layer*D + direction.
struct LstmOutputs {
    std::vector<double> y, hn, cn;
};

// Gradients of some loss with respect to the outputs. dy (T, N, D*S); dhn (L*D, N, S), dcn
// (L*D, N, H), empty = zeros. dy at padded positions (t >= lengths[n]) is ignored: those outputs
// are constant.
struct LstmOutputGrads {
    std::vector<double> dy, dhn, dcn;
};

// Gradients with respect to every input. dx (T, N, I), zero at padded positions; dh0 (L*D, N, S),
// dc0 (L*D, N, H), also when h0/c0 were empty (then they are the gradient at zero); dparams
// (param_count) in the layout of params. Unlike the variants, which add into the caller's
// buffer, the reference returns dparams freshly computed from zero.
struct LstmInputGrads {
    std::vector<double> dx, dh0, dc0, dparams;
};

// What a bf16 run of the oracle found: how many of the values it computed and rounded (h, h_raw,
// dh, dgates) lay so near a tie between two bf16 values (TieCounter) that fp32 arithmetic could
// land on its other side. Where there are none, a path
// that rounds at the same points and sums in fp32 rounds each of them as the oracle does and
// agrees with it to fp32 tolerance; at a near tie it may round the other way, and the difference
// of one bf16 rounding then travels through the steps after it.
struct RoundingReport {
    int64_t near_ties = 0;
};

namespace detail {

// Size checks compare against int64_t arithmetic, so the message shows the formula and its value.
inline void check_count(const char* name, size_t got, const char* formula, int64_t want) {
    check(static_cast<int64_t>(got) == want, name, " has ", got, " elements, expected ", formula,
          " = ", want);
}

inline void check_optional_count(const char* name, size_t got, const char* formula, int64_t want) {
    check(got == 0 || static_cast<int64_t>(got) == want, name, " has ", got, " elements, expected ",
          formula, " = ", want, " (or empty for zeros)");
}

inline void validate_inputs(const LstmInputs& in) {
    const Config& cfg = in.config;
    cfg.validate();
    const int64_t T = in.seq_len, N = in.batch;
    check(T >= 1, "seq_len (T) must be >= 1, got ", T);
    check(N >= 1, "batch (N) must be >= 1, got ", N);
    const int64_t I = cfg.input_size, H = cfg.hidden_size, S = cfg.state_size();
    const int64_t cells = cfg.num_cells();
    check_count("x", in.x.size(), "T*N*I", T * N * I);
    check(in.lengths.empty() || static_cast<int64_t>(in.lengths.size()) == N, "lengths has ",
          in.lengths.size(), " elements, expected N = ", N,
          " (or empty when every sequence has length T)");
    for (size_t n = 0; n < in.lengths.size(); ++n) {
        check(in.lengths[n] >= 1, "lengths[", n, "] = ", in.lengths[n], " must be >= 1");
        check(in.lengths[n] <= T, "lengths[", n, "] = ", in.lengths[n], " exceeds T = ", T);
    }
    check_optional_count("h0", in.h0.size(), "L*D*N*S", cells * N * S);
    check_optional_count("c0", in.c0.size(), "L*D*N*H", cells * N * H);
    check_count("params", in.params.size(), "param_count(config)", param_count(cfg));
}

inline int64_t length_of(const LstmInputs& in, int64_t n) {
    return in.lengths.empty() ? in.seq_len : in.lengths[static_cast<size_t>(n)];
}

// The time index of the step-th step a direction takes through a sequence of length len: the
// reverse direction starts at the sequence's own last valid step, not at T-1.
inline int64_t time_of_step(int64_t direction, int64_t step, int64_t len) {
    return direction == 0 ? step : len - 1 - step;
}

// What one (layer, direction) cell computed, indexed by real time t (not by step), so backward can
// look up any step's state. Padded positions stay zero and are never read.
struct CellTrace {
    std::vector<double> gates;  // (T, N, 4H) activated i, f, g, o, as cell_fn.activate gives them
    std::vector<double> c;      // (T, N, H)
    std::vector<double> h_raw;  // (T, N, H) cell_fn.hidden_state, before the projection
    std::vector<double> h;      // (T, N, S) the state: W_hr h_raw with a projection, else h_raw
};

// Everything backward needs from the forward pass.
struct Trace {
    std::vector<std::vector<double>> layer_input;  // per layer l: (T, N, in_l)
    std::vector<CellTrace> cells;                  // per cell layer*D + direction
    LstmOutputs out;
    int64_t near_ties = 0;  // see RoundingReport
};

// h0/c0 of cell `cell` for sequence n, with an empty state meaning zeros: (L*D, N, H) -> (H),
// where H is the state's width (S for h, H for c).
inline std::vector<double> initial_state(const std::vector<double>& state, int64_t cell, int64_t n,
                                         int64_t N, int64_t H) {
    std::vector<double> out(static_cast<size_t>(H), 0.0);
    if (state.empty()) return out;
    for (int64_t j = 0; j < H; ++j) out[j] = state[(cell * N + n) * H + j];
    return out;
}

// What a product reads of an operand v at `precision`.
inline double operand(double v, Precision precision) {
    return precision == Precision::bf16 ? kernels::round_to_bf16(v) : v;
}

// Whether v lies within `margin` bf16 spacings of a tie between its two bf16 neighbours.
inline bool near_bf16_tie(double v, double margin) {
    if (!std::isfinite(v) || v == 0.0) return false;
    const int quantum = kernels::bf16_spacing_exponent(v);
    const double scaled = std::abs(std::ldexp(v, -quantum));
    return std::abs(scaled - std::floor(scaled) - 0.5) < margin;
}

// Counts the values the oracle computes and rounds (h, h_raw, dh, dgates; not the inputs it
// reads) that lie near a bf16 tie (see RoundingReport).
struct TieCounter {
    Precision precision;
    std::atomic<int64_t> count{0};
    void note(double v) {
        if (precision == Precision::bf16 && near_bf16_tie(v, kMargin))
            count.fetch_add(1, std::memory_order_relaxed);
    }
    // The library's fp32 value of h or of a gate gradient differs from the oracle's by a few
    // 1e-8 of itself (sums of few terms, then products and activations, which keep relative
    // error), 1e-5 of a bf16 spacing (2^-8 of the value or more): a tenth of this margin. A value
    // that a sum leaves much smaller than its terms could err by more; the tests' cases show none.
    static constexpr double kMargin = 1e-4;
};

// v with every element rounded as a product operand at `precision`.
inline std::vector<double> operands(std::vector<double> v, Precision precision) {
    for (double& e : v) e = operand(e, precision);
    return v;
}

// The forward pass, keeping every intermediate; lstm_forward and lstm_backward share it so the
// gradient is that of exactly this computation.
inline Trace forward_trace(const LstmInputs& in, const CellFunctions& cell_fn,
                           Precision precision) {
    validate_inputs(in);
    const Config& cfg = in.config;
    const int64_t T = in.seq_len, N = in.batch, H = cfg.hidden_size, G = 4 * H;
    const int64_t S = cfg.state_size(), P = cfg.proj_size;
    const int64_t D = cfg.num_directions(), L = cfg.num_layers, DS = D * S;
    // The weights the products read (the biases are read from in.params, unrounded).
    const std::vector<double> weights = operands(in.params, precision);
    TieCounter ties{precision};

    Trace tr;
    tr.cells.resize(static_cast<size_t>(L * D));
    tr.out.hn.assign(static_cast<size_t>(L * D * N * S), 0.0);
    tr.out.cn.assign(static_cast<size_t>(L * D * N * H), 0.0);

    std::vector<double> input = in.x;
    for (int64_t l = 0; l < L; ++l) {
        const int64_t in_l = cfg.layer_input_size(l);
        const std::vector<double> input_op = operands(input, precision);
        // Zero-initialised so padded positions of y (and of the next layer's input) are exactly 0.
        std::vector<double> output(static_cast<size_t>(T * N * DS), 0.0);
        for (int64_t dir = 0; dir < D; ++dir) {
            const int64_t cell = l * D + dir;
            const CellOffsets off = cell_offsets(cfg, l, dir);
            const double* w_ih = weights.data() + off.weight_ih;  // (4H, in_l)
            const double* w_hh = weights.data() + off.weight_hh;  // (4H, S)
            const double* b_ih = off.has_bias() ? in.params.data() + off.bias_ih : nullptr;
            const double* b_hh = off.has_bias() ? in.params.data() + off.bias_hh : nullptr;
            const double* w_hr = P > 0 ? weights.data() + off.weight_hr : nullptr;  // (P, H)
            CellTrace& ct = tr.cells[static_cast<size_t>(cell)];
            ct.gates.assign(static_cast<size_t>(T * N * G), 0.0);
            ct.c.assign(static_cast<size_t>(T * N * H), 0.0);
            ct.h_raw.assign(static_cast<size_t>(T * N * H), 0.0);
            ct.h.assign(static_cast<size_t>(T * N * S), 0.0);

            // Each sequence writes only its own (t, n) rows.
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
            for (int64_t n = 0; n < N; ++n) {
                const int64_t len = length_of(in, n);
                std::vector<double> h = initial_state(in.h0, cell, n, N, S);
                std::vector<double> c = initial_state(in.c0, cell, n, N, H);
                std::vector<double> h_raw_op(static_cast<size_t>(H));
                for (int64_t step = 0; step < len; ++step) {
                    const int64_t t = time_of_step(dir, step, len);
                    const double* xt = &input_op[(t * N + n) * in_l];
                    const std::vector<double> h_op = operands(h, precision);
                    double* gates = &ct.gates[(t * N + n) * G];
                    // Pre-activations first, in gate blocks i, f, g, o; the cell then replaces
                    // each unit's four with its activated gates.
                    for (int64_t k = 0; k < G; ++k) {
                        double a = b_ih != nullptr ? b_ih[k] + b_hh[k] : 0.0;
                        for (int64_t j = 0; j < in_l; ++j) a += w_ih[k * in_l + j] * xt[j];
                        for (int64_t j = 0; j < S; ++j) a += w_hh[k * S + j] * h_op[j];
                        gates[k] = a;
                    }
                    double* h_raw = &ct.h_raw[(t * N + n) * H];
                    for (int64_t j = 0; j < H; ++j) {
                        const kernels::Gates<double> a = cell_fn.activate(
                            gates[j], gates[H + j], gates[2 * H + j], gates[3 * H + j]);
                        gates[j] = a.i;
                        gates[H + j] = a.f;
                        gates[2 * H + j] = a.g;
                        gates[3 * H + j] = a.o;
                        c[j] = cell_fn.cell_state(a, c[j]);
                        h_raw[j] = cell_fn.hidden_state(a, c[j]);
                        ct.c[(t * N + n) * H + j] = c[j];
                        if (w_hr != nullptr) ties.note(h_raw[j]);
                        h_raw_op[j] = operand(h_raw[j], precision);
                    }
                    for (int64_t p = 0; p < S; ++p) {
                        double v = h_raw[p];
                        if (w_hr != nullptr) {
                            v = 0.0;
                            for (int64_t j = 0; j < H; ++j) v += w_hr[p * H + j] * h_raw_op[j];
                        }
                        ties.note(v);
                        h[p] = v;
                        ct.h[(t * N + n) * S + p] = v;
                        output[(t * N + n) * DS + dir * S + p] = v;
                    }
                }
                for (int64_t p = 0; p < S; ++p) tr.out.hn[(cell * N + n) * S + p] = h[p];
                for (int64_t j = 0; j < H; ++j) tr.out.cn[(cell * N + n) * H + j] = c[j];
            }
        }
        tr.layer_input.push_back(std::move(input));
        input = std::move(output);
    }
    tr.out.y = std::move(input);
    tr.near_ties = ties.count.load();
    return tr;
}

}  // namespace detail

// Forward pass: x (T, N, I), optional h0 (L*D, N, S) / c0 (L*D, N, H), params (param_count) ->
// y (T, N, D*S) with exact zeros at padded positions, hn (L*D, N, S) / cn (L*D, N, H) at each
// sequence's last valid step. S = config.state_size(). `cell_fn` is each unit's math, `precision`
// what the products compute in (see the top of this file).
inline LstmOutputs lstm_forward(const LstmInputs& in, const CellFunctions& cell_fn = pytorch_cell(),
                                Precision precision = Precision::full,
                                RoundingReport* report = nullptr) {
    detail::Trace tr = detail::forward_trace(in, cell_fn, precision);
    if (report != nullptr) report->near_ties = tr.near_ties;
    return std::move(tr.out);
}

// Full backpropagation through time of lstm_forward(in): dy (T, N, D*S), optional dhn
// (L*D, N, S) / dcn (L*D, N, H) -> dx (T, N, I), dh0 (L*D, N, S), dc0 (L*D, N, H), dparams
// (param_count, starting from zero). `cell_fn` is each unit's math, `precision` as for
// lstm_forward; `report` counts the near ties of the forward and the backward pass.
inline LstmInputGrads lstm_backward(const LstmInputs& in, const LstmOutputGrads& grads,
                                    const CellFunctions& cell_fn = pytorch_cell(),
                                    Precision precision = Precision::full,
                                    RoundingReport* report = nullptr) {
    const detail::Trace tr = detail::forward_trace(in, cell_fn, precision);  // validates `in`
    const std::vector<double> weights = detail::operands(in.params, precision);
    const std::vector<double> h0_op = detail::operands(in.h0, precision);
    detail::TieCounter ties{precision};
    auto op = [precision](double v) { return detail::operand(v, precision); };
    const Config& cfg = in.config;
    const int64_t T = in.seq_len, N = in.batch, H = cfg.hidden_size, G = 4 * H;
    const int64_t S = cfg.state_size(), P = cfg.proj_size;
    const int64_t D = cfg.num_directions(), L = cfg.num_layers, DS = D * S;
    detail::check_count("dy", grads.dy.size(), "T*N*D*S", T * N * DS);
    detail::check_optional_count("dhn", grads.dhn.size(), "L*D*N*S", L * D * N * S);
    detail::check_optional_count("dcn", grads.dcn.size(), "L*D*N*H", L * D * N * H);

    LstmInputGrads out;
    out.dh0.assign(static_cast<size_t>(L * D * N * S), 0.0);
    out.dc0.assign(static_cast<size_t>(L * D * N * H), 0.0);
    out.dparams.assign(in.params.size(), 0.0);

    // Gradient with respect to the current layer's output (T, N, D*S). Only valid positions are
    // ever read, which is how dy at padded positions gets ignored.
    std::vector<double> d_output = grads.dy;
    const std::vector<double> zero_state(static_cast<size_t>(S), 0.0);
    for (int64_t l = L - 1; l >= 0; --l) {
        const int64_t in_l = cfg.layer_input_size(l);
        const std::vector<double> input_op =
            detail::operands(tr.layer_input[static_cast<size_t>(l)], precision);
        std::vector<double> d_input(static_cast<size_t>(T * N * in_l), 0.0);
        for (int64_t dir = 0; dir < D; ++dir) {
            const int64_t cell = l * D + dir;
            const CellOffsets off = cell_offsets(cfg, l, dir);
            const double* w_ih = weights.data() + off.weight_ih;                    // (4H, in_l)
            const double* w_hh = weights.data() + off.weight_hh;                    // (4H, S)
            const double* w_hr = P > 0 ? weights.data() + off.weight_hr : nullptr;  // (P, H)
            double* dw_ih = out.dparams.data() + off.weight_ih;
            double* dw_hh = out.dparams.data() + off.weight_hh;
            double* db_ih = off.has_bias() ? out.dparams.data() + off.bias_ih : nullptr;
            double* db_hh = off.has_bias() ? out.dparams.data() + off.bias_hh : nullptr;
            double* dw_hr = P > 0 ? out.dparams.data() + off.weight_hr : nullptr;
            const detail::CellTrace& ct = tr.cells[static_cast<size_t>(cell)];
            const std::vector<double> h_op = detail::operands(ct.h, precision);
            const std::vector<double> h_raw_op = detail::operands(ct.h_raw, precision);
            // The state before step `step` of sequence n as a product reads it: h0 (or zeros)
            // before the first.
            auto h_before = [&](int64_t n, int64_t step, int64_t len) -> const double* {
                if (step > 0) return &h_op[(detail::time_of_step(dir, step - 1, len) * N + n) * S];
                return in.h0.empty() ? zero_state.data() : &h0_op[(cell * N + n) * S];
            };

            // Pass 1, one sequence per thread: the gradients that travel along a sequence (state,
            // gates, input), each step's gate gradient kept (and dh of the projection's output).
            // Sequences touch disjoint elements, so this is the serial computation.
            std::vector<double> da_all(static_cast<size_t>(T * N * G), 0.0);
            std::vector<double> dh_total_all(P > 0 ? static_cast<size_t>(T * N * S) : 0, 0.0);
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
            for (int64_t n = 0; n < N; ++n) {
                const int64_t len = detail::length_of(in, n);
                const std::vector<double> c_init = detail::initial_state(in.c0, cell, n, N, H);
                // Gradients flowing into the state after the step being processed; they start
                // as dhn/dcn because hn/cn are the states after the last step.
                std::vector<double> dh = detail::initial_state(grads.dhn, cell, n, N, S);
                std::vector<double> dc = detail::initial_state(grads.dcn, cell, n, N, H);
                std::vector<double> dh_prev(static_cast<size_t>(S));
                std::vector<double> dh_total(static_cast<size_t>(S)),
                    dh_raw(static_cast<size_t>(H));
                for (int64_t step = len - 1; step >= 0; --step) {
                    const int64_t t = detail::time_of_step(dir, step, len);
                    const double* c_prev = c_init.data();
                    if (step > 0) {
                        const int64_t tp = detail::time_of_step(dir, step - 1, len);
                        c_prev = &ct.c[(tp * N + n) * H];
                    }
                    const double* gates = &ct.gates[(t * N + n) * G];
                    double* da = &da_all[(t * N + n) * G];  // w.r.t. the gate pre-activations
                    // h_t feeds both y (this layer's output) and the next step.
                    for (int64_t p = 0; p < S; ++p)
                        dh_total[p] = dh[p] + d_output[(t * N + n) * DS + dir * S + p];
                    if (w_hr != nullptr) {
                        // h_t = W_hr h_raw: its gradient goes to W_hr (pass 2) and back to h_raw.
                        for (int64_t p = 0; p < P; ++p) {
                            dh_total_all[(t * N + n) * S + p] = dh_total[p];
                            ties.note(dh_total[p]);
                        }
                        for (int64_t j = 0; j < H; ++j) dh_raw[j] = 0.0;
                        for (int64_t p = 0; p < P; ++p)
                            for (int64_t j = 0; j < H; ++j)
                                dh_raw[j] += w_hr[p * H + j] * op(dh_total[p]);
                    } else {
                        for (int64_t j = 0; j < H; ++j) dh_raw[j] = dh_total[j];
                    }
                    for (int64_t j = 0; j < H; ++j) {
                        const kernels::Gates<double> a{gates[j], gates[H + j], gates[2 * H + j],
                                                       gates[3 * H + j]};
                        const kernels::CellGrads<double> d = cell_fn.cell_backward(
                            a, c_prev[j], ct.c[(t * N + n) * H + j], dh_raw[j], dc[j]);
                        da[j] = d.di;
                        da[H + j] = d.df;
                        da[2 * H + j] = d.dg;
                        da[3 * H + j] = d.d_o;
                        dc[j] = d.dc_prev;  // the gradient reaching c at the step before
                    }
                    for (int64_t j = 0; j < S; ++j) dh_prev[j] = 0.0;
                    for (int64_t k = 0; k < G; ++k) {
                        ties.note(da[k]);
                        const double da_k = op(da[k]);
                        for (int64_t j = 0; j < in_l; ++j)
                            d_input[(t * N + n) * in_l + j] += w_ih[k * in_l + j] * da_k;
                        for (int64_t j = 0; j < S; ++j) dh_prev[j] += w_hh[k * S + j] * da_k;
                    }
                    dh = dh_prev;
                }
                for (int64_t p = 0; p < S; ++p) out.dh0[(cell * N + n) * S + p] = dh[p];
                for (int64_t j = 0; j < H; ++j) out.dc0[(cell * N + n) * H + j] = dc[j];
            }

            // Pass 2, one parameter row per thread: each weight gradient element adds its terms
            // in the serial order (sequence by sequence, last step first).
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
            for (int64_t k = 0; k < G; ++k) {
                for (int64_t n = 0; n < N; ++n) {
                    const int64_t len = detail::length_of(in, n);
                    for (int64_t step = len - 1; step >= 0; --step) {
                        const int64_t t = detail::time_of_step(dir, step, len);
                        const double da_k = da_all[(t * N + n) * G + k];
                        const double* xt = &input_op[(t * N + n) * in_l];
                        const double* h_prev = h_before(n, step, len);
                        // Both biases enter the pre-activation with weight one.
                        if (db_ih != nullptr) {
                            db_ih[k] += da_k;
                            db_hh[k] += da_k;
                        }
                        const double da_op = op(da_k);
                        for (int64_t j = 0; j < in_l; ++j) dw_ih[k * in_l + j] += da_op * xt[j];
                        for (int64_t j = 0; j < S; ++j) dw_hh[k * S + j] += da_op * h_prev[j];
                    }
                }
            }
            if (w_hr != nullptr) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
                for (int64_t p = 0; p < P; ++p) {
                    for (int64_t n = 0; n < N; ++n) {
                        const int64_t len = detail::length_of(in, n);
                        for (int64_t step = len - 1; step >= 0; --step) {
                            const int64_t t = detail::time_of_step(dir, step, len);
                            const double dh_p = op(dh_total_all[(t * N + n) * S + p]);
                            const double* h_raw = &h_raw_op[(t * N + n) * H];
                            for (int64_t j = 0; j < H; ++j) dw_hr[p * H + j] += dh_p * h_raw[j];
                        }
                    }
                }
            }
        }
        d_output = std::move(d_input);
    }
    out.dx = std::move(d_output);
    if (report != nullptr) report->near_ties = tr.near_ties + ties.count.load();
    return out;
}

}  // namespace lstm::reference
