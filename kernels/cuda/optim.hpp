#pragma once

// The per-element updates of SGD and Adam (torch.optim's rules), written once as host/device
// functions: the CPU optimizers in lstm/nn/optim.hpp run them in their loops and the CUDA kernels
// in optim.cu run them per thread, so the CPU tests exercise the very arithmetic the GPU runs.
// This header includes no CUDA header; the launchers are defined in optim.cu (lstm_cuda only).

#include <cmath>
#include <cstdint>

#include "kernels/common/gates.hpp"  // LSTM_HOST_DEVICE
#include "kernels/cuda/launch.hpp"

namespace lstm::kernels {

LSTM_HOST_DEVICE float optim_sqrt(float x) { return sqrtf(x); }
LSTM_HOST_DEVICE double optim_sqrt(double x) { return sqrt(x); }

// SGD's hyperparameters for one step, already in T (PyTorch casts its Python scalars to the
// tensor's type).
template <typename T>
struct SgdCoefficients {
    T lr;
    T weight_decay;
    T momentum;
    T keep;  // 1 - dampening
    bool use_momentum;
    bool nesterov;
    bool first;  // PyTorch seeds the momentum buffer with the first step's d, undamped
};

// One element of SGD: p[i] is updated in place; buf[i] (the momentum buffer) is read and written
// only when c.use_momentum (buf may be null otherwise). All pointers in one memory space.
template <typename T>
LSTM_HOST_DEVICE void sgd_element(int64_t i, T* p, const T* g, T* buf,
                                  const SgdCoefficients<T>& c) {
    T d = g[i];
    if (c.weight_decay != T(0)) d += c.weight_decay * p[i];
    if (c.use_momentum) {
        buf[i] = c.first ? d : c.momentum * buf[i] + c.keep * d;
        d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
    }
    p[i] -= c.lr * d;
}

// Adam's per-step scalars: the bias corrections of step s are computed in double on the host,
// like PyTorch's Python floats, then cast to T.
template <typename T>
struct AdamCoefficients {
    T step_size;         // lr / (1 - beta1^s)
    T correction2_sqrt;  // sqrt(1 - beta2^s)
    T one_minus_beta1;   // torch.lerp's weight w for the first moment
    T lerp_rest;         // 1 - w computed in T, as torch.lerp does
    bool lerp_from_m;    // w < 0.5: torch.lerp steps from m, else back from d
    T beta2;
    T one_minus_beta2;
    T eps;
    T weight_decay;  // L2 term added to the gradient (Adam); 0 when decoupled
    T decay;         // factor on p before the update: 1 - lr * weight_decay (AdamW), else 1
};

// The coefficients of Adam step `step` (1 for the first update); `decoupled` gives AdamW's
// weight decay (torch.optim.AdamW: p *= 1 - lr * weight_decay, then Adam without the L2 term).
template <typename T>
inline AdamCoefficients<T> adam_coefficients(double lr, double beta1, double beta2, double eps,
                                             double weight_decay, bool decoupled, int64_t step) {
    const double s = static_cast<double>(step);
    const double correction1 = 1.0 - std::pow(beta1, s);
    const double correction2 = 1.0 - std::pow(beta2, s);
    AdamCoefficients<T> c;
    c.step_size = static_cast<T>(lr / correction1);
    c.correction2_sqrt = static_cast<T>(std::sqrt(correction2));
    c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
    c.lerp_rest = T(1) - c.one_minus_beta1;
    c.lerp_from_m = c.one_minus_beta1 < T(0.5);
    c.beta2 = static_cast<T>(beta2);
    c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
    c.eps = static_cast<T>(eps);
    c.weight_decay = static_cast<T>(decoupled ? 0.0 : weight_decay);
    c.decay = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0);
    return c;
}

// One element of Adam: p[i], m[i] (first moment) and v[i] (second moment) are updated in place
// from g[i]. All pointers in one memory space.
template <typename T>
LSTM_HOST_DEVICE void adam_element(int64_t i, T* p, const T* g, T* m, T* v,
                                   const AdamCoefficients<T>& c) {
    if (c.decay != T(1)) p[i] *= c.decay;
    T d = g[i];
    if (c.weight_decay != T(0)) d += c.weight_decay * p[i];
    // m.lerp_(d, 1 - beta1) as PyTorch 2 writes it (1.13's beta1 m + (1 - beta1) d agrees to
    // rounding). lerp's two forms keep both ends exact: only stepping from m lost d when beta1 = 0
    // (m + 1 * (d - m) rounds away a d far smaller than m).
    m[i] = c.lerp_from_m ? m[i] + c.one_minus_beta1 * (d - m[i]) : d - (d - m[i]) * c.lerp_rest;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * d * d;
    p[i] -= c.step_size * (m[i] / (optim_sqrt(v[i]) / c.correction2_sqrt + c.eps));
}

namespace cuda {

// Launchers (optim.cu) in the convention of kernels/cuda/launch.hpp: one element-wise kernel
// over n elements. p, g, buf / m / v are device arrays of n elements; p and the moment buffers
// are updated in place.
template <typename T>
LaunchStatus launch_sgd_step(int64_t n, T* p, const T* g, T* buf, const SgdCoefficients<T>& c,
                             void* stream);
template <typename T>
LaunchStatus launch_adam_step(int64_t n, T* p, const T* g, T* m, T* v, const AdamCoefficients<T>& c,
                              void* stream);

}  // namespace cuda

}  // namespace lstm::kernels
