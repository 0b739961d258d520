#pragma once

// `cudnn` (cuda): the vendor reference on the GPU. cuDNN 9's RNN API runs the whole recurrence
// (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8) with the STANDARD
// algorithm, FMA math in fp32 (no TF32) and default math in fp64, two biases, padded I/O with
// per-sequence lengths. This header declares; lstm/variants/cudnn.cpp (in lstm_cuda) defines,
// so nothing here needs a CUDA or cuDNN header. Registered only when LSTM_WITH_CUDNN is 1.
//
// How PyTorch's LSTM maps onto cuDNN's:
// - Data: our x (T, N, I) and y (T, N, D*S) are cuDNN's CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
//   layout as they are, with the per-sequence lengths in the data descriptors; h0/hn
//   (L*D, N, S) and c0/cn (L*D, N, H) are cuDNN's hx/hy and cx/cy. S = config.state_size() is
//   cuDNN's projSize: H, or proj_size for nn.LSTM(proj_size=P), which is cuDNN's recurrent
//   projection (its projection matrix, linLayerID 8, holds our weight_hr). Padded positions of y
//   and dx are zeroed here after the cuDNN call (one cudaMemset2DAsync per shorter sequence, none
//   for full batches): cuDNN documents its padding fill (0, set on the data descriptors) for
//   forward outputs only, and the zeroing keeps the padded-output contract from resting on that.
// - Parameters: cuDNN keeps its own weight space. Every call copies our flat buffer into it
//   through the addresses cudnnGetRNNWeightParams reports (checked against the shapes our
//   layout implies; lstm/variants/cudnn_weights.hpp has the mapping), merged into as few
//   device-to-device copies as the reported layout allows: 4 per (layer, direction) when cuDNN
//   keeps its 4 input matrices, 4 recurrent matrices and each 4 biases together (what PyTorch's
//   binding relies on; one more for a projection matrix), fewer where they sit back to back as in
//   our buffer, 16 (17) at worst;
//   forward copies once, backward-data once, backward-weights twice (in and out; tests/gpu
//   prints the count). Weight gradients: our dparams is copied into
//   a dweight space, cudnnRNNBackwardWeights_v8 adds into it (CUDNN_WGRAD_MODE_ADD) and the sum
//   is copied back, which is exactly our accumulate-into-dparams contract.
// - Backward splits as cuDNN's does: BackwardPart::data runs backward-data (dx, dh0, dc0),
//   BackwardPart::weights runs backward-weights and must follow it (it reads what backward-data
//   left in the reserve).
//
// Memory: the workspace holds cuDNN's weight space, cuDNN's workspace and a (T, N, I) dx for
// backward calls that give none; the reserve holds cuDNN's training reserve space. Their sizes
// are cuDNN's answers for (config, dtype, T, N) with every sequence of length T, each slot
// rounded up to 256 bytes, plus 255 bytes: both buffers may start at any address and are carved
// from their first 256-byte boundary (the reserve must be at the same address in forward and
// backward). A plan made with a Context asks cuDNN through the context's handle; a sizing query
// without one (workspace_bytes() and reserve_bytes() of Variant take no context) makes a handle
// on the current device for the question and destroys it after; without a CUDA device it throws
// lstm::Error saying so. Each call checks that what cuDNN asks for its actual lengths, on the
// context's device, fits what was carved, and throws naming the buffer if not.
//
// Plans (lstm::Plan, kept by a PlanCache under the one key every plan has: the layer's, or the
// context's for direct calls): per (config, dtype, T, N, context) the RNN and dropout
// descriptors, the weight mapping, data and state descriptors, a device copy of the lengths and
// the padded tails. Lengths are not part of the key, so a training loop whose batches change
// lengths keeps one plan per shape: when a call's lengths differ from the previous call's on that
// plan, it re-describes the data and queues the new lengths (from pinned host memory) on the
// stream; the host then first waits until the stream has consumed the previous upload (so it
// runs at most about one call ahead). Steady-state calls allocate nothing (cuDNN's own host-side
// bookkeeping inside its calls aside).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lstm/variant.hpp"
#include "lstm/variants/cudnn_weights.hpp"

namespace lstm::cuda {

class CudnnVariant final : public Variant {
public:
    const char* name() const override { return "cudnn"; }
    Device device() const override { return Device::cuda; }
    std::optional<std::string> supports(const Config& config, DType dtype) const override;
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }

protected:
    // Asks cuDNN for the sizes (see the file comment); throws lstm::Error when no CUDA device is
    // visible.
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override;
};

// cuDNN's sizes for (config, dtype, T, N) with every sequence of length T: asked through the
// context's handle, or with a null context through one made for the question on the current
// device. What the plans' workspace and reserve carve.
CudnnSizes cudnn_sizes(Context* context, const Config& config, DType dtype, int64_t seq_len,
                       int64_t batch);

// One entry of cuDNN's weight space as cudnnGetRNNWeightParams reports it on a context's device.
struct CudnnWeightRegion {
    CudnnPiece piece;      // which piece of our flat buffer it holds (offset, rows, cols)
    int64_t space_offset;  // element offset cuDNN reported, from the start of its weight space
};

// cuDNN's weight-space layout for (config, dtype) on `context`'s device, for inspection and tests.
struct CudnnWeightLayout {
    size_t weight_space_bytes = 0;
    std::vector<CudnnWeightRegion> regions;  // in cudnn_pieces() order
    std::vector<CudnnCopySegment> copies;    // the merged copies a call issues each way
    bool copies_cover_space = false;         // false: the space is zeroed before copying in
};

CudnnWeightLayout cudnn_weight_layout(Context& context, const Config& config, DType dtype);

// Copies `params` (device, param_count(config) elements of dtype, our layout) into
// `weight_space` (device, weight_space_bytes of cudnn_weight_layout()), overwriting it, with
// the copies forward issues. Queued on the context's stream; does not wait.
void cudnn_pack_weights(Context& context, const Config& config, DType dtype, const void* params,
                        void* weight_space);

// The reverse: overwrites every element of `params` (device) from `weight_space` (device).
// Queued on the context's stream; does not wait.
void cudnn_unpack_weights(Context& context, const Config& config, DType dtype,
                          const void* weight_space, void* params);

}  // namespace lstm::cuda
