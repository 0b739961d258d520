#pragma once

// lstm::Buffer: an owning byte buffer on the host or on a CUDA device, so that code written once
// (the layer, the bench, the tool) runs every registered variant in its own memory space. Host
// storage counts towards the library's host memory budget (lstm/memory.hpp) while it is held;
// device storage does not.

#include <cstddef>
#include <cstring>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm {

namespace cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace cuda

class Buffer {
public:
    // Device memory needs a build with CUDA (LSTM_WITH_CUDA); the error says so otherwise.
    explicit Buffer(Device device = Device::cpu, size_t bytes = 0) : device_(device) {
#if !LSTM_WITH_CUDA
        if (device != Device::cpu)
            fail_as<Unsupported>(
                "Buffer on device cuda: this build has no CUDA back-end "
                "(LSTM_WITH_CUDA=0)");
#endif
        reserve(bytes);
    }
    ~Buffer() { release(); }
    Buffer(Buffer&& other) noexcept { *this = std::move(other); }
    Buffer& operator=(Buffer&& other) noexcept {
        if (this != &other) {
            release();
            device_ = other.device_;
            host_ = std::move(other.host_);
            device_ptr_ = other.device_ptr_;
            size_ = other.size_;
            other.device_ptr_ = nullptr;
            other.size_ = 0;
        }
        return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    // Grows to at least `bytes` (contents are lost when it grows); never shrinks, so repeated
    // steps of the same or smaller size allocate nothing. Returns data(). A refused or failed
    // growth of host storage throws lstm::OutOfMemory and keeps the storage and contents as they
    // were.
    void* reserve(size_t bytes) {
        if (bytes <= size_) return data();
        if (device_ == Device::cpu) {
            host_.reserve(bytes);
            size_ = host_.capacity();
            return data();
        }
#if LSTM_WITH_CUDA
        release();
        device_ptr_ = cuda::malloc_device(bytes);
        size_ = bytes;
#endif
        return data();
    }

    void* data() const { return device_ == Device::cpu ? host_.data() : device_ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data());
    }
    size_t size() const { return size_; }
    Device device() const { return device_; }

    // Copies `bytes` from `src` (in `src_device`) to the start of this buffer, which must hold
    // them. CUDA copies are ordered on the context's stream when one is given.
    void copy_from(const void* src, Device src_device, size_t bytes,
                   cuda::Context* context = nullptr) {
        check(bytes <= size_, "Buffer::copy_from: ", bytes, " bytes do not fit in ", size_);
        copy(data(), device_, src, src_device, bytes, context);
    }
    // Copies the first `bytes` of this buffer to `dst` (in `dst_device`).
    void copy_to(void* dst, Device dst_device, size_t bytes,
                 cuda::Context* context = nullptr) const {
        check(bytes <= size_, "Buffer::copy_to: ", bytes, " bytes requested from ", size_);
        copy(dst, dst_device, data(), device_, bytes, context);
    }
    // Sets the first `bytes` to zero (gradient buffers, which backward accumulates into).
    void zero(size_t bytes, cuda::Context* context = nullptr) {
        check(bytes <= size_, "Buffer::zero: ", bytes, " bytes requested from ", size_);
        if (bytes == 0) return;
        if (device_ == Device::cpu) {
            std::memset(data(), 0, bytes);
            return;
        }
#if LSTM_WITH_CUDA
        cuda::zero_device(data(), bytes, context);
#else
        (void)context;
#endif
    }

    // A buffer on `device` holding a copy of the host vector.
    template <typename T>
    static Buffer upload(Device device, const std::vector<T>& host,
                         cuda::Context* context = nullptr) {
        Buffer out(device, host.size() * sizeof(T));
        out.copy_from(host.data(), Device::cpu, host.size() * sizeof(T), context);
        return out;
    }
    // The first `count` elements as a host vector.
    template <typename T>
    std::vector<T> download(size_t count, cuda::Context* context = nullptr) const {
        std::vector<T> out(count);
        copy_to(out.data(), Device::cpu, count * sizeof(T), context);
        return out;
    }

    // Copies between memory spaces; host-to-host is a memcpy.
    static void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                     cuda::Context* context = nullptr) {
        if (bytes == 0) return;
        if (dst_device == Device::cpu && src_device == Device::cpu) {
            std::memcpy(dst, src, bytes);
            return;
        }
#if LSTM_WITH_CUDA
        cuda::copy_bytes(dst, dst_device, src, src_device, bytes, context);
#else
        (void)context;
        fail("copy to or from device cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
    }

private:
    void release() noexcept {
#if LSTM_WITH_CUDA
        if (device_ptr_) cuda::free_device(device_ptr_);
#endif
        device_ptr_ = nullptr;
        if (device_ == Device::cuda) size_ = 0;
    }

    Device device_ = Device::cpu;
    detail::AlignedBuffer host_;
    void* device_ptr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace lstm
