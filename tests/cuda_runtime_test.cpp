// Host-side behaviour of the CUDA back-end that holds on any machine, GPU or not.
#include <catch2/catch.hpp>
#include <vector>

#include "lstm/buffer.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

using namespace lstm;

TEST_CASE("Buffer on the host grows, copies and zeroes", "[buffer]") {
    const std::vector<double> host = {1.5, -2.0, 3.25};
    Buffer b = Buffer::upload(Device::cpu, host);
    REQUIRE(b.size() >= host.size() * sizeof(double));
    REQUIRE(b.download<double>(host.size()) == host);
    void* before = b.data();
    REQUIRE(b.reserve(8) == before);  // smaller requests never reallocate
    b.zero(host.size() * sizeof(double));
    REQUIRE(b.download<double>(host.size()) == std::vector<double>(host.size(), 0.0));
    std::vector<char> sink(b.size() + 1);  // large enough; the buffer is what is too small
    REQUIRE_THROWS_WITH(b.copy_to(sink.data(), Device::cpu, b.size() + 1),
                        Catch::Contains("bytes requested from"));
}

#if LSTM_WITH_CUDA
TEST_CASE("CUDA runtime answers without a device and errors name the device", "[cuda]") {
    const int count = cuda::device_count();  // must not throw, with or without a driver
    REQUIRE(count >= 0);
    if (count == 0) {
        REQUIRE_FALSE(cuda::device_available());
        REQUIRE_THROWS_WITH(cuda::Context(0), Catch::Contains("device 0 does not exist"));
        REQUIRE_THROWS_WITH(cuda::device_description(0), Catch::Contains("sees 0 CUDA device"));
    } else {
        REQUIRE_THROWS_WITH(cuda::Context(count), Catch::Contains("does not exist"));
    }
}

TEST_CASE("CUDA runtime refuses a null pointer before any device call", "[cuda]") {
    // zero_device once passed null straight to cudaMemsetAsync (copy_bytes already checked).
    CHECK_THROWS_AS(cuda::zero_device(nullptr, 16), InvalidArgument);
    CHECK_THROWS_WITH(cuda::zero_device(nullptr, 16),
                      Catch::Contains("zero_device: null ptr for 16 bytes"));
    CHECK_NOTHROW(cuda::zero_device(nullptr, 0));  // nothing to zero
    char c = 0;
    CHECK_THROWS_WITH(cuda::copy_bytes(nullptr, Device::cuda, &c, Device::cpu, 1),
                      Catch::Contains("copy_bytes: null dst for 1 bytes"));
}
#else
TEST_CASE("Buffer on device cuda without a CUDA build says so", "[buffer]") {
    REQUIRE_THROWS_WITH(Buffer(Device::cuda, 16), Catch::Contains("LSTM_WITH_CUDA=0"));
}
#endif

#if LSTM_WITH_CUDA
#include "lstm/cuda/internal/check.hpp"

TEST_CASE("CUDA, cuBLAS and cuDNN statuses become the right error kind", "[cuda][errors]") {
    // The status strings come from the libraries themselves, which answer without a device.
    CHECK_THROWS_AS(LSTM_CUDA_CHECK(cudaErrorMemoryAllocation), OutOfMemory);
    CHECK_THROWS_WITH(LSTM_CUDA_CHECK(cudaErrorMemoryAllocation),
                      Catch::Contains("cudaErrorMemoryAllocation") &&
                          Catch::Contains("tests/cuda_runtime_test.cpp"));
    CHECK_THROWS_AS(LSTM_CUDA_CHECK(cudaErrorInvalidValue), BackendError);
    CHECK_THROWS_AS(LSTM_CUBLAS_CHECK(CUBLAS_STATUS_ALLOC_FAILED), OutOfMemory);
    CHECK_THROWS_AS(LSTM_CUBLAS_CHECK(CUBLAS_STATUS_EXECUTION_FAILED), BackendError);
#if LSTM_WITH_CUDNN
    CHECK_THROWS_AS(LSTM_CUDNN_CHECK(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
                    OutOfMemory);
    CHECK_THROWS_AS(LSTM_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM), BackendError);
#endif
    CHECK_NOTHROW(LSTM_CUDA_CHECK(cudaSuccess));
}
#endif
