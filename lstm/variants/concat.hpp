#pragma once

// `concat` (cpu): the worked example of a step engine (docs/architecture.md, "Write a step
// engine"). Each step is ONE product, gates (rows, 4H) = [x_t, h_{t-1}, 1] W^T with
// W = [W_ih | W_hh | b_ih + b_hh] (4H, K) packed when a cell's first step comes, then the
// cell's element-wise math from kernels/common/gates.hpp, the description the oracle reads too.
// Backward per step: the cell's backward, then one product for d[x_t, h_{t-1}] = dgates W, and
// the weight gradient dW += dgates^T [x_t, h_{t-1}, 1], unpacked into dparams after a cell's
// last step. With a projection (proj_size P) the step's h = h_raw W_hr^T is a second product.
// Everything else (layers, directions, lengths, reserve, split backward) is the stack loop's
// (lstm/stack_loop.hpp).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/common/gates.hpp"
#include "kernels/cpu/gemm.hpp"
#include "lstm/stack_loop.hpp"

namespace lstm::cpu {

template <typename T>
class ConcatEngine {
public:
    static constexpr const char* kName = "concat";
    // The element-wise math of every step, and what the oracle checks it against: change it here
    // (a type with the statics kernels/common/gates.hpp lists) and the tests follow.
    using Cell = kernels::PyTorchCell;
    // Every nn.LSTM option.
    static std::optional<std::string> supports(const Config&) { return std::nullopt; }
    static std::string describe() {
        return std::string("one Eigen GEMM over [x_t, h_{t-1}, 1] per step, compiled for ") +
               kernels::cpu::gemm_instruction_sets();
    }

    ConcatEngine(const Config& config, int64_t seq_len, int64_t batch)
        : config_(config),
          seq_len_(seq_len),
          batch_(batch),
          hidden_(config.hidden_size),
          hs_(config.state_size()),
          proj_(config.proj_size) {}

    void carve_workspace(detail::Carver& carve) {
        const int64_t widest = std::max(config_.input_size, config_.output_size());
        const int64_t k = widest + hs_ + 1;
        w_ = carve.take<T>(4 * hidden_ * k);
        dw_ = carve.take<T>(4 * hidden_ * k);
        a_ = carve.take<T>(batch_ * k);
        da_ = carve.take<T>(batch_ * k);
        gates_ = carve.take<T>(batch_ * 4 * hidden_);
        h_raw_ = carve.take<T>(batch_ * hidden_);
        dh_ = carve.take<T>(batch_ * hs_);
    }

    // Per cell and frame (L*D, T, N, ...): the activated gates (backward overwrites the valid
    // rows with dgates) and c_t; with a projection also h_raw = o * tanh(c_t) and backward's
    // gradient w.r.t. h_t, the partners of dW_hr.
    void carve_reserve(detail::Carver& carve) {
        const int64_t frames = config_.num_cells() * seq_len_ * batch_;
        rs_gates_ = carve.take<T>(frames * 4 * hidden_);
        rs_cell_ = carve.take<T>(frames * hidden_);
        rs_h_raw_ = carve.take<T>(proj_ > 0 ? frames * hidden_ : 0);
        rs_dh_ = carve.take<T>(proj_ > 0 ? frames * hs_ : 0);
    }

