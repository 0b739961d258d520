#pragma once

// The state behind lstm::cuda::Context. For lstm_cuda's sources only (includes CUDA headers).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/internal/check.hpp"
#include "lstm/plan_cache.hpp"

#if LSTM_WITH_CUDNN
#include <cudnn.h>
#endif

namespace lstm::cuda {

// Per-context scratch of an operation other than an LSTM variant (the losses): whatever it
// keeps between calls, released in its destructor.
struct Scratch {
    virtual ~Scratch() = default;
};

// The operations that keep Scratch in a context, one slot each.
enum class ScratchSlot { cross_entropy, ctc, count };

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
    // A cuBLAS handle of its own for side stream 0 (created on first use). The main handle stays
    // bound to the main stream: cublasSetStream resets a handle's workspace to cuBLAS's pool,
    // which may allocate during graph capture, and two streams sharing one workspace would race.
    cublasHandle_t side_cublas();

    std::vector<cudaStream_t> side_streams;
    std::vector<cudaEvent_t> events;
    cublasHandle_t side_cublas_handle = nullptr;
    void* side_cublas_workspace = nullptr;
    // The scratch of `slot`, an S made on first use.
    template <typename S>
    S& scratch(ScratchSlot slot) {
        std::unique_ptr<Scratch>& held = scratches[static_cast<size_t>(slot)];
        if (!held) held = std::make_unique<S>();
        return static_cast<S&>(*held);
    }

    // The plans of calls made with this context (Context::plans()) and the losses' scratch. Both
    // may hold graphs and descriptors that reference the handles above, so release() drops them
    // first.
    PlanCache plans;
    std::unique_ptr<Scratch> scratches[static_cast<size_t>(ScratchSlot::count)];

private:
    // Releases whatever exists (null members are skipped) on the context's device: the
    // destructor's work, and the constructor's cleanup when a later step throws.
    void release() noexcept;
};

// The handles of a context, on the device the context is bound to.
inline Context::Impl& impl_of(Context* context) { return context->impl(); }

}  // namespace lstm::cuda
