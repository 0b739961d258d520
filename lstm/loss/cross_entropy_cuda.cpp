// Host side of the CUDA softmax cross-entropy: uploads the targets, lengths and class weights
// into a scratch plan of the context, launches kernels/cuda/cross_entropy.cu and brings the loss
// sum back.

#include "lstm/loss/cross_entropy_cuda.hpp"

#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/cross_entropy.hpp"
#include "lstm/buffer.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

namespace {

// Per-context scratch of the cross-entropy: it only grows, so repeated calls of the same or
// smaller size allocate nothing.
struct CrossEntropyPlan : Scratch {
    Buffer device{Device::cuda};
    std::vector<unsigned char> staging;  // host mirror of the upload part
};

// Byte offsets into the device scratch; every piece 256-byte aligned, like cudaMalloc's result.
struct CeLayout {
    size_t targets = 0, lengths = 0, weight = 0, upload_bytes = 0, row_loss = 0, total = 0,
           bytes = 0;
};

CeLayout ce_layout(int64_t rows, int64_t batch, bool with_lengths, size_t weight_bytes) {
    constexpr size_t kAlign = 256;
    size_t at = 0;
    auto take = [&](size_t bytes) {
        const size_t start = (at + kAlign - 1) / kAlign * kAlign;
        at = start + bytes;
        return start;
    };
    CeLayout l;
    l.targets = take(static_cast<size_t>(rows) * sizeof(int32_t));
    l.lengths = take(with_lengths ? static_cast<size_t>(batch) * sizeof(int32_t) : 0);
    l.weight = take(weight_bytes);
    l.upload_bytes = at;
    l.row_loss = take(static_cast<size_t>(rows) * sizeof(double));
    l.total = take(sizeof(double));
    l.bytes = (at + kAlign - 1) / kAlign * kAlign;
    return l;
}

template <typename T>
double run(Context& context, int64_t rows, int64_t classes, int64_t batch, const int64_t* lengths,
           const T* logits, const int64_t* targets, const kernels::cpu::CeOptions<T>& options,
           T scale, T* losses, T* grad) {
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    check(classes <= kInt32Max, "cross_entropy: C = ", classes,
          " classes exceed what the cuda kernels index (2^31 - 1)");
    // The kernels read the lengths as int32, and a length may be as large as T: past INT32_MAX
    // the upload below would wrap it. (Only cross_entropy_frames passes lengths.)
    const int64_t steps = lengths != nullptr && batch > 0 ? rows / batch : 0;
    check(steps <= kInt32Max, "cross_entropy_frames: T = ", steps,
          " frames exceed what the cuda kernels take as a length (int32, at most ", kInt32Max, ")");
    Context::Impl& impl = context.impl();
    const detail::DeviceGuard on_device(impl.device);
    auto& plan = impl.scratch<CrossEntropyPlan>(ScratchSlot::cross_entropy);
    const size_t weight_bytes = options.weight ? static_cast<size_t>(classes) * sizeof(T) : 0;
    const CeLayout layout = ce_layout(rows, batch, lengths != nullptr, weight_bytes);
    plan.device.reserve(layout.bytes);
    if (plan.staging.size() < layout.upload_bytes) plan.staging.resize(layout.upload_bytes);

    // Targets as int32 for valid rows, kCeIgnored for those of ignore_index (whatever value it
    // has, so the kernels need not know it); padded rows' targets are never read, so they stay 0.
    unsigned char* host = plan.staging.data();
    auto* targets32 = reinterpret_cast<int32_t*>(host + layout.targets);
    auto* lengths32 = reinterpret_cast<int32_t*>(host + layout.lengths);
    for (int64_t r = 0; r < rows; ++r) {
        const bool valid = lengths == nullptr || r / batch < lengths[r % batch];
        targets32[r] = !valid                               ? 0
                       : targets[r] == options.ignore_index ? kernels::cuda::kCeIgnored
                                                            : static_cast<int32_t>(targets[r]);
    }
    if (lengths)
        for (int64_t n = 0; n < batch; ++n) lengths32[n] = static_cast<int32_t>(lengths[n]);
    if (weight_bytes > 0) std::memcpy(host + layout.weight, options.weight, weight_bytes);

    auto* base = static_cast<unsigned char*>(plan.device.data());
    if (layout.upload_bytes > 0)
        LSTM_CUDA_CHECK(
            cudaMemcpyAsync(base, host, layout.upload_bytes, cudaMemcpyHostToDevice, impl.stream));
    kernels::cuda::CeArgs<T> a;
    a.rows = rows;
    a.classes = classes;
    a.batch = lengths ? batch : rows;
    a.lengths = lengths ? reinterpret_cast<const int32_t*>(base + layout.lengths) : nullptr;
    a.logits = logits;
    a.targets = reinterpret_cast<const int32_t*>(base + layout.targets);
    a.weight = options.weight ? reinterpret_cast<const T*>(base + layout.weight) : nullptr;
    a.weight_sum = options.weight_sum;
    a.smoothing = options.smoothing;
    a.scale = scale;
    a.losses = losses;
    a.grad = grad;
    a.row_loss = reinterpret_cast<double*>(base + layout.row_loss);
    a.total = reinterpret_cast<double*>(base + layout.total);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_cross_entropy(a, impl.stream));
    double total = 0.0;
    LSTM_CUDA_CHECK(
        cudaMemcpyAsync(&total, a.total, sizeof total, cudaMemcpyDeviceToHost, impl.stream));
    LSTM_CUDA_CHECK(cudaStreamSynchronize(impl.stream));
    return total;
}

}  // namespace

double cross_entropy_rows(Context& context, int64_t rows, int64_t classes, int64_t batch,
                          const int64_t* lengths, const float* logits, const int64_t* targets,
                          const kernels::cpu::CeOptions<float>& options, float scale, float* losses,
                          float* grad) {
    return run(context, rows, classes, batch, lengths, logits, targets, options, scale, losses,
               grad);
}

double cross_entropy_rows(Context& context, int64_t rows, int64_t classes, int64_t batch,
                          const int64_t* lengths, const double* logits, const int64_t* targets,
                          const kernels::cpu::CeOptions<double>& options, double scale,
                          double* losses, double* grad) {
    return run(context, rows, classes, batch, lengths, logits, targets, options, scale, losses,
               grad);
}

}  // namespace lstm::cuda
