#include "lstm/nn/sequence_cuda.hpp"

#include "kernels/cuda/sequence.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::nn::detail {

template <typename T>
void gather_last_step_cuda(cuda::Context& context, int64_t steps, int64_t batch, int64_t features,
                           const int64_t* lengths, const T* y, T* out) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_gather_last_step<T>(
        steps, batch, features, lengths, y, out, context.stream()));
}

template <typename T>
void scatter_last_step_cuda(cuda::Context& context, int64_t steps, int64_t batch, int64_t features,
                            const int64_t* lengths, const T* dout, T* dy) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_scatter_last_step<T>(
        steps, batch, features, lengths, dout, dy, context.stream()));
}

template <typename T>
void mean_pool_steps_cuda(cuda::Context& context, int64_t steps, int64_t batch, int64_t features,
                          const int64_t* lengths, const T* y, T* out) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_mean_pool<T>(steps, batch, features, lengths, y,
                                                              out, context.stream()));
}

template <typename T>
void scatter_mean_pool_cuda(cuda::Context& context, int64_t steps, int64_t batch, int64_t features,
                            const int64_t* lengths, const T* dout, T* dy) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_scatter_mean_pool<T>(
        steps, batch, features, lengths, dout, dy, context.stream()));
}

#define LSTM_INSTANTIATE_SEQUENCE_CUDA(T)                                              \
    template void gather_last_step_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t,  \
                                           const int64_t*, const T*, T*);              \
    template void scatter_last_step_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t, \
                                            const int64_t*, const T*, T*);             \
    template void mean_pool_steps_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t,   \
                                          const int64_t*, const T*, T*);               \
    template void scatter_mean_pool_cuda<T>(cuda::Context&, int64_t, int64_t, int64_t, \
                                            const int64_t*, const T*, T*);
LSTM_INSTANTIATE_SEQUENCE_CUDA(float)
LSTM_INSTANTIATE_SEQUENCE_CUDA(double)
#undef LSTM_INSTANTIATE_SEQUENCE_CUDA

}  // namespace lstm::nn::detail
