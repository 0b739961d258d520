#pragma once

// lstm::cuda::Context: everything a CUDA variant needs besides its arguments: the stream every
// call is ordered on, the cuBLAS and cuDNN handles bound to it, side streams for overlapping
// independent layers and directions, and per-shape plans (cuDNN descriptors, captured CUDA
// graphs) built on a call's first use and reused after. Nothing of it is global, so two contexts
// never share state. A context is used by one host thread at a time.
//
// Public: no CUDA header is included; lstm_cuda's own sources reach the handles through
// lstm/cuda/internal/context_impl.hpp.

#include <cstddef>
#include <memory>

#include "lstm/cuda/link.hpp"

namespace lstm {
class PlanCache;
}

namespace lstm::cuda {

class Context {
public:
    // Binds to `device` (and makes it current, as cudaSetDevice would), creates a non-blocking
    // stream and the library handles on it. Throws lstm::Error naming the failing call when the
    // device is missing or a handle fails; whatever was created before the failure is released.
    // Every library call that takes the context makes its device current for the call and
    // restores the caller's current device afterwards. In a program that does not link
    // lstm::cuda it throws lstm::Unsupported saying so.
    explicit Context(int device = 0);
    LSTM_CUDA_ENTRY ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    LSTM_CUDA_ENTRY int device() const;
    // The cudaStream_t every call made with this context is queued on.
    LSTM_CUDA_ENTRY void* stream() const;
    // Blocks until all work queued on stream() has finished; throws on an asynchronous error.
    LSTM_CUDA_ENTRY void synchronize() const;

    // Whether `fused` (cuda) may capture a repeated call into a CUDA graph and replay it (see
    // lstm/variants/cuda_fused.hpp). On unless the environment variable LSTM_CUDA_GRAPHS is "0"
    // when the context is constructed. Off: every call runs eagerly; graphs captured before stay
    // cached and are replayed again once it is turned back on.
    LSTM_CUDA_ENTRY bool graphs_enabled() const;
    LSTM_CUDA_ENTRY void set_graphs_enabled(bool enabled);

    // Direct Variant calls made with this context keep their plans here (descriptors, scratch in
    // device and pinned host memory, for `fused` a captured graph per set of buffer addresses),
    // so that a repeated call allocates nothing: one lstm::PlanCache (lstm/plan_cache.hpp), the
    // key and the bounds every plan cache has, the least recently used plan dropped first (an
    // lstm::Lstm keeps its own plans in its own cache). release_plans() waits for the work
    // queued on the context (its stream and side streams), then frees every plan here, and
    // returns how many it freed. The next calls rebuild what they need (with the same results).
    // Call it between training steps, not between a forward and its backward (cuDNN's backward
    // expects the forward's descriptors), and not while another thread uses the context.
    // plan_count() says how many are held. Plans of a variant you registered yourself stay here
    // after the variant is gone: release them before destroying it.
    LSTM_CUDA_ENTRY PlanCache& plans() const;
    LSTM_CUDA_ENTRY size_t release_plans();
    LSTM_CUDA_ENTRY size_t plan_count() const;

    // Internal state, defined in lstm/cuda/internal/context_impl.hpp (lstm_cuda only).
    struct Impl;
    Impl& impl() const { return *impl_; }

private:
    // Out of line (context.cpp), so that code compiled without Impl's definition (the CPU part's
    // stand-in constructor, lstm/cuda/absent.cpp) needs none to clean up.
    struct ImplDeleter {
        LSTM_CUDA_ENTRY void operator()(Impl* impl) const noexcept;
    };
    std::unique_ptr<Impl, ImplDeleter> impl_;
};

// What graphs_enabled() of a Context constructed now starts as: false when the environment
// variable LSTM_CUDA_GRAPHS is "0", true when it is "1", empty or unset; any other value is an
// lstm::InvalidArgument. Needs no device.
bool graphs_enabled_by_default();

}  // namespace lstm::cuda
