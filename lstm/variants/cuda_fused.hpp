#pragma once

// `fused` (cuda): the published GPU optimizations. Per layer and direction one input GEMM over
// all steps (cuBLAS, FP32 math, no TF32); per step one recurrent GEMM and ONE fused gate kernel
// (bias, activations, c and h update, saving c_t and h_{t-1} for backward; gate math from
// kernels/common/gates.hpp); backward mirrors it with one fused kernel and one GEMM per step, and
// the weight and input gradients as GEMMs over all steps. Rows are sorted by length once per
// call, so the active batch shrinks and work is proportional to valid frames. The two directions
// of a layer run concurrently (the context's main stream and a side stream, ordered by events).
// A call runs eagerly the first time; when the next call on its per-shape plan repeats it (same
// lengths, mode and pointers) its whole loop is captured into a CUDA graph, and later repeats
// replay the graph. A call that differs runs eagerly again and, should it repeat, is captured in
// place (the executable graph updated where the topology allows). Graphs are on by default;
// Context::set_graphs_enabled(false), or LSTM_CUDA_GRAPHS=0 in the environment when the context
// is made, runs every call eagerly. Layers run one after the other: no wavefront across layers
// yet. The loop is shared with `basic` (lstm/variants/cuda_common.hpp).

#include "lstm/variants/cuda_loop_variant.hpp"

namespace lstm::cuda {

using FusedVariant = LoopVariant<LoopStyle::fused>;

}  // namespace lstm::cuda
