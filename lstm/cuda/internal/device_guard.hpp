#pragma once

// Makes a context's device current for one entry point and restores the caller's device after
// it, so that a call with a context on device 1 neither runs on device 0 nor leaves device 1
// current for the caller's own CUDA code. For lstm_cuda's sources only (includes CUDA headers).

#include <cuda_runtime.h>

#include <new>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/internal/check.hpp"

namespace lstm::cuda::detail {

class DeviceGuard {
public:
    // Throws lstm::BackendError naming the failing call when the device cannot be made current.
    explicit DeviceGuard(int device) {
        LSTM_CUDA_CHECK(cudaGetDevice(&previous_));
        if (previous_ == device) return;
        LSTM_CUDA_CHECK(cudaSetDevice(device));
        switched_ = true;
    }
    explicit DeviceGuard(const Context& context) : DeviceGuard(context.device()) {}

    // For destructors and cleanup paths, which must not throw: on a failure it switches nothing
    // (and clears the error, so that it does not surface at the next unrelated check).
    DeviceGuard(int device, std::nothrow_t) noexcept {
        if (cudaGetDevice(&previous_) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        if (previous_ == device) return;
        if (cudaSetDevice(device) == cudaSuccess)
            switched_ = true;
        else
            cudaGetLastError();
    }

    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

    // Restoring cannot be reported from a destructor; the previous device existed a moment ago,
    // so it does not fail in practice.
    ~DeviceGuard() {
        if (switched_) cudaSetDevice(previous_);
    }

private:
    int previous_ = 0;
    bool switched_ = false;
};

}  // namespace lstm::cuda::detail
