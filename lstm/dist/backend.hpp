#pragma once

// lstm::dist::Backend: the collectives data-parallel training needs, for buffers of one memory
// space. MpiBackend (lstm/dist/mpi_backend.hpp) serves host buffers, NcclBackend
// (lstm/dist/nccl_backend.hpp) device buffers; dist::Communicator picks one by a buffer's device.
// Every rank must issue the same collectives in the same order, as in MPI and NCCL.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::dist {

class Backend;

// A started non-blocking allreduce: wait for it (Backend::wait or Communicator::wait) before the
// buffer is read or written again. A default Request is "nothing pending"; waiting on it is a
// no-op.
struct Request {
    Backend* owner = nullptr;
    int slot = -1;
    bool pending() const { return owner != nullptr; }
};

class Backend {
public:
    // The most allreduces a back-end keeps in flight at once: DataParallel's per-layer overlap
    // has one per LSTM layer plus the dense head's. Fixed slots keep starting one free of
    // allocation.
    static constexpr int kMaxPending = 32;

    virtual ~Backend() = default;

    // The memory space whose buffers this back-end reduces.
    virtual Device device() const = 0;
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // Starts data <- sum over ranks of (scale * data): `count` elements of `dtype` in device()
    // memory, in place. `scale` is applied to this rank's contribution before the sum (gradient
    // averaging without a separate pass). The buffer must not be touched until wait().
    virtual Request start_allreduce_sum(void* data, int64_t count, DType dtype, double scale) = 0;
    // Completes `request` (and resets it): on the host the data is final on return; on a device
    // the caller's stream is ordered after the reduction (see the back-end).
    virtual void wait(Request& request) = 0;
    // The blocking form of start_allreduce_sum + wait.
    virtual void allreduce_sum(void* data, int64_t count, DType dtype, double scale = 1.0) {
        Request request = start_allreduce_sum(data, count, dtype, scale);
        wait(request);
    }
    // data (`bytes` in device() memory) <- root's bytes on every rank; overwrites.
    virtual void broadcast(void* data, size_t bytes, int root) = 0;
    // Ends every rank of the job with exit status `code`; does not return.
    [[noreturn]] virtual void abort(int code) = 0;

protected:
    Request make_request(int slot) { return Request{this, slot}; }
};

inline size_t dtype_bytes(DType dtype) {
    return dtype == DType::f32 ? sizeof(float) : sizeof(double);
}

// Refuses a scale that would turn every rank's sum into NaN or inf (checked in the buffer's
// precision: 1e300 is finite as a double but inf as a float). `who` names the back-end.
inline void check_scale(const char* who, double scale, DType dtype) {
    const bool finite =
        dtype == DType::f32 ? std::isfinite(static_cast<float>(scale)) : std::isfinite(scale);
    check(finite, who, ": scale must be finite in ", to_string(dtype), ", got ", scale);
}

}  // namespace lstm::dist
