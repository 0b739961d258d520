// The definition of kernels/cpu/gemm.hpp's GEMM on Eigen's product kernels, instantiated for
// float and double. Part of lstm_variants, so Eigen is compiled once, with that target's
// instruction set (-march=native under LSTM_NATIVE_ARCH), not in every program.

#include "kernels/cpu/gemm.hpp"

#include <omp.h>

// GCC 12's AVX-512 intrinsics initialise their "undefined" vectors from themselves, which its
// flow analysis reports as -W(maybe-)uninitialized inside every Eigen product built with
// -march=native (GCC bug 105593, fixed in GCC 13). The false positive is silenced for Eigen's own
// code only; a region around the include also covers the templates instantiated later. Eigen
// 3.4's AVX-512 bfloat16 helpers also leave unused variables, visible when Eigen comes in with
// -I rather than as a system include.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wunused-variable"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace lstm::kernels::cpu {

namespace gemm_detail {

// Products of fewer multiply-adds (m * n * k) run on the calling thread. Eigen forks a team from
// 50,000 per thread, where waking a team costs more than it saves: at 2 threads on an Intel Xeon
// (AVX-512, 2026-12-06) a team first gained at 256x128x128 (4.2M: 55 us against 61 on one
// thread) with its members spinning, and a sleeping team (OMP_WAIT_POLICY=passive, as a team
// idle between a model's steps is) still lost at 10M. A smaller product also runs whole while
// another process holds a core, rather than waiting a scheduler slice (milliseconds) for a
// descheduled member: each product of the dense layer of Braun's CE cases (64x10x320) took 7-13
// ms so, against 0.04-0.1, on a 2-core machine with one busy process.
constexpr double kSerialWork = double(int64_t(1) << 22);

// Holds the calling thread's OpenMP team size at one while it lives, which Eigen reads to size
// its team (unless a program fixed that with Eigen::setNbThreads), and restores it.
class SerialScope {
public:
    explicit SerialScope(bool serial) : saved_(serial ? omp_get_max_threads() : 0) {
        if (serial) omp_set_num_threads(1);
    }
    ~SerialScope() {
        if (saved_ > 0) omp_set_num_threads(saved_);
    }
    SerialScope(const SerialScope&) = delete;
    SerialScope& operator=(const SerialScope&) = delete;

private:
    int saved_;
};

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A strided row-major view: `ld` elements between the starts of consecutive rows.
template <typename T>
using ConstStridedMap = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using StridedMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// C = beta * C for an m x n block, where beta == 0 writes zeros without reading C (BLAS: C may
// hold NaN or be uninitialized when beta is zero).
template <typename T>
void scale_block(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
    StridedMap<T> c_map(c, m, n, Eigen::OuterStride<>(ldc));
    if (beta == T(0))
        c_map.setZero();
    else if (beta != T(1))
        c_map *= beta;
}

}  // namespace gemm_detail

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
    using gemm_detail::ConstStridedMap;
    using gemm_detail::StridedMap;
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == T(0)) {
        gemm_detail::scale_block(m, n, beta, c, ldc);
        return;
    }
    // Each map describes the matrix as stored; a transpose is a free expression that Eigen's
    // product kernel folds into its packing, so no operand is ever copied here.
    const ConstStridedMap<T> a_map(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
    const ConstStridedMap<T> b_map(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
    StridedMap<T> c_map(c, m, n, Eigen::OuterStride<>(ldc));

    // The four transpose cases are spelled out because op() has a different expression type per
    // case; a runtime-chosen expression would need a temporary.
    // With one row of C (one active sequence, batch 1) Eigen runs the product as a GEMV on row 0
    // of op(A), with one column on column 0 of op(B). A row or column of a scaled expression such
    // as alpha * op(A) is no plain memory, so Eigen copied it into a heap vector on every call,
    // once per time step. So alpha = 1 (every caller's) is left out of the expression, which keeps
    // the bits (multiplying by 1 is exact), and another alpha goes on the operand Eigen does not
    // take a row or column of: a whole scaled operand Eigen unwraps into its kernel's factor.
    auto product = [&](const auto& op_a, const auto& op_b) {
        if (beta == T(0)) {
            c_map.noalias() = op_a * op_b;  // Eigen zeroes C before accumulating
        } else {
            if (beta != T(1)) c_map *= beta;
            c_map.noalias() += op_a * op_b;
        }
    };
    // Inside a parallel region, or on one thread, Eigen stays serial by itself.
    const bool small = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <
                       gemm_detail::kSerialWork;
    const gemm_detail::SerialScope serial(small && !omp_in_parallel() && omp_get_max_threads() > 1);
    auto assign = [&](const auto& op_a, const auto& op_b) {
        if (alpha == T(1))
            product(op_a, op_b);
        else if (m == 1)
            product(op_a, alpha * op_b);
        else
            product(alpha * op_a, op_b);
    };
    if (!trans_a && !trans_b)
        assign(a_map, b_map);
    else if (!trans_a && trans_b)
        assign(a_map, b_map.transpose());
    else if (trans_a && !trans_b)
        assign(a_map.transpose(), b_map);
    else
        assign(a_map.transpose(), b_map.transpose());
}

const char* gemm_instruction_sets() { return Eigen::SimdInstructionSetsInUse(); }

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

}  // namespace lstm::kernels::cpu
