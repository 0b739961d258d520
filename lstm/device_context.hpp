#pragma once

// lstm::DeviceContext: the cuda::Context that device-generic code (the bench, lstm_tool) needs
// for a variant on `device`, created only for Device::cuda, so that CPU runs never touch the CUDA
// runtime and a build without CUDA needs no context at all.

#include <memory>

#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#endif

namespace lstm {

namespace cuda {
class Context;  // lstm/cuda/context.hpp
}  // namespace cuda

class DeviceContext {
public:
    // Throws lstm::Error when `device` is cuda and this build has no CUDA back-end, or when the
    // context cannot be created (no device visible: the message says so).
    explicit DeviceContext(Device device) {
#if LSTM_WITH_CUDA
        if (device == Device::cuda) context_ = std::make_unique<cuda::Context>();
#else
        if (device != Device::cpu)
            fail_as<Unsupported>("device cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
    }

    // Null on the host, which is what ForwardArgs/BackwardArgs and lstm::Buffer expect there.
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

}  // namespace lstm
