// The row-major GEMM kernel against naive double loops: every transpose combination, odd sizes,
// leading dimensions wider than the rows they hold, and BLAS's alpha/beta rules (beta = 0 never
// reads C; alpha = 0 or k = 0 never reads A or B).

#include "kernels/cpu/gemm.hpp"

#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using lstm::kernels::cpu::gemm;

// Stored matrix: `rows` x `cols` values in row-major order with `ld` elements between row starts;
// the padding holds a sentinel so that reads or writes of it show up.
template <typename T>
struct Strided {
    int64_t rows, cols, ld;
    std::vector<T> data;
    T& at(int64_t r, int64_t c) { return data[static_cast<size_t>(r * ld + c)]; }
    T at(int64_t r, int64_t c) const { return data[static_cast<size_t>(r * ld + c)]; }
};

constexpr double kSentinel = 12345.0;

template <typename T>
Strided<T> make_strided(int64_t rows, int64_t cols, int64_t pad, uint64_t seed) {
    Strided<T> s{rows, cols, cols + pad, std::vector<T>(static_cast<size_t>(rows * (cols + pad)))};
    const auto values = lstm::test::random_vector<T>(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < s.ld; ++c)
            s.at(r, c) = c < cols ? values[static_cast<size_t>(r * cols + c)] : T(kSentinel);
    return s;
}

// The oracle: C = alpha * op(A) op(B) + beta * C, accumulated in double, C not read when beta = 0.
template <typename T>
std::vector<double> naive_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               double alpha, const Strided<T>& a, const Strided<T>& b, double beta,
                               const Strided<T>& c) {
    std::vector<double> out(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t p = 0; p < k; ++p) {
                const double av = trans_a ? a.at(p, i) : a.at(i, p);
                const double bv = trans_b ? b.at(j, p) : b.at(p, j);
                sum += av * bv;
            }
            const double prior = beta == 0 ? 0.0 : beta * static_cast<double>(c.at(i, j));
            out[static_cast<size_t>(i * n + j)] = alpha * sum + prior;
        }
    }
    return out;
}

template <typename T>
std::vector<T> dense_part(const Strided<T>& s) {
    std::vector<T> out;
    for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t c = 0; c < s.cols; ++c) out.push_back(s.at(r, c));
    return out;
}

template <typename T>
bool padding_untouched(const Strided<T>& s) {
    for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t c = s.cols; c < s.ld; ++c)
            if (s.at(r, c) != T(kSentinel)) return false;
    return true;
}

// Tolerance for a k-term dot product of values in [-1, 1]: rounding grows with k.
template <typename T>
double gemm_atol(int64_t k) {
    return (std::is_same_v<T, float> ? 4e-7 : 1e-15) * static_cast<double>(k + 1);
}
template <typename T>
double gemm_rtol() {
    return std::is_same_v<T, float> ? 1e-5 : 1e-13;
}

// Runs one product with padded leading dimensions and checks values and untouched padding.
template <typename T>
void check_case(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                double beta, int64_t pad, uint64_t seed) {
    INFO("trans_a " << trans_a << " trans_b " << trans_b << " m " << m << " n " << n << " k " << k
                    << " alpha " << alpha << " beta " << beta << " pad " << pad);
    const auto a = trans_a ? make_strided<T>(k, m, pad, seed) : make_strided<T>(m, k, pad, seed);
    const auto b = trans_b ? make_strided<T>(n, k, pad + 1, seed + 1)
                           : make_strided<T>(k, n, pad + 1, seed + 1);
    auto c = make_strided<T>(m, n, pad + 2, seed + 2);
    if (beta == 0) {
        // C may be garbage when beta is zero; NaN makes any read of it visible.
        for (int64_t r = 0; r < m; ++r)
            for (int64_t col = 0; col < n; ++col)
                c.at(r, col) = std::numeric_limits<T>::quiet_NaN();
    }
    const auto want = naive_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    gemm<T>(trans_a, trans_b, m, n, k, T(alpha), a.data.data(), a.ld, b.data.data(), b.ld, T(beta),
            c.data.data(), c.ld);
    LSTM_REQUIRE_CLOSE(
        lstm::test::compare("C", dense_part(c), want, gemm_atol<T>(k), gemm_rtol<T>()));
    REQUIRE(padding_untouched(c));
}

}  // namespace

