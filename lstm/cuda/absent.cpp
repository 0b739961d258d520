// The CPU part's stand-ins for the CUDA entry points a program can reach without a Context
// (lstm/cuda/link.hpp): compiled into lstm_variants, defined weakly, and replaced by lstm_cuda's
// definitions wherever a program links lstm::cuda. Here they say what is missing.

#include <string>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#include "lstm/error.hpp"

#define LSTM_CUDA_ABSENT __attribute__((weak))

namespace lstm::cuda {

namespace {

[[noreturn]] void absent(const char* what) {
    fail_as<Unsupported>(what,
                         ": the CUDA back-end lives in the lstm::cuda target (library lstm_cuda), "
                         "which this program does not link");
}

}  // namespace

// No device is usable by a program without the back-end; asking is not an error.
LSTM_CUDA_ABSENT int device_count() { return 0; }

LSTM_CUDA_ABSENT std::string device_description(int) { absent("device_description"); }

LSTM_CUDA_ABSENT void* malloc_device(size_t bytes) {
    if (bytes == 0) return nullptr;
    absent("device memory (malloc_device)");
}

// Nothing can have been allocated here, and a Buffer on cuda that never grew frees null.
LSTM_CUDA_ABSENT void free_device(void*) noexcept {}

LSTM_CUDA_ABSENT void copy_bytes(void*, Device, const void*, Device, size_t bytes, Context*) {
    if (bytes == 0) return;
    absent("copy_bytes");
}

LSTM_CUDA_ABSENT void zero_device(void*, size_t bytes, Context*) {
    if (bytes == 0) return;
    absent("zero_device");
}

LSTM_CUDA_ABSENT Context::Context(int) { absent("cuda::Context"); }

LSTM_CUDA_ABSENT bool graphs_enabled_by_default() { absent("graphs_enabled_by_default"); }

}  // namespace lstm::cuda
