#pragma once

// The host loops of SGD and Adam over torch.optim's per-element rules (kernels/cuda/optim.hpp,
// which the CUDA kernels run too). Declared here and compiled once, for float and double, in
// lstm_variants (kernels/cpu/native/optim.cpp), vectorised for the library's instruction set
// and split over the OpenMP team, so a program's own flags do not decide their speed. Raw math
// only: nothing is validated, nothing throws.

#include <cstdint>

#include "kernels/cuda/optim.hpp"

namespace lstm::kernels::cpu {

// p (n), g (n) and buf (n; read and written only when c.use_momentum, else may be null): host
// arrays that do not overlap; p and buf are updated in place.
template <typename T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, const SgdCoefficients<T>& c);

// p, g, m (first moment), v (second moment): host arrays of n elements that do not overlap; p, m
// and v are updated in place.
template <typename T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, const AdamCoefficients<T>& c);

}  // namespace lstm::kernels::cpu
