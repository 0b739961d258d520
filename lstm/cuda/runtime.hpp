#pragma once

// The few CUDA runtime services the public API needs (device discovery, device memory), declared
// without CUDA headers so that code which only links lstm::lstm never sees them. Defined in the
// compiled lstm_cuda library (lstm/cuda/runtime.cpp, the lstm::cuda target); present only when
// LSTM_WITH_CUDA is 1. In a program that does not link lstm::cuda, device_count() is 0 and the
// others throw lstm::Unsupported saying so (lstm/cuda/absent.cpp, lstm/cuda/link.hpp).

#include <cstddef>
#include <string>

#include "lstm/tensor.hpp"

namespace lstm::cuda {

class Context;

// Number of CUDA devices this process can use; 0 when there is no driver or no device (never
// throws, so tests and the bench can ask before touching the GPU).
int device_count();
inline bool device_available() { return device_count() > 0; }

// "NVIDIA H200 (sm_90, 139 GiB)": for benchmark reports. Throws lstm::Error without a device.
std::string device_description(int device = 0);

// cudaMalloc / cudaFree on the current device. malloc_device throws lstm::Error with the CUDA
// message (bytes == 0 gives nullptr); free_device(nullptr) does nothing.
void* malloc_device(size_t bytes);
void free_device(void* ptr) noexcept;

// Copies `bytes` between any two memory spaces. With a context the copy is queued on its stream
// (its device current for the call) and this call waits for it (so host memory may be reused on
// return). Without one it is a plain cudaMemcpy on the legacy default stream, which does NOT
// wait for work queued on a context's (non-blocking) stream: pass the context that produced or
// will read the data.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Context* context = nullptr);

// Sets `bytes` of device memory to zero, queued on the context's stream (its device current for
// the call) or the default stream; does not wait.
void zero_device(void* ptr, size_t bytes, Context* context = nullptr);

}  // namespace lstm::cuda
