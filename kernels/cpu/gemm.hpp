#pragma once

// Row-major GEMM with BLAS semantics on raw host pointers. Raw math only: nothing from lstm/ is
// included, nothing is validated, nothing throws. Declared here and compiled once, for float and
// double, in lstm_variants (kernels/cpu/native/gemm.cpp, Eigen's product kernels built for the
// library's instruction set), so a program that includes this header compiles no Eigen and runs
// the library's GEMM whatever its own compiler flags.

#include <cstdint>

namespace lstm::kernels::cpu {

// C = alpha * op(A) * op(B) + beta * C, all host, row-major with leading dimensions (elements
// between row starts); overwrites C when beta == 0 (C is then never read), else adds to beta * C.
// op(A) is (m, k): A is stored (m, k) with lda >= k, or (k, m) with lda >= m when trans_a.
// op(B) is (k, n): B is stored (k, n) with ldb >= n, or (n, k) with ldb >= k when trans_b.
// C is (m, n) with ldc >= n and must not overlap A or B. As in BLAS, A and B are not read when
// alpha == 0 or k == 0. Eigen may use its own OpenMP threads for products of at least 2^22
// multiply-adds (smaller ones cost more to split than they gain); it stays serial when called
// from inside a parallel region, so callers never get nested teams. T is float or
// double (the instantiations the library compiles).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The SIMD instruction sets that GEMM was compiled for, in Eigen's words ("AVX512, FMA, ...").
const char* gemm_instruction_sets();

}  // namespace lstm::kernels::cpu
