// The sequence heads' device kernels: grid-stride loops around the bodies of
// kernels/cuda/sequence.hpp.

#include <cuda_runtime.h>

#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/sequence.hpp"

namespace lstm::kernels::cuda {

namespace {

// One element body of kernels/cuda/sequence.hpp: element `idx` of (src -> dst).
template <typename T>
using ElementBody = void (*)(int64_t idx, int64_t steps, int64_t batch, int64_t features,
                             const int64_t* lengths, const T* src, T* dst);

template <typename T, ElementBody<T> Body>
__global__ void sequence_kernel(int64_t total, int64_t steps, int64_t batch, int64_t features,
                                const int64_t* lengths, const T* src, T* dst) {
    for (int64_t i = grid::first_index(); i < total; i += grid::stride())
        Body(i, steps, batch, features, lengths, src, dst);
}

// Runs Body over indices [0, total) on `stream`; total is dst's element count for the gathers and
// pools, the (T, N, F) gradient's for the scatters, which write every element of it.
template <typename T, ElementBody<T> Body>
LaunchStatus launch_body(int64_t total, int64_t steps, int64_t batch, int64_t features,
                         const int64_t* lengths, const T* src, T* dst, void* stream) {
    if (total == 0) return {};
    sequence_kernel<T, Body><<<grid::blocks_for(total), grid::kThreads, 0, cudaStream_t(stream)>>>(
        total, steps, batch, features, lengths, src, dst);
    return {static_cast<int>(cudaGetLastError())};
}

}  // namespace

template <typename T>
LaunchStatus launch_gather_last_step(int64_t steps, int64_t batch, int64_t features,
                                     const int64_t* lengths, const T* y, T* out, void* stream) {
    return launch_body<T, gather_last_step_element<T>>(batch * features, steps, batch, features,
                                                       lengths, y, out, stream);
}

template <typename T>
LaunchStatus launch_scatter_last_step(int64_t steps, int64_t batch, int64_t features,
                                      const int64_t* lengths, const T* dout, T* dy, void* stream) {
    return launch_body<T, scatter_last_step_element<T>>(steps * batch * features, steps, batch,
                                                        features, lengths, dout, dy, stream);
}

template <typename T>
LaunchStatus launch_mean_pool(int64_t steps, int64_t batch, int64_t features,
                              const int64_t* lengths, const T* y, T* out, void* stream) {
    return launch_body<T, mean_pool_element<T>>(batch * features, steps, batch, features, lengths,
                                                y, out, stream);
}

template <typename T>
LaunchStatus launch_scatter_mean_pool(int64_t steps, int64_t batch, int64_t features,
                                      const int64_t* lengths, const T* dout, T* dy, void* stream) {
    return launch_body<T, scatter_mean_pool_element<T>>(steps * batch * features, steps, batch,
                                                        features, lengths, dout, dy, stream);
}

#define LSTM_INSTANTIATE_SEQUENCE(T)                                                               \
    template LaunchStatus launch_gather_last_step<T>(int64_t, int64_t, int64_t, const int64_t*,    \
                                                     const T*, T*, void*);                         \
    template LaunchStatus launch_scatter_last_step<T>(int64_t, int64_t, int64_t, const int64_t*,   \
                                                      const T*, T*, void*);                        \
    template LaunchStatus launch_mean_pool<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, \
                                              T*, void*);                                          \
    template LaunchStatus launch_scatter_mean_pool<T>(int64_t, int64_t, int64_t, const int64_t*,   \
                                                      const T*, T*, void*);
LSTM_INSTANTIATE_SEQUENCE(float)
LSTM_INSTANTIATE_SEQUENCE(double)
#undef LSTM_INSTANTIATE_SEQUENCE

}  // namespace lstm::kernels::cuda
