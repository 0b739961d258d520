#include "lstm/cuda/layer_ops.hpp"

#include "kernels/cuda/layer_ops.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

template <typename T>
void dropout(Context& context, int64_t count, uint64_t key, double p, T scale, const T* src,
             T* mask, T* dst) {
    const detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_dropout_mask<T>(count, key, p, scale, src, mask,
                                                                 dst, context.stream()));
}

template <typename T>
void multiply(Context& context, int64_t count, const T* src, const T* mask, T* dst) {
    const detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(
        kernels::cuda::launch_mask_multiply<T>(count, src, mask, dst, context.stream()));
}

template <typename T>
void swap_leading_dims(Context& context, int64_t a, int64_t b, int64_t c, const T* src, T* dst) {
    const detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(
        kernels::cuda::launch_swap_leading_dims<T>(a, b, c, src, dst, context.stream()));
}

#define LSTM_INSTANTIATE_LAYER_OPS_CUDA(T)                                              \
    template void dropout<T>(Context&, int64_t, uint64_t, double, T, const T*, T*, T*); \
    template void multiply<T>(Context&, int64_t, const T*, const T*, T*);               \
    template void swap_leading_dims<T>(Context&, int64_t, int64_t, int64_t, const T*, T*);
LSTM_INSTANTIATE_LAYER_OPS_CUDA(float)
LSTM_INSTANTIATE_LAYER_OPS_CUDA(double)
#undef LSTM_INSTANTIATE_LAYER_OPS_CUDA

}  // namespace lstm::cuda
