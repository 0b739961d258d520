#pragma once

// Turns CUDA, cuBLAS and cuDNN status codes into lstm::Error (OutOfMemory or BackendError)
// naming the failing call, where it was made and the library's own message. For lstm_cuda's sources
// only (includes CUDA headers).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>

#include "kernels/cuda/launch.hpp"
#include "lstm/error.hpp"

#if LSTM_WITH_CUDNN
#include <cudnn.h>
#endif

namespace lstm::cuda::detail {

// The part of a source path from the repository's top folder on, so messages do not carry the
// build machine's directories.
inline const char* source_path(const char* file) {
    for (const char* top : {"/lstm/", "/kernels/", "/bench/", "/tests/", "/tools/"}) {
        if (const char* hit = std::strstr(file, top)) return hit + 1;
    }
    return file;
}

// An allocation failure is lstm::OutOfMemory (the caller may retry smaller), anything else
// lstm::BackendError.
template <typename... Parts>
[[noreturn]] void fail_status(bool out_of_memory, const Parts&... parts) {
    if (out_of_memory) fail_as<OutOfMemory>(parts...);
    fail_as<BackendError>(parts...);
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess)
        fail_status(status == cudaErrorMemoryAllocation, call, " failed at ", source_path(file),
                    ":", line, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
                    ")");
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS)
        fail_status(status == CUBLAS_STATUS_ALLOC_FAILED, call, " failed at ", source_path(file),
                    ":", line, ": ", cublasGetStatusName(status), " (",
                    cublasGetStatusString(status), ")");
}

// The status a launcher of kernels/cuda/ returns (kernels/cuda/launch.hpp).
inline void check_launch(kernels::cuda::LaunchStatus status, const char* call, const char* file,
                         int line) {
    check_cuda(static_cast<cudaError_t>(status.code), call, file, line);
}

#if LSTM_WITH_CUDNN
// cuDNN 9 split CUDNN_STATUS_ALLOC_FAILED (deprecated there) into host and device failures.
inline bool cudnn_out_of_memory(cudnnStatus_t status) {
#if CUDNN_MAJOR >= 9
    return status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
           status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
#else
    return status == CUDNN_STATUS_ALLOC_FAILED;
#endif
}

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
    if (status != CUDNN_STATUS_SUCCESS)
        fail_status(cudnn_out_of_memory(status), call, " failed at ", source_path(file), ":", line,
                    ": ", cudnnGetErrorString(status));
}
#endif

}  // namespace lstm::cuda::detail

#define LSTM_CUDA_CHECK(call) ::lstm::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define LSTM_CUBLAS_CHECK(call) \
    ::lstm::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
#define LSTM_CUDNN_CHECK(call) ::lstm::cuda::detail::check_cudnn((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration) surface here, not at the next sync.
// LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_x(..., stream)): the launcher convention's check.
#define LSTM_CUDA_CHECK_LAUNCH(launch) \
    ::lstm::cuda::detail::check_launch((launch), #launch, __FILE__, __LINE__)