    void forward_step(const ForwardStep<T>& st) {
        const int64_t k = width(st), g4 = 4 * hidden_;
        if (st.s == 0) pack_weights(st.params, st);
        fill_inputs(st, st.x, st.h);
        T* gates = st.training ? rs_gates_ + st.frame * g4 : gates_;
        kernels::cpu::gemm(false, true, st.rows, g4, k, T(1), a_, k, w_, k, T(0), gates, g4);
        // Without a projection h goes straight to the output; with one, h_raw to its buffer.
        T* h_raw = proj_ == 0 ? st.out : st.training ? rs_h_raw_ + st.frame * hidden_ : h_raw_;
        const int64_t ld_raw = proj_ == 0 ? st.out_width : hidden_;
        for (int64_t r = 0; r < st.rows; ++r) {
            T* g = gates + r * g4;
            T* c = st.c + r * hidden_;
            for (int64_t j = 0; j < hidden_; ++j) {
                const kernels::Gates<T> a =
                    Cell::activate(g[j], g[hidden_ + j], g[2 * hidden_ + j], g[3 * hidden_ + j]);
                g[j] = a.i;
                g[hidden_ + j] = a.f;
                g[2 * hidden_ + j] = a.g;
                g[3 * hidden_ + j] = a.o;
                c[j] = Cell::cell_state(a, c[j]);
                h_raw[r * ld_raw + j] = Cell::hidden_state(a, c[j]);
            }
            if (st.training)
                std::memcpy(rs_cell_ + (st.frame + r) * hidden_, c, sizeof(T) * hidden_);
        }
        if (proj_ > 0)
            kernels::cpu::gemm(false, true, st.rows, proj_, hidden_, T(1), h_raw, hidden_,
                               st.params + st.p.weight_hr, hidden_, T(0), st.out, st.out_width);
        for (int64_t r = 0; r < st.rows; ++r)
            std::memcpy(st.h + r * hs_, st.out + r * st.out_width, sizeof(T) * hs_);
    }

    void backward_step(const BackwardStep<T>& st) {
        const int64_t k = width(st), g4 = 4 * hidden_, in = st.in_width;
        if (st.s == seq_len_ - 1) pack_weights(st.params, st);
        T* gates = rs_gates_ + st.frame * g4;  // activated gates in, dgates out
        const T* cells = rs_cell_ + st.frame * hidden_;
        const T* cells_before = rs_cell_ + st.frame_prev * hidden_;
        // The total gradient reaching h_t, and with a projection the one reaching h_raw.
        T* dh = proj_ > 0 ? rs_dh_ + st.frame * hs_ : dh_;
        for (int64_t r = 0; r < st.rows; ++r)
            for (int64_t q = 0; q < hs_; ++q)
                dh[r * hs_ + q] = st.dh[r * hs_ + q] + st.d_out[r * st.out_width + q];
        const T* dh_raw = dh;
        if (proj_ > 0) {
            kernels::cpu::gemm(false, false, st.rows, hidden_, proj_, T(1), dh, proj_,
                               st.params + st.p.weight_hr, hidden_, T(0), h_raw_, hidden_);
            dh_raw = h_raw_;
        }
        for (int64_t r = 0; r < st.rows; ++r) {
            // c_{t-1}: the step before's for rows that ran it, c0 where a sequence starts.
            const T* c_prev = (r < st.rows_prev ? cells_before : st.c_init) + r * hidden_;
            T* g = gates + r * g4;
            for (int64_t j = 0; j < hidden_; ++j) {
                const kernels::Gates<T> a{g[j], g[hidden_ + j], g[2 * hidden_ + j],
                                          g[3 * hidden_ + j]};
                const kernels::CellGrads<T> d =
                    Cell::cell_backward(a, c_prev[j], cells[r * hidden_ + j],
                                        dh_raw[r * hidden_ + j], st.dc[r * hidden_ + j]);
                g[j] = d.di;
                g[hidden_ + j] = d.df;
                g[2 * hidden_ + j] = d.dg;
                g[3 * hidden_ + j] = d.d_o;
                st.dc[r * hidden_ + j] = d.dc_prev;
            }
        }
        // d[x_t, h_{t-1}, 1] = dgates W: the h part is the carry, the x part joins d_in.
        kernels::cpu::gemm(false, false, st.rows, k, g4, T(1), gates, g4, w_, k, T(0), da_, k);
        for (int64_t r = 0; r < st.rows; ++r) {
            const T* da = da_ + r * k;
            std::memcpy(st.dh + r * hs_, da + in, sizeof(T) * hs_);
            if (st.d_in)
                for (int64_t q = 0; q < in; ++q) st.d_in[r * in + q] += da[q];
        }
    }

