#pragma once

// `basic` (cuda): PyTorch's LSTMCell-basic on the GPU, the deliberately naive baseline. Per step
// an input GEMM and a recurrent GEMM (cuBLAS, FP32 math) and then separate, unfused element-wise
// kernels (bias add, activations, cell update, hidden update); backward is the same loop reversed
// with per-step weight-gradient GEMMs, all on the context's stream. Variable lengths shrink the
// active batch (rows sorted by length once per call). The loop is shared with `fused`
// (lstm/variants/cuda_common.hpp, LoopStyle::basic).

#include "lstm/variants/cuda_loop_variant.hpp"

namespace lstm::cuda {

using BasicVariant = LoopVariant<LoopStyle::basic>;

}  // namespace lstm::cuda
