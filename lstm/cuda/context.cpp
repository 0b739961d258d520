#include "lstm/cuda/context.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

bool graphs_enabled_by_default() {
    const char* value = std::getenv("LSTM_CUDA_GRAPHS");
    if (value == nullptr || *value == '\0' || std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    // A typo ("off", "false") would otherwise leave graphs on without a word.
    fail("LSTM_CUDA_GRAPHS = '", value, "' is not 0 or 1");
}

Context::Impl::Impl(int device_index) : device(device_index), graphs(graphs_enabled_by_default()) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    check(device_index >= 0 && device_index < count, "Context: device ", device_index,
          " does not exist; this process sees ", count, " CUDA device(s)");
    // The destructor does not run for a constructor that throws: release by hand what was made.
    try {
        LSTM_CUDA_CHECK(cudaSetDevice(device));
        LSTM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        LSTM_CUBLAS_CHECK(cublasCreate(&cublas));
        LSTM_CUBLAS_CHECK(cublasSetStream(cublas, stream));
        // FP32 math with FP32 accumulation: TF32 only where a caller opts in.
        LSTM_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
        LSTM_CUDA_CHECK(cudaMalloc(&cublas_workspace, kCublasWorkspaceBytes));
        LSTM_CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace, kCublasWorkspaceBytes));
#if LSTM_WITH_CUDNN
        LSTM_CUDNN_CHECK(cudnnCreate(&cudnn));
        LSTM_CUDNN_CHECK(cudnnSetStream(cudnn, stream));
#endif
    } catch (...) {
        release();
        throw;
    }
}

Context::Impl::~Impl() { release(); }

void Context::Impl::release() noexcept {
    const detail::DeviceGuard on_device(device, std::nothrow);
    // Plans may hold graphs and descriptors that reference the handles: release them first.
    plans.clear();
    for (std::unique_ptr<Scratch>& s : scratches) s.reset();
    if (stream) cudaStreamSynchronize(stream);
#if LSTM_WITH_CUDNN
    if (cudnn) cudnnDestroy(cudnn);
    cudnn = nullptr;
#endif
    if (side_cublas_handle) cublasDestroy(side_cublas_handle);
    side_cublas_handle = nullptr;
    if (side_cublas_workspace) cudaFree(side_cublas_workspace);
    side_cublas_workspace = nullptr;
    if (cublas) cublasDestroy(cublas);
    cublas = nullptr;
    if (cublas_workspace) cudaFree(cublas_workspace);
    cublas_workspace = nullptr;
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    events.clear();
    for (cudaStream_t s : side_streams) cudaStreamDestroy(s);
    side_streams.clear();
    if (stream) cudaStreamDestroy(stream);
    stream = nullptr;
    // A failed release leaves nothing to retry; keep its status from surfacing at a later,
    // unrelated check.
    cudaGetLastError();
}

cudaStream_t Context::Impl::side_stream(size_t i) {
    while (side_streams.size() <= i) {
        // Room first, so that a failing push_back cannot lose a created stream.
        side_streams.reserve(i + 1);
        cudaStream_t s = nullptr;
        LSTM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        side_streams.push_back(s);
    }
    return side_streams[i];
}

cudaEvent_t Context::Impl::event(size_t i) {
    while (events.size() <= i) {
        events.reserve(i + 1);
        cudaEvent_t e = nullptr;
        LSTM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        events.push_back(e);
    }
    return events[i];
}

cublasHandle_t Context::Impl::side_cublas() {
    if (side_cublas_handle) return side_cublas_handle;
    // The workspace is a member as soon as it exists, so release() frees it should a later step
    // throw; the handle becomes one only once it is set up.
    if (!side_cublas_workspace)
        LSTM_CUDA_CHECK(cudaMalloc(&side_cublas_workspace, kCublasWorkspaceBytes));
    cublasHandle_t handle = nullptr;
    LSTM_CUBLAS_CHECK(cublasCreate(&handle));
    try {
        LSTM_CUBLAS_CHECK(cublasSetStream(handle, side_stream(0)));
        // FP32 math, no TF32, as on the main handle.
        LSTM_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        LSTM_CUBLAS_CHECK(cublasSetWorkspace(handle, side_cublas_workspace, kCublasWorkspaceBytes));
    } catch (...) {
        cublasDestroy(handle);
        throw;
    }
    side_cublas_handle = handle;
    return handle;
}

void Context::ImplDeleter::operator()(Impl* impl) const noexcept { delete impl; }

Context::Context(int device) : impl_(new Impl(device)) {}
Context::~Context() = default;

int Context::device() const { return impl_->device; }
void* Context::stream() const { return impl_->stream; }
void Context::synchronize() const { LSTM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }
bool Context::graphs_enabled() const { return impl_->graphs; }
void Context::set_graphs_enabled(bool enabled) { impl_->graphs = enabled; }

size_t Context::release_plans() {
    Impl& impl = *impl_;
    const detail::DeviceGuard on_device(impl.device);
    // Queued work may still read a plan's buffers or replay its graph.
    LSTM_CUDA_CHECK(cudaStreamSynchronize(impl.stream));
    for (cudaStream_t side : impl.side_streams) LSTM_CUDA_CHECK(cudaStreamSynchronize(side));
    const size_t count = plan_count();
    impl.plans.clear();
    for (std::unique_ptr<Scratch>& s : impl.scratches) s.reset();
    return count;
}

size_t Context::plan_count() const {
    size_t count = impl_->plans.size();
    for (const std::unique_ptr<Scratch>& s : impl_->scratches) count += s != nullptr;
    return count;
}

PlanCache& Context::plans() const { return impl_->plans; }

}  // namespace lstm::cuda
