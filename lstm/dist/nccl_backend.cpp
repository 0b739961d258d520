// NcclBackend (lstm/dist/nccl_backend.hpp): NCCL collectives on a side stream, ordered against
// the model's cuda::Context stream with events.

#include "lstm/dist/nccl_backend.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <cstdlib>

#include "lstm/cuda/context.hpp"
#include "lstm/error.hpp"

namespace lstm::dist {

namespace {

void check_cuda(cudaError_t status, const char* call) {
    if (status != cudaSuccess)
        fail_as<BackendError>("NcclBackend: ", call, " failed: ", cudaGetErrorName(status), " (",
                              cudaGetErrorString(status), ")");
}

void check_nccl(ncclResult_t status, const char* call) {
    if (status != ncclSuccess)
        fail_as<BackendError>("NcclBackend: ", call, " failed: ", ncclGetErrorString(status));
}

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::f32 ? ncclFloat32 : ncclFloat64; }

}  // namespace

struct NcclBackend::Impl {
    static constexpr int kMaxPending = Backend::kMaxPending;

    Backend* bootstrap = nullptr;
    ncclComm_t comm = nullptr;
    cudaStream_t main = nullptr;     // the context's stream (not owned)
    cudaStream_t side = nullptr;     // the collectives' own stream
    cudaEvent_t produced = nullptr;  // recorded on main: the buffer's producers are queued before
    std::array<cudaEvent_t, kMaxPending> done{};
    std::array<bool, kMaxPending> busy{};
    int rank = 0, size = 1;

    // The side stream waits for what main has queued so far (the gradient being produced).
    void after_main() {
        check_cuda(cudaEventRecord(produced, main), "cudaEventRecord");
        check_cuda(cudaStreamWaitEvent(side, produced, 0), "cudaStreamWaitEvent");
    }
    int free_slot() const {
        for (int k = 0; k < kMaxPending; ++k)
            if (!busy[static_cast<size_t>(k)]) return k;
        fail("NcclBackend: more than ", kMaxPending, " allreduces in flight; wait() for some");
    }
};

NcclBackend::NcclBackend(Backend& bootstrap, cuda::Context& context)
    : impl_(std::make_unique<Impl>()) {
    check(bootstrap.device() == Device::cpu,
          "NcclBackend: the bootstrap back-end must reduce host buffers (MpiBackend), got one for ",
          to_string(bootstrap.device()));
    Impl& m = *impl_;
    m.bootstrap = &bootstrap;
    m.rank = bootstrap.rank();
    m.size = bootstrap.size();
    check_cuda(cudaSetDevice(context.device()), "cudaSetDevice");
    m.main = static_cast<cudaStream_t>(context.stream());
    check_cuda(cudaStreamCreateWithFlags(&m.side, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&m.produced, cudaEventDisableTiming), "cudaEventCreate");
    for (cudaEvent_t& e : m.done)
        check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    ncclUniqueId id{};
    if (m.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap.broadcast(&id, sizeof(id), 0);
    check_nccl(ncclCommInitRank(&m.comm, m.size, id, m.rank), "ncclCommInitRank");
}

NcclBackend::~NcclBackend() {
    Impl& m = *impl_;
    // Destructors do not throw: a failure here has nothing left to report to.
    if (m.side) cudaStreamSynchronize(m.side);
    if (m.comm) ncclCommDestroy(m.comm);
    for (cudaEvent_t e : m.done)
        if (e) cudaEventDestroy(e);
    if (m.produced) cudaEventDestroy(m.produced);
    if (m.side) cudaStreamDestroy(m.side);
}

int NcclBackend::rank() const { return impl_->rank; }
int NcclBackend::size() const { return impl_->size; }

Request NcclBackend::start_allreduce_sum(void* data, int64_t count, DType dtype, double scale) {
    check(count >= 0, "NcclBackend: count must be >= 0, got ", count);
    check_scale("NcclBackend::start_allreduce_sum", scale, dtype);
    Impl& m = *impl_;
    const int slot = m.free_slot();
    m.after_main();
    const size_t n = static_cast<size_t>(count);
    if (scale == 1.0) {
        check_nccl(ncclAllReduce(data, data, n, nccl_type(dtype), ncclSum, m.comm, m.side),
                   "ncclAllReduce");
    } else {
        // The scalar is read at creation (host immediate), so a local suffices; an operator may
        // be destroyed as soon as the call that uses it has returned.
        const float scale_f = static_cast<float>(scale);
        const void* scalar = dtype == DType::f32 ? static_cast<const void*>(&scale_f)
                                                 : static_cast<const void*>(&scale);
        ncclRedOp_t op{};
        check_nccl(ncclRedOpCreatePreMulSum(&op, const_cast<void*>(scalar), nccl_type(dtype),
                                            ncclScalarHostImmediate, m.comm),
                   "ncclRedOpCreatePreMulSum");
        check_nccl(ncclAllReduce(data, data, n, nccl_type(dtype), op, m.comm, m.side),
                   "ncclAllReduce");
        check_nccl(ncclRedOpDestroy(op, m.comm), "ncclRedOpDestroy");
    }
    check_cuda(cudaEventRecord(m.done[static_cast<size_t>(slot)], m.side), "cudaEventRecord");
    m.busy[static_cast<size_t>(slot)] = true;
    return make_request(slot);
}

void NcclBackend::wait(Request& request) {
    if (!request.pending()) return;
    check(request.owner == this, "NcclBackend::wait: the request belongs to another back-end");
    Impl& m = *impl_;
    const size_t slot = static_cast<size_t>(request.slot);
    check_cuda(cudaStreamWaitEvent(m.main, m.done[slot], 0), "cudaStreamWaitEvent");
    m.busy[slot] = false;
    request = Request{};
}

void NcclBackend::broadcast(void* data, size_t bytes, int root) {
    Impl& m = *impl_;
    check(root >= 0 && root < m.size, "NcclBackend::broadcast: root must be in [0, ", m.size,
          "), got ", root);
    m.after_main();
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, m.comm, m.side), "ncclBroadcast");
    check_cuda(cudaEventRecord(m.produced, m.side), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(m.main, m.produced, 0), "cudaStreamWaitEvent");
}

void NcclBackend::abort(int code) {
    if (impl_->comm) ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    impl_->bootstrap->abort(code);
    std::abort();  // a virtual call does not carry [[noreturn]] to the compiler
}

}  // namespace lstm::dist
