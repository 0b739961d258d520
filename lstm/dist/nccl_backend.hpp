#pragma once

// NcclBackend: lstm::dist::Backend over an NCCL communicator, for device buffers. Collectives run
// on a side stream of their own, ordered after the work queued so far on the model's
// cuda::Context stream, so that an allreduce of one layer's gradient overlaps the backward of the
// layers below it; wait() orders the context's stream after the reduction without blocking the
// host. Compiled in lstm_dist_nccl (lstm/dist/nccl_backend.cpp); this header includes no CUDA or
// NCCL header. One GPU per rank: the context's device.

#include <memory>

#include "lstm/dist/backend.hpp"

namespace lstm::cuda {
class Context;
}

namespace lstm::dist {

class NcclBackend final : public Backend {
public:
    // Joins the NCCL clique of all ranks of `bootstrap` (collective over it: rank 0 creates the
    // clique id and broadcasts it). `context` (its device and stream) must outlive the back-end.
    NcclBackend(Backend& bootstrap, cuda::Context& context);
    ~NcclBackend() override;
    NcclBackend(const NcclBackend&) = delete;
    NcclBackend& operator=(const NcclBackend&) = delete;

    Device device() const override { return Device::cuda; }
    int rank() const override;
    int size() const override;
    // data: device, `count` elements of dtype; sum over ranks of scale * data (NCCL's
    // pre-multiplied sum), in place. Queued; the host does not wait.
    Request start_allreduce_sum(void* data, int64_t count, DType dtype, double scale) override;
    // Orders the context's stream after the reduction; the host reads the result only after
    // context.synchronize().
    void wait(Request& request) override;
    // data: device, `bytes`, overwritten with root's; the context's stream is ordered after it.
    void broadcast(void* data, size_t bytes, int root) override;
    // ncclCommAbort (so no rank waits in a kernel for a dead peer), then the bootstrap's abort.
    [[noreturn]] void abort(int code) override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace lstm::dist
