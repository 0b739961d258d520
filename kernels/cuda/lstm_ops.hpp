#pragma once

// The per-element bodies of the CUDA LSTM kernels. Each op is a plain struct of pointers and
// sizes whose operator()(i) does the work of element i of a 1-D grid of `count` elements; the
// .cu file wraps every op in one grid-stride __global__ kernel, and the CPU tests call the very
// same operator() in a plain loop. No CUDA header is needed here (LSTM_HOST_DEVICE comes from
// gates.hpp), so the arithmetic and the index math of the GPU path are tested without a GPU.
//
// Layout vocabulary (see lstm/variants/cuda_common.hpp): "compact" arrays hold one row per valid
// frame, time-major and, inside a step, in length-sorted order: frame (t, r) of sorted row
// r < active[t] is row offset[t] + r. "Sorted" (N, W) arrays hold one row per sequence in sorted
// order: row r is original batch entry order[r]. All pointers are device memory on the GPU (host
// memory in the CPU emulation). G = 4H, gate blocks i, f, g, o.

#include <cstdint>

#include "kernels/common/gates.hpp"

namespace lstm::kernels::cuda {

// ------------------------------------------------------------------------------------------------
// Moving rows between the caller's padded (T, N, W) / (N, W) layouts and the compact / sorted ones
// ------------------------------------------------------------------------------------------------

// dst compact (S, W) <- src (T, N, W) padded: row k copies src row frame[k] (= t * N + n).
// count = S * W; overwrites.
template <typename T>
struct GatherFrames {
    const T* src;
    const int64_t* frame;  // (S) source row of each compact row
    int64_t width;
    T* dst;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t k = i / width, j = i - k * width;
        dst[i] = src[frame[k] * width + j];
    }
};

// dst (T, N, W) padded <- src compact (S, W); padded positions (t >= length) get 0.
// count = T * N * W; overwrites every element.
template <typename T>
struct UnpackFrames {
    const T* src;
    const int64_t* pos;     // (N) sorted row of original entry n
    const int64_t* active;  // (T) rows valid at step t
    const int64_t* offset;  // (T) first compact row of step t
    int64_t batch, width;
    T* dst;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t row = i / width, j = i - row * width;
        const int64_t t = row / batch, n = row - t * batch;
        const int64_t r = pos[n];
        dst[i] = r < active[t] ? src[(offset[t] + r) * width + j] : T(0);
    }
};

// dst sorted (N, W) <- src original (N, W); a null src gives zeros (omitted h0/c0/dhn/dcn).
// count = N * W; overwrites.
template <typename T>
struct GatherRows {
    const T* src;  // may be null
    const int64_t* order;
    int64_t width;
    T* dst;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / width, j = i - r * width;
        dst[i] = src ? src[order[r] * width + j] : T(0);
    }
};

// dst original (N, W) <- src sorted (N, W). count = N * W; overwrites.
template <typename T>
struct ScatterRows {
    const T* src;
    const int64_t* order;
    int64_t width;
    T* dst;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / width, j = i - r * width;
        dst[order[r] * width + j] = src[i];
    }
};

// dst[i] = value. count = number of elements; overwrites.
template <typename T>
struct Fill {
    T* dst;
    T value;
    LSTM_HOST_DEVICE void operator()(int64_t i) const { dst[i] = value; }
};

// c_{t-1} of sorted row r at one step: rows that were running at the previous step take it from
// that step's compact c (c_prev_step, ld H), rows whose sequence starts here from the initial
// state (c_init, sorted (N, H)). Only the reverse direction starts sequences after its first step.
template <typename T>
LSTM_HOST_DEVICE T previous_cell(const T* c_prev_step, int64_t rows_prev, const T* c_init,
                                 int64_t r, int64_t u, int64_t hidden) {
    return r < rows_prev ? c_prev_step[r * hidden + u] : c_init[r * hidden + u];
}

// ------------------------------------------------------------------------------------------------
// `basic`: one step's element-wise work as separate passes (PyTorch's LSTMCell-basic)
// ------------------------------------------------------------------------------------------------

// gates (rows, G) += b_ih + b_hh broadcast over rows. count = rows * G; adds.
template <typename T>
struct AddBias {
    T* gates;
    const T* b_ih;  // (G)
    const T* b_hh;  // (G)
    int64_t gate_cols;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t j = i % gate_cols;
        gates[i] += b_ih[j] + b_hh[j];
    }
};

