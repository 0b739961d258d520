#pragma once

// The state behind lstm::cuda::Context. For lstm_cuda's sources only (includes CUDA headers).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/internal/check.hpp"

#if LSTM_WITH_CUDNN
#include <cudnn.h>
#endif

namespace lstm::cuda {

// A plan is whatever a variant builds once per shape and reuses: descriptors, captured graphs,
// sizes. Plans own their CUDA objects and release them in their destructors.
struct Plan {
    virtual ~Plan() = default;
};

struct Context::Impl {
    // cuBLAS's recommended workspace on Hopper. Handing it over explicitly keeps cuBLAS from
    // allocating during stream capture, which would break the captured CUDA graphs.
    static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    void* cublas_workspace = nullptr;
#if LSTM_WITH_CUDNN
    cudnnHandle_t cudnn = nullptr;
#endif
    // Context::graphs_enabled(): whether `fused` may capture and replay CUDA graphs.
    bool graphs = true;

    // Creates everything above; on a failure part-way releases what it had created and rethrows.
    explicit Impl(int device_index);
    ~Impl();
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    // Side stream i (created on first use), for work independent of the main stream: the
    // wavefront of layers and directions. Callers order it with events from event().
    cudaStream_t side_stream(size_t i);
    // Event i of a pool (created on first use, timing disabled: used only for ordering).
    cudaEvent_t event(size_t i);

    // The plan stored under `key`, built by `make()` (returning std::unique_ptr<P>) when absent.
    // Keys name the variant and everything the plan depends on (shape, dtype, pointers).
    template <typename P, typename Make>
    P& plan(const std::string& key, Make&& make) {
        auto it = plans.find(key);
        if (it == plans.end()) it = plans.emplace(key, std::unique_ptr<Plan>(make())).first;
        return static_cast<P&>(*it->second);
    }

    std::vector<cudaStream_t> side_streams;
    std::vector<cudaEvent_t> events;
    std::unordered_map<std::string, std::unique_ptr<Plan>> plans;

private:
    // Releases whatever exists (null members are skipped) on the context's device: the
    // destructor's work, and the constructor's cleanup when a later step throws.
    void release() noexcept;
};

// The handles of a context, on the device the context is bound to.
inline Context::Impl& impl_of(Context* context) { return context->impl(); }

}  // namespace lstm::cuda
