// The CUDA side of the optimizers: grid-stride kernels around the per-element bodies of
// kernels/cuda/optim.hpp, which the CPU optimizers run too.

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/optim.hpp"

namespace lstm::kernels::cuda {

namespace {

// An element-wise update is memory bound: 256 threads per block keep enough loads in flight,
// and a grid-stride loop lets any n run on a capped grid (each thread then takes several
// elements, which costs nothing measurable at these sizes).
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

template <typename T>
__global__ void sgd_kernel(int64_t n, T* p, const T* g, T* buf, SgdCoefficients<T> c) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        sgd_element(i, p, g, buf, c);
}

template <typename T>
__global__ void adam_kernel(int64_t n, T* p, const T* g, T* m, T* v, AdamCoefficients<T> c) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        adam_element(i, p, g, m, v, c);
}

}  // namespace

template <typename T>
void launch_sgd_step(int64_t n, T* p, const T* g, T* buf, const SgdCoefficients<T>& c,
                     void* stream) {
    if (n == 0) return;
    sgd_kernel<T>
        <<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, p, g, buf, c);
}

template <typename T>
void launch_adam_step(int64_t n, T* p, const T* g, T* m, T* v, const AdamCoefficients<T>& c,
                      void* stream) {
    if (n == 0) return;
    adam_kernel<T>
        <<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, p, g, m, v, c);
}

template void launch_sgd_step<float>(int64_t, float*, const float*, float*,
                                     const SgdCoefficients<float>&, void*);
template void launch_sgd_step<double>(int64_t, double*, const double*, double*,
                                      const SgdCoefficients<double>&, void*);
template void launch_adam_step<float>(int64_t, float*, const float*, float*, float*,
                                      const AdamCoefficients<float>&, void*);
template void launch_adam_step<double>(int64_t, double*, const double*, double*, double*,
                                       const AdamCoefficients<double>&, void*);

}  // namespace lstm::kernels::cuda
