#include "lstm/cuda/runtime.hpp"

#include <cuda_runtime.h>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/internal/check.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // "no driver" is an answer here, not a sticky error for later calls
        return 0;
    }
    return count;
}

std::string device_description(int device) {
    check(device >= 0 && device < device_count(), "device_description: device ", device,
          " does not exist; this process sees ", device_count(), " CUDA device(s)");
    cudaDeviceProp prop{};
    LSTM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    const double gib = static_cast<double>(prop.totalGlobalMem) / double(1 << 30);
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + std::to_string(static_cast<int>(gib + 0.5)) +
           " GiB)";
}

void* malloc_device(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    LSTM_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
}

void free_device(void* ptr) noexcept {
    if (ptr) cudaFree(ptr);
}

namespace {

cudaMemcpyKind kind_of(Device dst, Device src) {
    if (src == Device::cpu)
        return dst == Device::cpu ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice;
    return dst == Device::cpu ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

cudaStream_t stream_of(Context* context) {
    return context ? static_cast<cudaStream_t>(context->stream()) : nullptr;
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Context* context) {
    if (bytes == 0) return;
    check(dst != nullptr && src != nullptr, "copy_bytes: null ", dst ? "src" : "dst", " for ",
          bytes, " bytes");
    if (context == nullptr) {
        LSTM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind_of(dst_device, src_device)));
        return;
    }
    const detail::DeviceGuard on_device(*context);
    LSTM_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, kind_of(dst_device, src_device), stream_of(context)));
    LSTM_CUDA_CHECK(cudaStreamSynchronize(stream_of(context)));
}

void zero_device(void* ptr, size_t bytes, Context* context) {
    if (bytes == 0) return;
    check(ptr != nullptr, "zero_device: null ptr for ", bytes, " bytes");
    if (context == nullptr) {
        LSTM_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, nullptr));
        return;
    }
    const detail::DeviceGuard on_device(*context);
    LSTM_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_of(context)));
}

}  // namespace lstm::cuda