    // dW (4H, K) += dgates^T [x_t, h_{t-1}, 1] over a cell's steps (T - 1 down to 0), added into
    // dparams after its last; with a projection dW_hr += dh^T h_raw, step by step.
    void weight_step(const WeightStep<T>& st) {
        const int64_t k = width(st), g4 = 4 * hidden_;
        if (st.s == seq_len_ - 1) std::fill(dw_, dw_ + g4 * k, T(0));
        fill_inputs(st, st.x, st.h_prev);
        kernels::cpu::gemm(true, false, g4, k, st.rows, T(1), rs_gates_ + st.frame * g4, g4, a_, k,
                           T(1), dw_, k);
        if (proj_ > 0)
            kernels::cpu::gemm(true, false, proj_, hidden_, st.rows, T(1), rs_dh_ + st.frame * hs_,
                               hs_, rs_h_raw_ + st.frame * hidden_, hidden_, T(1),
                               st.dparams + st.p.weight_hr, hidden_);
        if (st.s != 0) return;
        const CellOffsets& p = st.p;
        const int64_t in = st.in_width;
        for (int64_t row = 0; row < g4; ++row) {
            const T* dw = dw_ + row * k;
            for (int64_t q = 0; q < in; ++q) st.dparams[p.weight_ih + row * in + q] += dw[q];
            for (int64_t q = 0; q < hs_; ++q) st.dparams[p.weight_hh + row * hs_ + q] += dw[in + q];
            if (p.has_bias()) {
                st.dparams[p.bias_ih + row] += dw[in + hs_];
                st.dparams[p.bias_hh + row] += dw[in + hs_];
            }
        }
    }

private:
    // K: the columns of [x_t, h_{t-1}, 1] for this layer (no 1 without biases).
    int64_t width(const CellStep& st) const { return st.in_width + hs_ + (config_.bias ? 1 : 0); }

    // w_ (4H, K) <- [W_ih | W_hh | b_ih + b_hh] of the step's cell; params flat, host.
    void pack_weights(const T* params, const CellStep& st) {
        const CellOffsets& p = st.p;
        const int64_t k = width(st), in = st.in_width;
        for (int64_t row = 0; row < 4 * hidden_; ++row) {
            T* w = w_ + row * k;
            std::memcpy(w, params + p.weight_ih + row * in, sizeof(T) * in);
            std::memcpy(w + in, params + p.weight_hh + row * hs_, sizeof(T) * hs_);
            if (p.has_bias()) w[in + hs_] = params[p.bias_ih + row] + params[p.bias_hh + row];
        }
    }

    // a_ (rows, K) <- [x, h, 1]: x (rows, in_width) and h (rows, S), host.
    void fill_inputs(const CellStep& st, const T* x, const T* h) {
        const int64_t k = width(st), in = st.in_width;
        for (int64_t r = 0; r < st.rows; ++r) {
            T* a = a_ + r * k;
            std::memcpy(a, x + r * in, sizeof(T) * in);
            std::memcpy(a + in, h + r * hs_, sizeof(T) * hs_);
            if (config_.bias) a[in + hs_] = T(1);
        }
    }

    const Config& config_;
    int64_t seq_len_, batch_, hidden_, hs_, proj_;  // hs_: S, the width of h
    T* w_ = nullptr;                                // (4H, K) this cell's packed weights
    T* dw_ = nullptr;     // (4H, K) this cell's weight gradient, summed over its steps
    T* a_ = nullptr;      // (N, K) one step's [x_t, h_{t-1}, 1]
    T* da_ = nullptr;     // (N, K) backward: its gradient
    T* gates_ = nullptr;  // (N, 4H) inference: one step's gates
    // (N, H) with a projection: one step's h_raw (inference) or its gradient (backward).
    T* h_raw_ = nullptr;
    T* dh_ = nullptr;  // (N, S) backward without a projection: the gradient reaching h_t
    T* rs_gates_ = nullptr;
    T* rs_cell_ = nullptr;
    T* rs_h_raw_ = nullptr;
    T* rs_dh_ = nullptr;
};

using ConcatVariant = EngineVariant<ConcatEngine>;

}  // namespace lstm::cpu
