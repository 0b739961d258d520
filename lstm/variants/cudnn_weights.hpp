#pragma once

// Host-only logic of the `cudnn` (cuda) variant: which piece of our flat parameter buffer each
// cuDNN weight-space entry holds, the checks on what cuDNN reports, the coalescing of the
// copies, the carving of workspace and reserve, sequence lengths and padding. No cuDNN or CUDA
// header, so the CPU suite tests all of it (tests/cudnn_host_test.cpp); lstm/variants/cudnn.cpp
// only asks cuDNN for addresses and sizes and issues the copies and calls.
//
// The mapping (cuDNN's RNN API reference, cudnnGetRNNWeightParams, LSTM cell): pseudo-layer
// `layer * D + direction`; linLayerID 0..3 are the input matrices W_i, W_f, W_g (cuDNN's c'),
// W_o, each (H, in_l) row-major; 4..7 the recurrent matrices R_i, R_f, R_g, R_o, each (H, S)
// with S = config.state_size() (cuDNN's projSize: H without a projection); with
// CUDNN_RNN_DOUBLE_BIAS the bias of linLayerID k (0..3) is b_W (our bias_ih) of gate k and of
// k (4..7) b_R (our bias_hh) of gate k - 4. With a recurrent projection (projSize P < H),
// linLayerID 8 is the projection matrix W_r (P, H), our weight_hr, and has no bias (PyTorch's
// cuDNN binding, add_projection_weights, asks for the same ID). PyTorch's gate blocks are i, f,
// g, o, cuDNN's order too, so every piece is one contiguous run of our buffer: row block k of
// weight_ih is rows [k*H, (k+1)*H) of a row-major (4H, in_l) matrix. The shapes cuDNN reports
// are checked against these at plan time (check_cudnn_reported_shape), so a cuDNN that lays the
// projection out otherwise fails there with the piece's name rather than computing garbage.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lstm/config.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/error.hpp"
#include "lstm/params.hpp"
#include "lstm/tensor.hpp"

