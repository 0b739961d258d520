#include "lstm/cuda/context.hpp"

#include "lstm/cuda/internal/context_impl.hpp"

namespace lstm::cuda {

Context::Impl::Impl(int device_index) : device(device_index) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    check(device_index >= 0 && device_index < count, "Context: device ", device_index,
          " does not exist; this process sees ", count, " CUDA device(s)");
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
}

Context::Impl::~Impl() {
    // Plans may hold graphs and descriptors that reference the handles: release them first.
    plans.clear();
    if (stream) cudaStreamSynchronize(stream);
#if LSTM_WITH_CUDNN
    if (cudnn) cudnnDestroy(cudnn);
#endif
    if (cublas) cublasDestroy(cublas);
    if (cublas_workspace) cudaFree(cublas_workspace);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaStream_t s : side_streams) cudaStreamDestroy(s);
    if (stream) cudaStreamDestroy(stream);
}

cudaStream_t Context::Impl::side_stream(size_t i) {
    while (side_streams.size() <= i) {
        cudaStream_t s = nullptr;
        LSTM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        side_streams.push_back(s);
    }
    return side_streams[i];
}

cudaEvent_t Context::Impl::event(size_t i) {
    while (events.size() <= i) {
        cudaEvent_t e = nullptr;
        LSTM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        events.push_back(e);
    }
    return events[i];
}

Context::Context(int device) : impl_(std::make_unique<Impl>(device)) {}
Context::~Context() = default;

int Context::device() const { return impl_->device; }
void* Context::stream() const { return impl_->stream; }
void Context::synchronize() const { LSTM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

}  // namespace lstm::cuda
