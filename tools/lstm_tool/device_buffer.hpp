#pragma once

// A byte buffer of an exact size in the memory space of a variant (host or CUDA device), so the
// tool runs every registered variant on the same code path: upload inputs, run, download outputs.
// Built on lstm::Buffer; this wrapper remembers the logical size (lstm::Buffer rounds host
// capacity up) and the CUDA context whose stream orders every copy.

#include <cstddef>
#include <memory>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#endif

namespace lstm::tool {

// The CUDA context of one tool run: created only when the run targets device cuda, so CPU runs
// never touch the CUDA runtime.
class DeviceContext {
public:
    explicit DeviceContext(Device device) {
#if LSTM_WITH_CUDA
        if (device == Device::cuda) context_ = std::make_unique<cuda::Context>();
#else
        check(device == Device::cpu,
              "device cuda: this lstm_tool was built without CUDA (LSTM_WITH_CUDA=0)");
#endif
    }
    // Null for cpu runs.
    cuda::Context* get() const {
#if LSTM_WITH_CUDA
        return context_.get();
#else
        return nullptr;
#endif
    }

private:
#if LSTM_WITH_CUDA
    std::unique_ptr<cuda::Context> context_;
#endif
};

class DeviceBuffer {
public:
    DeviceBuffer(Device device, size_t bytes, cuda::Context* context = nullptr)
        : buffer_(device, bytes), size_(bytes), context_(context) {}

    // A buffer on `device` holding a copy of the host vector.
    template <typename T>
    static DeviceBuffer upload(Device device, const std::vector<T>& host,
                               cuda::Context* context = nullptr) {
        DeviceBuffer out(device, host.size() * sizeof(T), context);
        out.buffer_.copy_from(host.data(), Device::cpu, out.size_, context);
        return out;
    }

    // Every byte set to zero (gradient buffers, which backward accumulates into).
    void zero() { buffer_.zero(size_, context_); }

    // The contents as a host vector of T (the size must be a multiple of sizeof(T)); waits for
    // the work queued on the context's stream.
    template <typename T>
    std::vector<T> download() const {
        return buffer_.download<T>(size_ / sizeof(T), context_);
    }

    template <typename T>
    T* as() const {
        return buffer_.as<T>();
    }
    void* data() const { return buffer_.data(); }
    size_t size() const { return size_; }
    Device device() const { return buffer_.device(); }

private:
    Buffer buffer_;
    size_t size_;
    cuda::Context* context_;
};

}  // namespace lstm::tool
