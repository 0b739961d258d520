#pragma once

// A byte buffer in the memory space of a variant (host or CUDA device), so the tool runs every
// registered variant on the same code path: upload inputs, run, download outputs.

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lstm::tool {

#if LSTM_WITH_CUDA
inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess)
        fail(call, " failed at ", file, ":", line, ": ", cudaGetErrorString(status));
}
#define LSTM_TOOL_CUDA(call) ::lstm::tool::cuda_check((call), #call, __FILE__, __LINE__)
#endif

class DeviceBuffer {
public:
    DeviceBuffer(Device device, size_t bytes) : device_(device), size_(bytes) {
        if (bytes == 0) return;
        if (device == Device::cpu) {
            data_ = host_.reserve(bytes);
            return;
        }
#if LSTM_WITH_CUDA
        LSTM_TOOL_CUDA(cudaMalloc(&data_, bytes));
        // The memory is ours from here on; the deleter frees it even if a later step throws.
        owner_.reset(data_);
#else
        fail("device cuda: this lstm_tool was built without CUDA (LSTM_WITH_CUDA=0)");
#endif
    }

    // A buffer on `device` holding a copy of the host vector.
    template <typename T>
    static DeviceBuffer upload(Device device, const std::vector<T>& host) {
        DeviceBuffer out(device, host.size() * sizeof(T));
        out.copy_from_host(host.data(), out.size_);
        return out;
    }

    // Every byte set to zero (gradient buffers, which backward accumulates into).
    void zero() {
        if (size_ == 0) return;
        if (device_ == Device::cpu) {
            std::memset(data_, 0, size_);
            return;
        }
#if LSTM_WITH_CUDA
        LSTM_TOOL_CUDA(cudaMemset(data_, 0, size_));
#endif
    }

    // The contents as a host vector of T (the size must be a multiple of sizeof(T)).
    template <typename T>
    std::vector<T> download() const {
        std::vector<T> out(size_ / sizeof(T));
        if (size_ == 0) return out;
        if (device_ == Device::cpu) {
            std::memcpy(out.data(), data_, size_);
            return out;
        }
#if LSTM_WITH_CUDA
        // On the legacy default stream this waits for the work the variant queued.
        LSTM_TOOL_CUDA(cudaMemcpy(out.data(), data_, size_, cudaMemcpyDeviceToHost));
#endif
        return out;
    }

    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    void* data() const { return data_; }
    size_t size() const { return size_; }
    Device device() const { return device_; }

private:
    void copy_from_host(const void* src, size_t bytes) {
        if (bytes == 0) return;
        if (device_ == Device::cpu) {
            std::memcpy(data_, src, bytes);
            return;
        }
#if LSTM_WITH_CUDA
        LSTM_TOOL_CUDA(cudaMemcpy(data_, src, bytes, cudaMemcpyHostToDevice));
#endif
    }

#if LSTM_WITH_CUDA
    struct CudaFree {
        void operator()(void* p) const { cudaFree(p); }
    };
    std::unique_ptr<void, CudaFree> owner_;
#endif
    Device device_;
    size_t size_;
    void* data_ = nullptr;
    lstm::detail::AlignedBuffer host_;
};

}  // namespace lstm::tool
