// The CUDA runtime surface: memory round trips through lstm::Buffer and the context's stream.
#include <catch2/catch.hpp>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"

using namespace lstm;

TEST_CASE("gpu: Buffer round trip through device memory on a context stream",
          "[gpu][runtime][memcheck]") {
    cuda::Context ctx;
    std::vector<float> host(1000);
    for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * float(i) - 7.0f;
    Buffer dev = Buffer::upload(Device::cuda, host, &ctx);
    REQUIRE(dev.device() == Device::cuda);
    const std::vector<float> back = dev.download<float>(host.size(), &ctx);
    REQUIRE(back == host);
    dev.zero(dev.size(), &ctx);
    const std::vector<float> zeros = dev.download<float>(host.size(), &ctx);
    REQUIRE(zeros == std::vector<float>(host.size(), 0.0f));
}

TEST_CASE("gpu: a context on a device that does not exist names it", "[gpu][runtime]") {
    REQUIRE_THROWS_WITH(cuda::Context(1000), Catch::Contains("device 1000 does not exist"));
}
