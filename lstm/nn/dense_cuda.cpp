#include "lstm/nn/dense_cuda.hpp"

#include "kernels/cuda/dense.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::nn::detail {

namespace {

// cuBLAS is column-major; a row-major (r, c) matrix is its (c, r) column-major transpose. So the
// row-major products below are computed as the transposed column-major ones:
//   y = x W^T      <=>  y^T  = W x^T         gemm(T, N, out, rows, in)
//   dW += dy^T x   <=>  dW^T += x^T dy       gemm(N, T, in, out, rows)
//   dx = dy W      <=>  dx^T = W^T dy^T      gemm(N, N, in, rows, out)
//   db += dy^T 1   <=>  db += (dy^T) 1       gemv(N, out, rows)
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                    int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc) {
    return cublasSgemm_64(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                    int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                    const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
    return cublasDgemm_64(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
cublasStatus_t gemv(cublasHandle_t h, int64_t m, int64_t n, float alpha, const float* a,
                    int64_t lda, const float* x, float beta, float* y) {
    return cublasSgemv_64(h, CUBLAS_OP_N, m, n, &alpha, a, lda, x, 1, &beta, y, 1);
}
cublasStatus_t gemv(cublasHandle_t h, int64_t m, int64_t n, double alpha, const double* a,
                    int64_t lda, const double* x, double beta, double* y) {
    return cublasDgemv_64(h, CUBLAS_OP_N, m, n, &alpha, a, lda, x, 1, &beta, y, 1);
}

}  // namespace

template <typename T>
void dense_forward_cuda(cuda::Context& context, int64_t rows, int64_t in, int64_t out, const T* x,
                        const T* weight, const T* bias, T* y) {
    const cuda::detail::DeviceGuard on_device(context);
    cuda::Context::Impl& impl = context.impl();
    if (bias != nullptr) {
        LSTM_CUDA_CHECK_LAUNCH(
            kernels::cuda::launch_broadcast_bias<T>(rows, out, bias, y, impl.stream));
    }
    LSTM_CUBLAS_CHECK(gemm(impl.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, T(1), weight, in,
                           x, in, bias != nullptr ? T(1) : T(0), y, out));
}

template <typename T>
void dense_backward_cuda(cuda::Context& context, int64_t rows, int64_t in, int64_t out, const T* x,
                         const T* dy, const T* weight, T* dweight, T* dbias, const T* ones, T* dx) {
    const cuda::detail::DeviceGuard on_device(context);
    cuda::Context::Impl& impl = context.impl();
    LSTM_CUBLAS_CHECK(gemm(impl.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, T(1), x, in, dy,
                           out, T(1), dweight, in));
    if (dbias != nullptr)
        LSTM_CUBLAS_CHECK(gemv(impl.cublas, out, rows, T(1), dy, out, ones, T(1), dbias));
    if (dx != nullptr)
        LSTM_CUBLAS_CHECK(gemm(impl.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, T(1), weight,
                               in, dy, out, T(0), dx, in));
}

template <typename T>
void fill_cuda(cuda::Context& context, int64_t count, T value, T* v) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_fill<T>(count, value, v, context.impl().stream));
}

#define LSTM_INSTANTIATE_DENSE_CUDA(T)                                                        \
    template void dense_forward_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t, const T*,  \
                                        const T*, const T*, T*);                              \
    template void dense_backward_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t, const T*, \
                                         const T*, const T*, T*, T*, const T*, T*);           \
    template void fill_cuda<T>(cuda::Context&, int64_t, T, T*);
LSTM_INSTANTIATE_DENSE_CUDA(float)
LSTM_INSTANTIATE_DENSE_CUDA(double)
#undef LSTM_INSTANTIATE_DENSE_CUDA

}  // namespace lstm::nn::detail