// gates (rows, G): pre-activations -> activations in place (tanh on the g block, sigmoid on the
// others). count = rows * G.
template <typename T>
struct Activate {
    T* gates;
    int64_t hidden;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t j = i % (4 * hidden);
        gates[i] = (j >= 2 * hidden && j < 3 * hidden) ? tanh_act(gates[i]) : sigmoid(gates[i]);
    }
};

// c = f c_{t-1} + i g from activated gates (rows, G); c_run (rows, H) holds c_{t-1} and is
// overwritten with c_t; c_out (rows, H, compact; null in inference) gets a copy. count = rows * H.
template <typename T>
struct UpdateCell {
    const T* gates;
    int64_t hidden;
    T* c_run;
    T* c_out;  // may be null
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        const T* a = gates + r * 4 * hidden;
        const Gates<T> g{a[u], a[hidden + u], a[2 * hidden + u], a[3 * hidden + u]};
        const T c = cell_state(g, c_run[i]);
        c_run[i] = c;
        if (c_out) c_out[i] = c;
    }
};

// h = o tanh(c) from gates (rows, G) and c_run (rows, H, already c_t). h_run (rows, H) holds
// h_{t-1}: it is first saved into h_prev_out (rows, H, compact; null in inference), then
// overwritten with h_t; out (rows, ld_out) gets h_t too (the layer output). count = rows * H;
// overwrites. With a projection, o tanh(c) is only h_raw: out is then the (rows, H) h_raw buffer
// and h_run and h_prev_out are null, since the carried state is the projected h (CarryHidden).
template <typename T>
struct UpdateHidden {
    const T* gates;
    int64_t hidden;
    const T* c_run;
    T* h_run;       // may be null (projection)
    T* h_prev_out;  // may be null
    T* out;
    int64_t ld_out;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        const T h = gates[r * 4 * hidden + 3 * hidden + u] * tanh_act(c_run[i]);
        if (h_run) {
            if (h_prev_out) h_prev_out[i] = h_run[i];
            h_run[i] = h;
        }
        out[r * ld_out + u] = h;
    }
};

// With a projection, after the GEMM h (rows, ld_h) = h_raw W_hr^T has written this step's output:
// h_run (rows, S) holds h_{t-1}, which is first saved into h_prev_out (rows, S, compact; null in
// inference), then overwritten with h_t read back from h. count = rows * S; overwrites.
template <typename T>
struct CarryHidden {
    const T* h;
    int64_t ld_h;
    int64_t width;  // S = proj_size
    T* h_run;
    T* h_prev_out;  // may be null
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / width, u = i - r * width;
        if (h_prev_out) h_prev_out[i] = h_run[i];
        h_run[i] = h[r * ld_h + u];
    }
};

// dh (rows, H) += d_out (rows, ld_dout): the gradient from this step's output joins the one
// carried from the step after. count = rows * H; adds.
template <typename T>
struct AddOutputGrad {
    T* dh;
    const T* d_out;
    int64_t ld_dout;
    int64_t hidden;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        dh[i] += d_out[r * ld_dout + u];
    }
};

// dst (rows, W) = dh_carry (rows, W) + d_out (rows, ld_dout): the total gradient reaching a
// projected h_t (W = S), kept per frame (dst is compact) for the weight gradient of W_hr.
// count = rows * W; overwrites.
template <typename T>
struct SumOutputGrad {
    const T* dh_carry;
    const T* d_out;
    int64_t ld_dout;
    int64_t width;
    T* dst;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / width, u = i - r * width;
        dst[i] = dh_carry[i] + d_out[r * ld_dout + u];
    }
};

// Backward of h = o tanh(c): gates (rows, G) holds the activated gates and gets the o block of
// dgates; dc (rows, H) += dh o (1 - tanh(c)^2). c (rows, H) is c_t. count = rows * H.
template <typename T>
struct HiddenBackward {
    T* gates;
    const T* c;
    const T* dh;
    T* dc;
    int64_t hidden;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        T* og = gates + r * 4 * hidden + 3 * hidden + u;
        const T o = *og;
        const T tanh_c = tanh_act(c[i]);
        *og = dh[i] * tanh_c * sigmoid_grad_from_output(o);
        dc[i] += dh[i] * o * tanh_grad_from_output(tanh_c);
    }
};

