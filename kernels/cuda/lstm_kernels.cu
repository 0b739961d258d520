// The CUDA LSTM kernels: each op of lstm_ops.hpp runs as one grid-stride kernel. The bodies live
// in lstm_ops.hpp so that the CPU tests execute the same code.

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/lstm_kernels.hpp"

namespace lstm::kernels::cuda {

namespace {

// 256 threads: a multiple of the warp size that keeps several blocks resident per SM for these
// memory-bound passes.
constexpr int kThreads = 256;
// Enough blocks to fill every SM of an H200 many times over; larger grids only add block
// scheduling, the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 8192;

template <typename Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Op op, int64_t count) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride)
        op(i);
}

}  // namespace

template <typename Op>
int launch(const Op& op, int64_t count, void* stream) {
    if (count <= 0) return static_cast<int>(cudaSuccess);
    const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks);
    elementwise_kernel<Op>
        <<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(op,
                                                                                            count);
    return static_cast<int>(cudaGetLastError());
}

#define LSTM_INSTANTIATE_LAUNCH(OP)                                   \
    template int launch<OP<float>>(const OP<float>&, int64_t, void*); \
    template int launch<OP<double>>(const OP<double>&, int64_t, void*);

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