TEMPLATE_TEST_CASE("gemm matches naive loops for all transposes and odd sizes", "[kernels]", float,
                   double) {
    const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7},    {7, 1, 4},   {1, 6, 9},
                                {5, 4, 1}, {17, 13, 11}, {31, 2, 40}, {9, 23, 3}};
    uint64_t seed = 100;
    for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
            for (const auto& s : sizes)
                for (double beta : {0.0, 1.0, -0.7})
                    check_case<TestType>(trans_a, trans_b, s[0], s[1], s[2], 1.5, beta, 3, seed++);
}

TEMPLATE_TEST_CASE("gemm matches naive loops on blocked sizes with padded leading dims",
                   "[kernels]", float, double) {
    // Large enough for Eigen's cache-blocked (and possibly threaded) path, odd so remainders run.
    uint64_t seed = 200;
    for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
            check_case<TestType>(trans_a, trans_b, 131, 77, 259, -0.5, 0.25, 5, seed++);
    check_case<TestType>(false, true, 129, 67, 300, 1.0, 0.0, 1, seed++);
    check_case<TestType>(true, false, 67, 129, 300, 1.0, 1.0, 0, seed++);
    // Past the 2^22 multiply-adds from which Eigen may split the product over a team.
    check_case<TestType>(false, false, 257, 97, 263, 1.0, 0.5, 2, seed++);
    check_case<TestType>(true, true, 97, 257, 263, -1.0, 0.0, 0, seed++);
}

TEST_CASE("gemm leaves the caller's OpenMP thread count as it found it", "[kernels]") {
    // Small products run with the count held at one, large ones with the caller's.
    const int before = omp_get_max_threads();
    omp_set_num_threads(3);
    for (const int64_t size : {int64_t(8), int64_t(200)}) {
        const std::vector<float> a(size * size, 0.5f), b(size * size, 0.25f);
        std::vector<float> c(size * size, -1.0f);
        gemm<float>(false, false, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f,
                    c.data(), size);
        INFO("size " << size);
        CHECK(omp_get_max_threads() == 3);
        CHECK(c[0] == Approx(0.125 * static_cast<double>(size)));
    }
    omp_set_num_threads(before);
}

TEMPLATE_TEST_CASE("gemm follows BLAS rules for alpha = 0, k = 0 and empty outputs", "[kernels]",
                   float, double) {
    using T = TestType;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    const int64_t m = 3, n = 4, k = 5, ldc = n + 2;
    std::vector<T> a(static_cast<size_t>(m * k), nan), b(static_cast<size_t>(k * n), nan);
    std::vector<T> c(static_cast<size_t>(m * ldc), T(kSentinel));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * ldc + j)] = T(i * n + j + 1);

    SECTION("alpha = 0 scales C by beta and never reads A or B") {
        gemm<T>(false, false, m, n, k, T(0), a.data(), k, b.data(), n, T(-2), c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
                CHECK(c[static_cast<size_t>(i * ldc + j)] == T(-2) * T(i * n + j + 1));
    }
    SECTION("k = 0 with beta = 0 writes exact zeros over NaN") {
        std::fill(c.begin(), c.end(), nan);
        gemm<T>(true, true, m, n, 0, T(1), a.data(), m, b.data(), 1, T(0), c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) CHECK(c[static_cast<size_t>(i * ldc + j)] == T(0));
        CHECK(std::isnan(c[static_cast<size_t>(ldc - 1)]));  // padding is left alone
    }
    SECTION("m = 0 or n = 0 writes nothing") {
        const auto before = c;
        gemm<T>(false, false, 0, n, k, T(1), a.data(), k, b.data(), n, T(0), c.data(), ldc);
        gemm<T>(false, false, m, 0, k, T(1), a.data(), k, b.data(), n, T(0), c.data(), ldc);
        CHECK(lstm::test::compare("C", c, before, 0.0, 0.0).ok);
    }
}

TEMPLATE_TEST_CASE("gemm with beta = 0 overwrites a NaN-filled C exactly like beta = 0 BLAS",
                   "[kernels]", float, double) {
    using T = TestType;
    // Hand-computable: [[1, 2], [3, 4]] * [[5, 6], [7, 8]] = [[19, 22], [43, 50]].
    const std::vector<T> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
    std::vector<T> c(4, std::numeric_limits<T>::quiet_NaN());
    gemm<T>(false, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2);
    CHECK(c == std::vector<T>{19, 22, 43, 50});
    // A^T B^T = (B A)^T: B A = [[23, 34], [31, 46]], so its transpose is [[23, 31], [34, 46]].
    std::fill(c.begin(), c.end(), std::numeric_limits<T>::quiet_NaN());
    gemm<T>(true, true, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2);
    CHECK(c == std::vector<T>{23, 31, 34, 46});
}
