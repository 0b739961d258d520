#pragma once

// A byte buffer of an exact size in the memory space of a variant (host or CUDA device), so the
// tool runs every registered variant on the same code path: upload inputs, run, download outputs.
// Built on lstm::Buffer; this wrapper remembers the logical size (lstm::Buffer rounds host
// capacity up) and the CUDA context whose stream orders every copy.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/device_context.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::tool {

class DeviceBuffer {
public:
    DeviceBuffer(Device device, size_t bytes, cuda::Context* context = nullptr)
        : buffer_(device, bytes), size_(bytes), context_(context) {}

    // A buffer on `device` holding a copy of the host vector. An empty vector still gets an
    // address: the library reads a view with a null pointer as "not given", and an empty input
    // (N = 0, say) is given.
    template <typename T>
    static DeviceBuffer upload(Device device, const std::vector<T>& host,
                               cuda::Context* context = nullptr) {
        DeviceBuffer out(device, std::max<size_t>(host.size() * sizeof(T), 1), context);
        out.size_ = host.size() * sizeof(T);
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

// The context for `device`, whose failure names the option that asked for the device: "Context:
// device 0 does not exist; this process sees 0 CUDA device(s)" alone does not say that
// --device cuda led there. Rethrown as the same kind. (A build without CUDA says "device cuda:
// this build has no CUDA back-end" already.)
inline DeviceContext open_device_context(Device device) {
#if LSTM_WITH_CUDA
    try {
        return DeviceContext(device);
    } catch (const Error& e) {
        const std::string message = "--device " + std::string(to_string(device)) + ": " + e.what();
        switch (e.kind()) {
            case ErrorKind::unsupported:
                throw Unsupported(message);
            case ErrorKind::out_of_memory:
                throw OutOfMemory(message);
            case ErrorKind::backend:
                throw BackendError(message);
            case ErrorKind::invalid_argument:
                break;
        }
        throw InvalidArgument(message);
    }
#else
    return DeviceContext(device);
#endif
}

}  // namespace lstm::tool