namespace lstm::cuda {

// An LSTM cell has 8 "linear layers" in cuDNN's terms: 4 gates times (input, recurrent), and
// with a recurrent projection a ninth, the projection matrix, at linLayerID 8.
constexpr int kCudnnLstmLinLayers = 8;
constexpr int kCudnnLstmGates = 4;
constexpr int kCudnnLstmProjection = 8;

enum class CudnnPieceKind { matrix, bias };

// One entry of cuDNN's weight space and where its contents live in our flat buffer.
struct CudnnPiece {
    int64_t pseudo_layer = 0;  // layer * D + direction
    // 0..7: input gates i, f, g, o, then recurrent gates i, f, g, o; 8: the projection matrix
    int lin_layer_id = 0;
    CudnnPieceKind kind = CudnnPieceKind::matrix;
    int64_t param_offset = 0;  // element offset of the piece's first element in our buffer
    int64_t rows = 0;          // H; P for the projection
    int64_t cols = 0;  // in_l (input matrix), S (recurrent matrix), H (projection), 1 (bias)
    int64_t numel() const { return rows * cols; }
};

// The piece cuDNN calls (pseudo_layer, lin_layer_id, kind) for `config`. Throws on indices out
// of range, on a bias piece of a config without biases and on the projection of a config
// without one or as a bias (bugs in the caller, so the message names the indices).
inline CudnnPiece cudnn_piece(const Config& config, int64_t pseudo_layer, int lin_layer_id,
                              CudnnPieceKind kind) {
    check(pseudo_layer >= 0 && pseudo_layer < config.num_cells(), "cudnn_piece: pseudo_layer ",
          pseudo_layer, " outside 0..", config.num_cells() - 1);
    const int last_id = config.proj_size > 0 ? kCudnnLstmProjection : kCudnnLstmLinLayers - 1;
    check(lin_layer_id >= 0 && lin_layer_id <= last_id, "cudnn_piece: lin_layer_id ", lin_layer_id,
          " outside 0..", last_id);
    check(kind == CudnnPieceKind::matrix || config.bias, "cudnn_piece: linLayerID ", lin_layer_id,
          " has no bias in a config without biases");
    const int64_t dirs = config.num_directions(), hidden = config.hidden_size;
    const int64_t layer = pseudo_layer / dirs, direction = pseudo_layer % dirs;
    const CellOffsets o = cell_offsets(config, layer, direction);
    CudnnPiece p;
    p.pseudo_layer = pseudo_layer;
    p.lin_layer_id = lin_layer_id;
    p.kind = kind;
    if (lin_layer_id == kCudnnLstmProjection) {
        check(kind == CudnnPieceKind::matrix,
              "cudnn_piece: the projection (linLayerID 8) has no bias");
        p.rows = config.proj_size;
        p.cols = hidden;
        p.param_offset = o.weight_hr;
        return p;
    }
    const bool recurrent = lin_layer_id >= kCudnnLstmGates;
    const int64_t gate = lin_layer_id % kCudnnLstmGates;
    p.rows = hidden;
    if (kind == CudnnPieceKind::matrix) {
        p.cols = recurrent ? config.state_size() : config.layer_input_size(layer);
        p.param_offset = (recurrent ? o.weight_hh : o.weight_ih) + gate * hidden * p.cols;
    } else {
        p.cols = 1;
        p.param_offset = (recurrent ? o.bias_hh : o.bias_ih) + gate * hidden;
    }
    return p;
}

// Every piece of `config`, pseudo-layer by pseudo-layer, linLayerID 0..7, matrix before bias
// (no biases when config.bias is false: CUDNN_RNN_NO_BIAS), then the projection matrix
// (linLayerID 8) when config.proj_size > 0: the order the variant asks cuDNN in.
// Allocates: plan time only.
inline std::vector<CudnnPiece> cudnn_pieces(const Config& config) {
    std::vector<CudnnPiece> out;
    out.reserve(static_cast<size_t>(config.num_cells()) * (kCudnnLstmLinLayers * 2 + 1));
    for (int64_t pl = 0; pl < config.num_cells(); ++pl) {
        for (int id = 0; id < kCudnnLstmLinLayers; ++id) {
            out.push_back(cudnn_piece(config, pl, id, CudnnPieceKind::matrix));
            if (config.bias) out.push_back(cudnn_piece(config, pl, id, CudnnPieceKind::bias));
        }
        if (config.proj_size > 0)
            out.push_back(cudnn_piece(config, pl, kCudnnLstmProjection, CudnnPieceKind::matrix));
    }
    return out;
}

// "weight_hh_l1_reverse rows of gate g (pseudo-layer 3, linLayerID 6, matrix)", or
// "weight_hr_l0 (pseudo-layer 0, linLayerID 8, matrix)" for the projection: for messages.
inline std::string cudnn_piece_name(const Config& config, const CudnnPiece& p) {
    static const char* const kGateNames[kCudnnLstmGates] = {"i", "f", "g", "o"};
    const int64_t dirs = config.num_directions();
    const std::string suffix = "_l" + std::to_string(p.pseudo_layer / dirs) +
                               (p.pseudo_layer % dirs == 1 ? "_reverse" : "");
    const std::string ids = "(pseudo-layer " + std::to_string(p.pseudo_layer) + ", linLayerID " +
                            std::to_string(p.lin_layer_id);
    if (p.lin_layer_id == kCudnnLstmProjection)
        return "weight_hr" + suffix + " " + ids + ", matrix)";
    const bool recurrent = p.lin_layer_id >= kCudnnLstmGates;
    const bool matrix = p.kind == CudnnPieceKind::matrix;
    std::string name =
        matrix ? (recurrent ? "weight_hh" : "weight_ih") : (recurrent ? "bias_hh" : "bias_ih");
    name += suffix + (matrix ? " rows" : " entries") + " of gate " +
            kGateNames[p.lin_layer_id % kCudnnLstmGates] + " " + ids +
            (matrix ? ", matrix)" : ", bias)");
    return name;
}

// Checks the tensor descriptor cuDNN reports for `p` (cudnnGetTensorNdDescriptor: nb_dims,
// dims, strides, host arrays of nb_dims entries): cuDNN describes a matrix as (1, rows, cols)
// (the projection as (1, P, H), recurrent matrices as (1, H, S)) and a bias as (1, rows, 1),
// densely packed row-major. Anything else means cuDNN's layout is
// not the one the copies assume; the error says which piece and what came.
inline void check_cudnn_reported_shape(const Config& config, const CudnnPiece& p, int nb_dims,
                                       const int* dims, const int* strides) {
    auto shape_text = [&]() {
        std::string s = "(";
        for (int k = 0; k < nb_dims; ++k) s += (k ? ", " : "") + std::to_string(dims[k]);
        s += ") strides (";
        for (int k = 0; k < nb_dims; ++k) s += (k ? ", " : "") + std::to_string(strides[k]);
        return s + ")";
    };
    const int64_t want[3] = {1, p.rows, p.cols};
    bool ok = nb_dims == 3;
    for (int k = 0; ok && k < 3; ++k) ok = dims[k] == want[k];
    // Dense row-major: a dimension longer than 1 steps over everything to its right.
    int64_t inner = 1;
    for (int k = nb_dims - 1; ok && k >= 0; --k) {
        if (dims[k] > 1) ok = strides[k] == inner;
        inner *= dims[k];
    }
    check(ok, "cuDNN reports ", cudnn_piece_name(config, p), " as dims ", shape_text(),
          "; expected dims (1, ", p.rows, ", ", p.cols, "), densely packed row-major");
}

// Element offset of an address cuDNN reported, from its byte offset in a weight space of
// `space_bytes`; the piece must start on an element boundary and lie inside the space.
inline int64_t cudnn_space_offset(const Config& config, const CudnnPiece& p, int64_t byte_offset,
                                  size_t elem_size, size_t space_bytes) {
    const int64_t elem = static_cast<int64_t>(elem_size);
    check(byte_offset >= 0 && byte_offset % elem == 0 &&
              byte_offset + p.numel() * elem <= static_cast<int64_t>(space_bytes),
          "cuDNN reports ", cudnn_piece_name(config, p), " at byte offset ", byte_offset,
          " of its weight space; expected a multiple of ", elem, " with ", p.numel() * elem,
          " bytes inside the space's ", space_bytes);
    return byte_offset / elem;
}

// One device-to-device copy between our flat buffer and cuDNN's weight space, in elements.
struct CudnnCopySegment {
    int64_t param_offset = 0;
    int64_t space_offset = 0;
    int64_t count = 0;
};

// The copies that move every piece, merged where consecutive pieces are consecutive on both
// sides. Checks that the pieces tile our buffer [0, param_count) exactly once and never overlap
// inside cuDNN's space of `space_elems` elements (a violation is a bug in the mapping or a
// layout cuDNN changed: the message names the offsets). `segments` is taken by value and sorted.
// cuDNN keeps the 4 input matrices of a pseudo-layer contiguous, likewise the recurrent ones and
// the biases (PyTorch's cuDNN binding relies on the same), so a cell needs at most 4 copies (5
// with a projection matrix) and fewer where cuDNN places the groups back to back as our buffer
// does.
inline std::vector<CudnnCopySegment> coalesce_copy_segments(std::vector<CudnnCopySegment> segments,
                                                            int64_t param_count,
                                                            int64_t space_elems) {
    std::sort(segments.begin(), segments.end(),
              [](const CudnnCopySegment& a, const CudnnCopySegment& b) {
                  return a.space_offset < b.space_offset;
              });
    for (size_t k = 0; k < segments.size(); ++k) {
        const CudnnCopySegment& s = segments[k];
        check(s.count > 0 && s.space_offset >= 0 && s.space_offset + s.count <= space_elems,
              "cudnn weight mapping: piece at space offset ", s.space_offset, " (", s.count,
              " elements) lies outside cuDNN's weight space of ", space_elems, " elements");
        if (k > 0) {
            const CudnnCopySegment& prev = segments[k - 1];
            check(prev.space_offset + prev.count <= s.space_offset,
                  "cudnn weight mapping: pieces at space offsets ", prev.space_offset, " and ",
                  s.space_offset, " overlap in cuDNN's weight space");
        }
    }
    std::sort(segments.begin(), segments.end(),
              [](const CudnnCopySegment& a, const CudnnCopySegment& b) {
                  return a.param_offset < b.param_offset;
              });
    int64_t expect = 0;
    for (const CudnnCopySegment& s : segments) {
        check(s.param_offset == expect, "cudnn weight mapping: parameter elements from ", expect,
              " to ", s.param_offset, " are ",
              s.param_offset > expect ? "not copied" : "copied twice");
        expect = s.param_offset + s.count;
    }
    check(expect == param_count, "cudnn weight mapping: pieces cover ", expect,
          " parameter elements, expected param_count = ", param_count);
    std::vector<CudnnCopySegment> out;
    for (const CudnnCopySegment& s : segments) {
        if (!out.empty() && out.back().param_offset + out.back().count == s.param_offset &&
            out.back().space_offset + out.back().count == s.space_offset) {
            out.back().count += s.count;
        } else {
            out.push_back(s);
        }
    }
    return out;
}

// Elements of cuDNN's space the segments write; when it falls short of the space, the variant
// zeroes the space first so that no byte cuDNN might read is left uninitialised.
inline int64_t covered_elements(const std::vector<CudnnCopySegment>& segments) {
    int64_t total = 0;
    for (const CudnnCopySegment& s : segments) total += s.count;
    return total;
}

// What cuDNN asks for one (config, dtype, T, N) with every sequence of length T: the inputs of
// the carving below.
struct CudnnSizes {
    size_t weight_space = 0;      // cudnnGetRNNWeightSpaceSize
    size_t work_training = 0;     // cudnnGetRNNTempSpaceSizes(CUDNN_FWD_MODE_TRAINING), workspace
    size_t work_inference = 0;    // ... (CUDNN_FWD_MODE_INFERENCE), workspace
    size_t reserve_training = 0;  // ... (CUDNN_FWD_MODE_TRAINING), reserve space
};

// cuDNN's own buffers start on 256-byte boundaries inside ours (cudaMalloc's alignment; cuDNN
// documents no smaller requirement for RNN buffers), so each carved byte count is rounded up to
// a multiple of it, and carving starts at the caller's first 256-byte boundary (the caller may
// pass any address): every slot then lies on a 256-byte boundary in memory.
constexpr size_t kCudnnSlotAlignment = 256;
static_assert(kCudnnSlotAlignment == lstm::detail::kDeviceAlignment,
              "cuDNN's slots are carved from the device-alignment boundary");

inline size_t round_up_slot(size_t bytes) {
    return (bytes + kCudnnSlotAlignment - 1) / kCudnnSlotAlignment * kCudnnSlotAlignment;
}

// The workspace of one call, device memory: cuDNN's weight space (forward and backward-data copy
// the parameters in; backward-weights uses it as cuDNN's dweight space), cuDNN's workspace (the
// larger of training and inference, backward uses the training size) and a dx of (T, N, I) for
// backward calls that give none (cuDNN always writes dx).
struct CudnnWorkspace {
    unsigned char* weights = nullptr;
    size_t weights_bytes = 0;
    unsigned char* work = nullptr;
    size_t work_bytes = 0;
    unsigned char* dx = nullptr;
    size_t dx_bytes = 0;
};

// Carves (or, with a counting Carver, sizes) the workspace; cudnn_workspace_in and
// cudnn_workspace_size below put it at the first 256-byte boundary of a caller's buffer.
inline CudnnWorkspace carve_cudnn_workspace(lstm::detail::Carver& carver, const CudnnSizes& sizes,
                                            int64_t seq_len, int64_t batch, int64_t input_size,
                                            size_t elem_size) {
    CudnnWorkspace w;
    w.weights_bytes = round_up_slot(sizes.weight_space);
    w.weights = carver.take<unsigned char>(static_cast<int64_t>(w.weights_bytes));
    w.work_bytes = round_up_slot(std::max(sizes.work_training, sizes.work_inference));
    w.work = carver.take<unsigned char>(static_cast<int64_t>(w.work_bytes));
    w.dx_bytes = round_up_slot(static_cast<size_t>(seq_len * batch * input_size) * elem_size);
    w.dx = carver.take<unsigned char>(static_cast<int64_t>(w.dx_bytes));
    return w;
}

// The reserve: cuDNN's training reserve space only. Backward copies the parameters into the
// workspace again rather than keeping a copy here, which saves a parameter-sized buffer per
// training step for one device-to-device copy of the parameters.
struct CudnnReserve {
    unsigned char* space = nullptr;
    size_t space_bytes = 0;
};

inline CudnnReserve carve_cudnn_reserve(lstm::detail::Carver& carver, const CudnnSizes& sizes) {
    CudnnReserve r;
    r.space_bytes = round_up_slot(sizes.reserve_training);
    r.space = carver.take<unsigned char>(static_cast<int64_t>(r.space_bytes));
    return r;
}

// workspace_bytes(): the carved bytes plus the padding cudnn_workspace_in may skip.
inline size_t cudnn_workspace_size(const CudnnSizes& sizes, int64_t seq_len, int64_t batch,
                                   int64_t input_size, size_t elem_size) {
    lstm::detail::Carver counter(nullptr);
    carve_cudnn_workspace(counter, sizes, seq_len, batch, input_size, elem_size);
    return counter.bytes() + kCudnnSlotAlignment - 1;
}

// The workspace inside a caller's buffer of cudnn_workspace_size bytes at `base` (device, any
// alignment), from its first 256-byte boundary on.
inline CudnnWorkspace cudnn_workspace_in(void* base, const CudnnSizes& sizes, int64_t seq_len,
                                         int64_t batch, int64_t input_size, size_t elem_size) {
    lstm::detail::Carver carver = lstm::detail::carver_from_boundary<kCudnnSlotAlignment>(base);
    return carve_cudnn_workspace(carver, sizes, seq_len, batch, input_size, elem_size);
}

// reserve_bytes(): the carved bytes plus the padding cudnn_reserve_in may skip.
inline size_t cudnn_reserve_size(const CudnnSizes& sizes) {
    lstm::detail::Carver counter(nullptr);
    carve_cudnn_reserve(counter, sizes);
    return counter.bytes() + kCudnnSlotAlignment - 1;
}

// The reserve inside a caller's buffer of cudnn_reserve_size bytes at `base` (device, any
// alignment), from its first 256-byte boundary on; forward and backward must get the same base.
inline CudnnReserve cudnn_reserve_in(void* base, const CudnnSizes& sizes) {
    lstm::detail::Carver carver = lstm::detail::carver_from_boundary<kCudnnSlotAlignment>(base);
    return carve_cudnn_reserve(carver, sizes);
}

// cuDNN takes int32 sizes: why the first that does not fit cannot run, or nullopt.
inline std::optional<std::string> cudnn_size_problem(const Config& config, int64_t seq_len,
                                                     int64_t batch) {
    const int64_t max = std::numeric_limits<int32_t>::max();
    const std::pair<const char*, int64_t> sizes[] = {{"input_size", config.input_size},
                                                     {"hidden_size", config.hidden_size},
                                                     {"num_layers", config.num_layers},
                                                     {"output_size (D*S)", config.output_size()},
                                                     {"T", seq_len},
                                                     {"N", batch}};
    for (const auto& s : sizes)
        if (s.second > max)
            return std::string("cuDNN takes 32-bit sizes; ") + s.first + " = " +
                   std::to_string(s.second) + " exceeds " + std::to_string(max);
    // The states are (L*D, N, width) tensors with int sizes and strides, width S for h and
    // H >= S for c: bounding c's element count by INT32_MAX keeps every stride and offset of
    // both within an int.
    int64_t elements = 0;
    if (__builtin_mul_overflow(config.num_cells(), batch, &elements) ||
        __builtin_mul_overflow(elements, config.hidden_size, &elements) || elements > max)
        return "cuDNN takes 32-bit sizes; the cell state (L*D, N, H) = (" +
               std::to_string(config.num_cells()) + ", " + std::to_string(batch) + ", " +
               std::to_string(config.hidden_size) + ") has more than " + std::to_string(max) +
               " elements";
    return std::nullopt;
}

// Host copy of the lengths as cuDNN's int32 array: `out` (host, N) is overwritten; empty
// `lengths` means every sequence runs T steps. Lengths were validated by Variant (1..T, T fits).
inline void cudnn_sequence_lengths(Span<const int64_t> lengths, int64_t seq_len, int64_t batch,
                                   int32_t* out) {
    for (int64_t n = 0; n < batch; ++n)
        out[n] = static_cast<int32_t>(lengths.empty() ? seq_len : lengths[n]);
}

// The padded tail of one sequence: steps [first_step, T) of batch row `sequence`.
struct PaddedTail {
    int64_t sequence = 0;
    int64_t first_step = 0;
    int64_t steps = 0;
};

// The padded tails of a batch (int32 lengths, host, N), written into `out` (cleared first; the
// caller reserves N entries so that this allocates nothing).
inline void padded_tails(const int32_t* lengths, int64_t seq_len, int64_t batch,
                         std::vector<PaddedTail>& out) {
    out.clear();
    for (int64_t n = 0; n < batch; ++n)
        if (lengths[n] < seq_len) out.push_back({n, lengths[n], seq_len - lengths[n]});
}

}  // namespace lstm::cuda
