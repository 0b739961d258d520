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

// Pre-activations -> activated gates.
template <typename T>
LSTM_HOST_DEVICE Gates<T> activate(T pre_i, T pre_f, T pre_g, T pre_o) {
    return {sigmoid(pre_i), sigmoid(pre_f), tanh_act(pre_g), sigmoid(pre_o)};
}

// c_t = f c_{t-1} + i g
template <typename T>
LSTM_HOST_DEVICE T cell_state(const Gates<T>& a, T c_prev) {
    return a.f * c_prev + a.i * a.g;
}

// h_t = o tanh(c_t)
template <typename T>
LSTM_HOST_DEVICE T hidden_state(const Gates<T>& a, T c) {
    return a.o * tanh_act(c);
}

// Gradients of one unit's pre-activations and of c_{t-1}.
template <typename T>
struct CellGrads {
    T di, df, dg, d_o;  // w.r.t. pre-activations
    T dc_prev;          // w.r.t. c_{t-1}
};

// Backward of one unit. dh: total gradient reaching h_t (from y_t and from step t+1); dc: gradient
// reaching c_t from step t+1 (or dcn). Uses the activated gates and c_t saved by forward.
template <typename T>
LSTM_HOST_DEVICE CellGrads<T> cell_backward(const Gates<T>& a, T c_prev, T c, T dh, T dc) {
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

}  // namespace lstm::kernels
