// The CUDA side of the optimizers: grid-stride kernels around the per-element bodies of
// kernels/cuda/optim.hpp, which the CPU optimizers run too.

#include <cuda_runtime.h>

#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/optim.hpp"

namespace lstm::kernels::cuda {

namespace {

template <typename T>
__global__ void sgd_kernel(int64_t n, T* p, const T* g, T* buf, SgdCoefficients<T> c) {
    for (int64_t i = grid::first_index(); i < n; i += grid::stride()) sgd_element(i, p, g, buf, c);
}

template <typename T>
__global__ void adam_kernel(int64_t n, T* p, const T* g, T* m, T* v, AdamCoefficients<T> c) {
    for (int64_t i = grid::first_index(); i < n; i += grid::stride())
        adam_element(i, p, g, m, v, c);
}

}  // namespace

template <typename T>
LaunchStatus launch_sgd_step(int64_t n, T* p, const T* g, T* buf, const SgdCoefficients<T>& c,
                             void* stream) {
    if (n == 0) return {};
    sgd_kernel<T><<<grid::blocks_for(n), grid::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, p, g, buf, c);
    return {static_cast<int>(cudaGetLastError())};
}

template <typename T>
LaunchStatus launch_adam_step(int64_t n, T* p, const T* g, T* m, T* v, const AdamCoefficients<T>& c,
                              void* stream) {
    if (n == 0) return {};
    adam_kernel<T><<<grid::blocks_for(n), grid::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, p, g, m, v, c);
    return {static_cast<int>(cudaGetLastError())};
}

template LaunchStatus launch_sgd_step<float>(int64_t, float*, const float*, float*,
                                             const SgdCoefficients<float>&, void*);
template LaunchStatus launch_sgd_step<double>(int64_t, double*, const double*, double*,
                                              const SgdCoefficients<double>&, void*);
template LaunchStatus launch_adam_step<float>(int64_t, float*, const float*, float*, float*,
                                              const AdamCoefficients<float>&, void*);
template LaunchStatus launch_adam_step<double>(int64_t, double*, const double*, double*, double*,
                                               const AdamCoefficients<double>&, void*);

}  // namespace lstm::kernels::cuda
