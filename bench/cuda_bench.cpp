#include "cuda_bench.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "reference_check.hpp"

#if LSTM_WITH_CUDA
#include <cuda_runtime.h>

#include "lstm/cuda/context.hpp"
#include "lstm/cuda/runtime.hpp"
#endif

namespace lstm::bench {

std::optional<std::string> why_device_unavailable(const Variant& variant) {
    if (variant.device() == Device::cpu) return std::nullopt;
#if LSTM_WITH_CUDA
    if (cuda::device_available()) return std::nullopt;
    return std::string("no CUDA device visible: the '") + variant.name() +
           "' variant is compiled in, but this process sees no GPU (driver or device missing)";
#else
    return std::string("no CUDA device visible: this build has no CUDA back-end");
#endif
}

// --------------------------------------------------------------------------------------------
// StepTimer
// --------------------------------------------------------------------------------------------

#if LSTM_WITH_CUDA

namespace {

void check_cuda(cudaError_t status, const char* what) {
    check(status == cudaSuccess, "lstm_bench: ", what, " failed: ", cudaGetErrorString(status));
}

cudaStream_t stream_of(cuda::Context* context) {
    return static_cast<cudaStream_t>(context->stream());
}

}  // namespace

StepTimer::StepTimer(cuda::Context* context) : context_(context) {
    if (context_ == nullptr) return;
    cudaEvent_t a = nullptr, b = nullptr;
    check_cuda(cudaEventCreate(&a), "cudaEventCreate");
    check_cuda(cudaEventCreate(&b), "cudaEventCreate");
    start_ = a;
    stop_ = b;
}

StepTimer::~StepTimer() {
    if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
    if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void StepTimer::start() {
    if (context_ == nullptr) return;
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), stream_of(context_)),
               "cudaEventRecord");
}

void StepTimer::stop(benchmark::State& state) {
    if (context_ == nullptr) return;
    const auto stop = static_cast<cudaEvent_t>(stop_);
    check_cuda(cudaEventRecord(stop, stream_of(context_)), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), stop),
               "cudaEventElapsedTime");
    constexpr double kSecondsPerMs = 1e-3;
    state.SetIterationTime(static_cast<double>(ms) * kSecondsPerMs);
}

#else

StepTimer::StepTimer(cuda::Context* context) : context_(context) {
    check(context == nullptr, "StepTimer: a CUDA context in a build without CUDA");
}
StepTimer::~StepTimer() = default;
void StepTimer::start() {}
void StepTimer::stop(benchmark::State&) {}

#endif

// --------------------------------------------------------------------------------------------
// The reference check
// --------------------------------------------------------------------------------------------

// reference::run_variant_parts runs a variant in its own memory space (lstm::LstmProblem), so
// the host check covers a cuda variant too: its inputs go to device buffers and come back.
std::optional<std::string> check_on_device_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, Span<const float> params, bool with_split, const std::string& path,
    Precision precision) {
    return check_against_reference(variant, config, x, lengths, params, with_split, path,
                                   precision);
}

std::optional<std::string> check_layer_against_reference(
    const Variant& variant, const Config& config, TensorView<const float> x,
    Span<const int64_t> lengths, const LstmT<float>& layer, bool with_split) {
    std::vector<float> params(static_cast<size_t>(param_count(config)));
    layer.store_parameters(Span<float>(params));
    return check_on_device_against_reference(variant, config, x, lengths, Span<const float>(params),
                                             with_split, layer.path(), layer.precision());
}

}  // namespace lstm::bench
