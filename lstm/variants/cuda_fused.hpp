#pragma once

// `fused` (cuda): the published GPU optimizations. Per layer and direction one input GEMM over
// all steps (cuBLAS, FP32 math, no TF32); per step one recurrent GEMM and ONE fused gate kernel
// (bias, activations, c and h update, saving c_t and h_{t-1} for backward; gate math from
// kernels/common/gates.hpp); backward mirrors it with one fused kernel and one GEMM per step, and
// the weight and input gradients as GEMMs over all steps. Rows are sorted by length once per
// call, so the active batch shrinks and work is proportional to valid frames. The two directions
// of a layer run concurrently (the context's main stream and a side stream, ordered by events),
// and each call's whole loop is captured once into a CUDA graph, cached in a per-shape plan and
// replayed while the lengths and every pointer stay the same (re-captured, and the executable
// graph updated in place where possible, when they change). Layers run one after the other: no
// wavefront across layers yet. The loop is shared with `basic` (lstm/variants/cuda_common.hpp).

#include "lstm/variants/cuda_loop_variant.hpp"

namespace lstm::cuda {

using FusedVariant = LoopVariant<LoopStyle::fused>;

}  // namespace lstm::cuda
