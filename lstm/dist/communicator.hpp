#pragma once

// lstm::dist::Communicator: one handle for the collectives of data-parallel training, which
// sends each buffer to the back-end of its memory space: host buffers to the host back-end (MPI),
// device buffers to the device back-end (NCCL). Both span the same ranks in the same order.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "lstm/dist/backend.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::dist {

class Communicator {
public:
    // `host` reduces host buffers; `device` (optional) device buffers. Both must outlive this
    // object and agree on rank and size.
    explicit Communicator(Backend& host, Backend* device = nullptr)
        : host_(&host), device_(device) {
        check(host.device() == Device::cpu,
              "Communicator: the host back-end must reduce cpu buffers, got one for ",
              to_string(host.device()));
        if (device_ == nullptr) return;
        check(device_->device() == Device::cuda,
              "Communicator: the device back-end must reduce cuda buffers, got one for ",
              to_string(device_->device()));
        check(device_->rank() == host.rank() && device_->size() == host.size(),
              "Communicator: the back-ends disagree: host is rank ", host.rank(), " of ",
              host.size(), ", device rank ", device_->rank(), " of ", device_->size());
    }

    int rank() const { return host_->rank(); }
    int size() const { return host_->size(); }

    // The back-end that reduces buffers of `device`; lstm::Error when there is none.
    Backend& backend_for(Device device) const {
        if (device == Device::cpu) return *host_;
        check(device_ != nullptr,
              "Communicator: a cuda buffer needs a device back-end (NcclBackend; build with "
              "LSTM_NCCL), but this communicator has only a host one");
        return *device_;
    }

    // buffer (any shape, contiguous, host or device): scale * buffer summed over ranks, in place.
    template <typename T>
    void allreduce_sum(TensorView<T> buffer, double scale = 1.0) {
        backend_for(buffer.device())
            .allreduce_sum(buffer.data(), buffer.numel(), dtype_of<T>(), scale);
    }
    // The non-blocking form: the buffer must not be touched until wait() on the result.
    template <typename T>
    Request start_allreduce_sum(TensorView<T> buffer, double scale = 1.0) {
        return backend_for(buffer.device())
            .start_allreduce_sum(buffer.data(), buffer.numel(), dtype_of<T>(), scale);
    }
    // Completes a request of either back-end; a default (empty) request is a no-op.
    void wait(Request& request) {
        if (request.pending()) request.owner->wait(request);
    }
    // buffer (host or device) <- root's values on every rank; overwrites.
    template <typename T>
    void broadcast(TensorView<T> buffer, int root = 0) {
        backend_for(buffer.device())
            .broadcast(buffer.data(), static_cast<size_t>(buffer.numel()) * sizeof(T), root);
    }
    // Ends every rank of the job (the device back-end first, so no GPU kernel waits for a peer
    // that is gone); does not return.
    [[noreturn]] void abort(int code) {
        if (device_ != nullptr) device_->abort(code);
        host_->abort(code);
        std::abort();  // a virtual call does not carry [[noreturn]] to the compiler
    }

private:
    Backend* host_;
    Backend* device_;
};

}  // namespace lstm::dist
