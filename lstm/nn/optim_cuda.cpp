#include "lstm/nn/optim_cuda.hpp"

#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::nn::detail {

template <typename T>
void sgd_step_cuda(cuda::Context& context, int64_t n, T* p, const T* g, T* buf,
                   const kernels::SgdCoefficients<T>& c) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_sgd_step<T>(n, p, g, buf, c, context.stream()));
}

template <typename T>
void adam_step_cuda(cuda::Context& context, int64_t n, T* p, const T* g, T* m, T* v,
                    const kernels::AdamCoefficients<T>& c) {
    const cuda::detail::DeviceGuard on_device(context);
    LSTM_CUDA_CHECK_LAUNCH(kernels::cuda::launch_adam_step<T>(n, p, g, m, v, c, context.stream()));
}

template void sgd_step_cuda<float>(cuda::Context&, int64_t, float*, const float*, float*,
                                   const kernels::SgdCoefficients<float>&);
template void sgd_step_cuda<double>(cuda::Context&, int64_t, double*, const double*, double*,
                                    const kernels::SgdCoefficients<double>&);
template void adam_step_cuda<float>(cuda::Context&, int64_t, float*, const float*, float*, float*,
                                    const kernels::AdamCoefficients<float>&);
template void adam_step_cuda<double>(cuda::Context&, int64_t, double*, const double*, double*,
                                     double*, const kernels::AdamCoefficients<double>&);

}  // namespace lstm::nn::detail
