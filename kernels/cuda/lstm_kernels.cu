// The CUDA LSTM kernels: each op of lstm_ops.hpp runs as one grid-stride kernel. The bodies live
// in lstm_ops.hpp so that the CPU tests execute the same code.

#include <cuda_runtime.h>

#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/lstm_kernels.hpp"

namespace lstm::kernels::cuda {

namespace {

template <typename Op>
__global__ void __launch_bounds__(grid::kThreads) elementwise_kernel(Op op, int64_t count) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride)
        op(i);
}

}  // namespace

template <typename Op>
LaunchStatus launch(const Op& op, int64_t count, void* stream) {
    if (count <= 0) return {};
    elementwise_kernel<Op>
        <<<grid::blocks_for(count), grid::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(op,
                                                                                            count);
    return {static_cast<int>(cudaGetLastError())};
}

#define LSTM_INSTANTIATE_LAUNCH(OP)                                            \
    template LaunchStatus launch<OP<float>>(const OP<float>&, int64_t, void*); \
    template LaunchStatus launch<OP<double>>(const OP<double>&, int64_t, void*);

LSTM_INSTANTIATE_LAUNCH(GatherFrames)
LSTM_INSTANTIATE_LAUNCH(UnpackFrames)
LSTM_INSTANTIATE_LAUNCH(GatherRows)
LSTM_INSTANTIATE_LAUNCH(ScatterRows)
LSTM_INSTANTIATE_LAUNCH(Fill)
LSTM_INSTANTIATE_LAUNCH(AddBias)
LSTM_INSTANTIATE_LAUNCH(Activate)
LSTM_INSTANTIATE_LAUNCH(UpdateCell)
LSTM_INSTANTIATE_LAUNCH(UpdateHidden)
LSTM_INSTANTIATE_LAUNCH(CarryHidden)
LSTM_INSTANTIATE_LAUNCH(AddOutputGrad)
LSTM_INSTANTIATE_LAUNCH(SumOutputGrad)
LSTM_INSTANTIATE_LAUNCH(HiddenBackward)
LSTM_INSTANTIATE_LAUNCH(CellBackward)
LSTM_INSTANTIATE_LAUNCH(FusedForward)
LSTM_INSTANTIATE_LAUNCH(FusedBackward)

#undef LSTM_INSTANTIATE_LAUNCH

}  // namespace lstm::kernels::cuda
