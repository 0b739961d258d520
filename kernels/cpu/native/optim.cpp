// The host loops of kernels/cpu/optim.hpp, instantiated for float and double. Part of
// lstm_variants: compiled with that target's instruction set, and with -fno-math-errno
// (cmake/lstm_variants_target.cmake) so the square root of Adam's denominator is a vector
// instruction rather than a library call that must be able to set errno. The per-element rules
// are the ones the CUDA kernels run, so each element gets the same operations in the same order
// (only whether the compiler fuses a multiply and an add differs, as it does between builds).

#include "kernels/cpu/optim.hpp"

#include <omp.h>

#include "kernels/cpu/split.hpp"
#include "kernels/cpu/team.hpp"

namespace lstm::kernels::cpu {

namespace {

// Below this many elements an OpenMP team costs more than the update it would split.
constexpr int64_t kParallelMin = int64_t(1) << 15;

// Runs range(begin, end) on each thread's contiguous share of [0, n), on the calling thread alone
// below kParallelMin. The team splits the range itself and each share is a plain `omp simd` loop:
// GCC 12 leaves a combined `parallel for simd` over SGD's branches scalar. Every element gets the
// same operations on any team, so the team is the one the time-loop governor holds: while another
// process takes a core, a full team would wait for its descheduled member once per update.
template <typename F>
void split_range(int64_t n, const F& range) {
    const bool parallel = n >= kParallelMin;
#pragma omp parallel if (parallel) num_threads(parallel ? loop_team_size() : 1)
    {
        const BlockRange share = row_range(n, omp_get_thread_num(), omp_get_num_threads());
        range(share.begin, share.end);
    }
}

// Elements [begin, end) of sgd_update / adam_update (host arrays as there, updated in place).
// The coefficients are taken by value: as locals, the loops' stores cannot alias them, so their
// loads and branches are hoisted out of the loops.
template <typename T>
void sgd_range(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g,
               T* __restrict buf, const SgdCoefficients<T> c) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) sgd_element(i, p, g, buf, c);
}

template <typename T>
void adam_range(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict m,
                T* __restrict v, const AdamCoefficients<T> c) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) adam_element(i, p, g, m, v, c);
}

}  // namespace

template <typename T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, const SgdCoefficients<T>& c) {
    split_range(n, [&](int64_t begin, int64_t end) { sgd_range(begin, end, p, g, buf, c); });
}

template <typename T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, const AdamCoefficients<T>& c) {
    split_range(n, [&](int64_t begin, int64_t end) { adam_range(begin, end, p, g, m, v, c); });
}

template void sgd_update<float>(int64_t, float*, const float*, float*,
                                const SgdCoefficients<float>&);
template void sgd_update<double>(int64_t, double*, const double*, double*,
                                 const SgdCoefficients<double>&);
template void adam_update<float>(int64_t, float*, const float*, float*, float*,
                                 const AdamCoefficients<float>&);
template void adam_update<double>(int64_t, double*, const double*, double*, double*,
                                  const AdamCoefficients<double>&);

}  // namespace lstm::kernels::cpu