// Backward of c = f c_{t-1} + i g: gates (rows, G) gets its i, f, g blocks replaced by dgates
// (all three read before any is written); dc (rows, H) holds the total gradient reaching c_t and
// is overwritten with the one reaching c_{t-1}. count = rows * H.
template <typename T>
struct CellBackward {
    T* gates;
    const T* c_prev_step;  // compact c of the previous step (rows_prev rows, ld H)
    int64_t rows_prev;
    const T* c_init;  // sorted (N, H) initial c
    T* dc;
    int64_t hidden;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        T* a = gates + r * 4 * hidden;
        const T ig = a[u], fg = a[hidden + u], gg = a[2 * hidden + u];
        const T d = dc[i];
        const T cp = previous_cell(c_prev_step, rows_prev, c_init, r, u, hidden);
        a[u] = d * gg * sigmoid_grad_from_output(ig);
        a[hidden + u] = d * cp * sigmoid_grad_from_output(fg);
        a[2 * hidden + u] = d * ig * tanh_grad_from_output(gg);
        dc[i] = d * fg;
    }
};

// ------------------------------------------------------------------------------------------------
// `fused`: one step's element-wise work in one pass
// ------------------------------------------------------------------------------------------------

// One unit of one row: gates (rows, G) holds x W_ih^T + h_{t-1} W_hh^T and is overwritten with the
// activated gates (what backward reads); the biases are added here. c_run / h_run (rows, H) hold
// c_{t-1} / h_{t-1} and are overwritten with c_t / h_t; c_out and h_prev_out (rows, H, compact;
// null in inference) get c_t and h_{t-1}; out (rows, ld_out) gets h_t. count = rows * H.
// With a projection, out is the (rows, H) h_raw buffer and h_run and h_prev_out are null (as in
// UpdateHidden; CarryHidden carries the projected h).
template <typename T>
struct FusedForward {
    T* gates;
    const T* b_ih;  // (G); null with b_hh for a config without biases
    const T* b_hh;
    int64_t hidden;
    T* c_run;
    T* h_run;       // may be null (projection)
    T* c_out;       // may be null
    T* h_prev_out;  // may be null
    T* out;
    int64_t ld_out;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        T* g = gates + r * 4 * hidden;
        const int64_t ji = u, jf = hidden + u, jg = 2 * hidden + u, jo = 3 * hidden + u;
        const Gates<T> a =
            activate(g[ji] + bias(ji), g[jf] + bias(jf), g[jg] + bias(jg), g[jo] + bias(jo));
        g[ji] = a.i;
        g[jf] = a.f;
        g[jg] = a.g;
        g[jo] = a.o;
        const T c = cell_state(a, c_run[i]);
        const T h = hidden_state(a, c);
        c_run[i] = c;
        if (c_out) c_out[i] = c;
        if (h_run) {
            if (h_prev_out) h_prev_out[i] = h_run[i];
            h_run[i] = h;
        }
        out[r * ld_out + u] = h;
    }
    LSTM_HOST_DEVICE T bias(int64_t j) const { return b_ih != nullptr ? b_ih[j] + b_hh[j] : T(0); }
};

// Backward of one unit of one row: gates (rows, G) holds the activated gates and is overwritten
// with dgates (w.r.t. pre-activations); c (rows, H) is c_t; dh_carry (rows, H) the gradient
// reaching h_t from the step after (read only: the recurrent GEMM overwrites it next); d_out
// (rows, ld_dout) the one from the output; dc (rows, H) the gradient reaching c_t, overwritten with
// the one reaching c_{t-1}. count = rows * H. With a projection, dh_carry is the whole gradient
// reaching h_raw = o tanh(c) (dh W_hr, already including the output's) and d_out is null.
template <typename T>
struct FusedBackward {
    T* gates;
    const T* c;
    const T* c_prev_step;  // compact c of the previous step (rows_prev rows, ld H)
    int64_t rows_prev;
    const T* c_init;  // sorted (N, H) initial c
    const T* dh_carry;
    const T* d_out;  // may be null (projection)
    int64_t ld_dout;
    T* dc;
    int64_t hidden;
    LSTM_HOST_DEVICE void operator()(int64_t i) const {
        const int64_t r = i / hidden, u = i - r * hidden;
        T* g = gates + r * 4 * hidden;
        const Gates<T> a{g[u], g[hidden + u], g[2 * hidden + u], g[3 * hidden + u]};
        const T cp = previous_cell(c_prev_step, rows_prev, c_init, r, u, hidden);
        const T dh = d_out ? dh_carry[i] + d_out[r * ld_dout + u] : dh_carry[i];
        const CellGrads<T> d = cell_backward(a, cp, c[i], dh, dc[i]);
        g[u] = d.di;
        g[hidden + u] = d.df;
        g[2 * hidden + u] = d.dg;
        g[3 * hidden + u] = d.d_o;
        dc[i] = d.dc_prev;
    }
};

}  // namespace lstm::kernels::cuda
