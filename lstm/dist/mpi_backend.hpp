#pragma once

// MpiBackend: lstm::dist::Backend over an MPI communicator, for host buffers. Non-blocking
// allreduces are MPI_Iallreduce; OpenMPI advances them inside MPI calls, so on a single host
// thread the overlap with computation is partial (docs/distributed.md).

#include <mpi.h>

#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "lstm/dist/backend.hpp"
#include "lstm/error.hpp"

namespace lstm::dist {

class MpiBackend final : public Backend {
public:
    // Uses `comm` (not duplicated: the caller keeps it alive and ordered). MPI must be initialised
    // and not finalised (dist::MpiEnvironment alive) and `comm` not MPI_COMM_NULL, else
    // lstm::Error; the collectives refuse to run after MPI_Finalize too.
    explicit MpiBackend(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
        // Checked here because MPI itself would abort the process without a message we control.
        check_mpi_usable("MpiBackend");
        check(comm_ != MPI_COMM_NULL,
              "MpiBackend: comm must be a communicator, got MPI_COMM_NULL (this process is not "
              "in the group the communicator was made for)");
        call(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        call(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
        requests_.fill(MPI_REQUEST_NULL);
    }
    ~MpiBackend() override {
        // A request left pending would write into memory that may be gone; complete it.
        for (MPI_Request& r : requests_)
            if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    MpiBackend(const MpiBackend&) = delete;
    MpiBackend& operator=(const MpiBackend&) = delete;

    Device device() const override { return Device::cpu; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    MPI_Comm comm() const { return comm_; }

    // data: host, `count` elements of dtype, scaled in place by `scale` (finite) first, then
    // summed in place across ranks.
    Request start_allreduce_sum(void* data, int64_t count, DType dtype, double scale) override {
        // Everything that can refuse comes before the buffer is scaled: a refused call leaves the
        // caller's data as it was.
        check_mpi_usable("MpiBackend::start_allreduce_sum");
        check_count(count);
        check_scale("MpiBackend::start_allreduce_sum", scale, dtype);
        const int slot = free_slot();
        if (scale != 1.0) {
            if (dtype == DType::f32)
                scale_host(static_cast<float*>(data), count, static_cast<float>(scale));
            else
                scale_host(static_cast<double*>(data), count, scale);
        }
        call(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(dtype), MPI_SUM,
                            comm_, &requests_[static_cast<size_t>(slot)]),
             "MPI_Iallreduce");
        return make_request(slot);
    }
    void wait(Request& request) override {
        if (!request.pending()) return;
        check(request.owner == this, "MpiBackend::wait: the request belongs to another back-end");
        call(MPI_Wait(&requests_[static_cast<size_t>(request.slot)], MPI_STATUS_IGNORE),
             "MPI_Wait");
        request = Request{};
    }
    // The blocking collective directly: one call instead of start + wait.
    void allreduce_sum(void* data, int64_t count, DType dtype, double scale = 1.0) override {
        if (scale != 1.0) {
            Request r = start_allreduce_sum(data, count, dtype, scale);
            return wait(r);
        }
        check_mpi_usable("MpiBackend::allreduce_sum");
        check_count(count);
        call(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(dtype), MPI_SUM,
                           comm_),
             "MPI_Allreduce");
    }
    // data: host, `bytes`, overwritten with root's.
    void broadcast(void* data, size_t bytes, int root) override {
        check_mpi_usable("MpiBackend::broadcast");
        check(root >= 0 && root < size_, "MpiBackend::broadcast: root must be in [0, ", size_,
              "), got ", root);
        check(bytes <= static_cast<size_t>(INT_MAX),
              "MpiBackend::broadcast: bytes must be <= ", INT_MAX, " (MPI counts are int), got ",
              bytes);
        call(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), "MPI_Bcast");
    }
    [[noreturn]] void abort(int code) override {
        MPI_Abort(comm_, code);
        std::abort();  // MPI_Abort should not return; never fall back into the caller
    }

private:
    static void call(int status, const char* what) {
        if (status == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING];
        int length = 0;
        MPI_Error_string(status, text, &length);
        fail_as<BackendError>(what, " failed: ", text);
    }
    // MPI calls before MPI_Init or after MPI_Finalize end the process inside MPI; both queries
    // are allowed at any time.
    static void check_mpi_usable(const char* who) {
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        check(initialized && !finalized, who, ": MPI must be initialised and not yet finalised ",
              "(construct a dist::MpiEnvironment first and keep it alive), but it is ",
              finalized ? "already finalised" : "not initialised");
    }
    static void check_count(int64_t count) {
        check(count >= 0 && count <= INT_MAX, "MpiBackend: count must be in [0, ", INT_MAX,
              "] (MPI counts are int), got ", count);
    }
    static MPI_Datatype mpi_type(DType dtype) {
        return dtype == DType::f32 ? MPI_FLOAT : MPI_DOUBLE;
    }
    template <typename T>
    static void scale_host(T* data, int64_t count, T scale) {
        for (int64_t i = 0; i < count; ++i) data[i] *= scale;
    }
    int free_slot() const {
        for (int k = 0; k < kMaxPending; ++k)
            if (requests_[static_cast<size_t>(k)] == MPI_REQUEST_NULL) return k;
        fail("MpiBackend: more than ", kMaxPending, " allreduces in flight; wait() for some");
    }

    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
    std::array<MPI_Request, kMaxPending> requests_{};
};

}  // namespace lstm::dist
