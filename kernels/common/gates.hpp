#pragma once

// LSTM gate arithmetic for one hidden unit, shared by the CPU variants and the CUDA kernels, so
// that the CPU tests exercise the very arithmetic the GPU runs. Gate order is PyTorch's: i, f, g,
// o.

#include <cmath>

#if defined(__CUDACC__)
#define LSTM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LSTM_HOST_DEVICE inline
#endif

namespace lstm::kernels {

// 1 / (1 + e^-x): for x -> -inf, e^-x overflows to +inf and the quotient is exactly 0; for
// x -> +inf it is exactly 1. No branch and no NaN for any finite or infinite input.
LSTM_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
LSTM_HOST_DEVICE double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

LSTM_HOST_DEVICE float tanh_act(float x) { return tanhf(x); }
LSTM_HOST_DEVICE double tanh_act(double x) { return tanh(x); }

// Derivatives expressed through the activation's output, which is what the reserve stores.
template <typename T>
LSTM_HOST_DEVICE T sigmoid_grad_from_output(T s) {
    return s * (T(1) - s);
}
template <typename T>
LSTM_HOST_DEVICE T tanh_grad_from_output(T t) {
    return T(1) - t * t;
}

// Activated gates of one unit.
template <typename T>
struct Gates {
    T i, f, g, o;
};

// Gradients of one unit's pre-activations and of c_{t-1}.
template <typename T>
struct CellGrads {
    T di, df, dg, d_o;  // w.r.t. pre-activations
    T dc_prev;          // w.r.t. c_{t-1}
};

// A cell is a type with these static members, every one a function of one hidden unit, so the
// same description compiles into the CPU passes, the CUDA kernels (LSTM_HOST_DEVICE) and, at
// double, the oracle (lstm/cell.hpp's cell_functions<Cell>()):
//   name                                     a constexpr const char*
//   activate(pre_i, pre_f, pre_g, pre_o)     -> Gates<T>, what the reserve stores
//   cell_state(gates, c_prev)                -> c_t
//   hidden_state(gates, c_t)                 -> h_t (before any projection)
//   cell_backward(gates, c_prev, c_t, dh, dc) -> CellGrads<T>
// Backward sees only what forward saved (the activated gates and c_t), so derivatives are written
// through the activations' outputs. A cell with parameters of its own (peepholes, a layer norm)
// would take them as one more argument, a pointer to its slice of the unit's parameters; no
// built-in cell has any yet.
//
// PyTorch's nn.LSTM cell, the library's own: the arithmetic below is the bits every variant's
// record in tests/data/bit_baseline.txt was made with, so its operation order is fixed.
struct PyTorchCell {
    static constexpr const char* name = "pytorch";

    template <typename T>
    static LSTM_HOST_DEVICE Gates<T> activate(T pre_i, T pre_f, T pre_g, T pre_o) {
        return {sigmoid(pre_i), sigmoid(pre_f), tanh_act(pre_g), sigmoid(pre_o)};
    }

    // c_t = f c_{t-1} + i g
    template <typename T>
    static LSTM_HOST_DEVICE T cell_state(const Gates<T>& a, T c_prev) {
        return a.f * c_prev + a.i * a.g;
    }

    // h_t = o tanh(c_t)
    template <typename T>
    static LSTM_HOST_DEVICE T hidden_state(const Gates<T>& a, T c) {
        return a.o * tanh_act(c);
    }

    // dh: total gradient reaching h_t (from y_t and from step t+1); dc: gradient reaching c_t
    // from step t+1 (or dcn).
    template <typename T>
    static LSTM_HOST_DEVICE CellGrads<T> cell_backward(const Gates<T>& a, T c_prev, T c, T dh,
                                                       T dc) {
        const T tanh_c = tanh_act(c);
        const T dc_total = dc + dh * a.o * tanh_grad_from_output(tanh_c);
        CellGrads<T> out;
        out.d_o = dh * tanh_c * sigmoid_grad_from_output(a.o);
        out.di = dc_total * a.g * sigmoid_grad_from_output(a.i);
        out.df = dc_total * c_prev * sigmoid_grad_from_output(a.f);
        out.dg = dc_total * a.i * tanh_grad_from_output(a.g);
        out.dc_prev = dc_total * a.f;
        return out;
    }
};

// The built-in cell as free functions, which the CPU passes and the CUDA kernels call.
template <typename T>
LSTM_HOST_DEVICE Gates<T> activate(T pre_i, T pre_f, T pre_g, T pre_o) {
    return PyTorchCell::activate(pre_i, pre_f, pre_g, pre_o);
}

template <typename T>
LSTM_HOST_DEVICE T cell_state(const Gates<T>& a, T c_prev) {
    return PyTorchCell::cell_state(a, c_prev);
}

template <typename T>
LSTM_HOST_DEVICE T hidden_state(const Gates<T>& a, T c) {
    return PyTorchCell::hidden_state(a, c);
}

template <typename T>
LSTM_HOST_DEVICE CellGrads<T> cell_backward(const Gates<T>& a, T c_prev, T c, T dh, T dc) {
    return PyTorchCell::cell_backward(a, c_prev, c, dh, dc);
}

}  // namespace lstm::kernels
