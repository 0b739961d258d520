#pragma once

// Host-side preparation of a CUDA CTC call (kernels/cuda/ctc.cu): the per-sample facts and the
// sorted label order the kernels read, and the layout of the one device scratch buffer that holds
// them and the alpha/beta tables. Plain host C++ (no CUDA header), so the CPU suite tests the
// same sizing and carving the launcher uses. Allocation-free: the caller owns every buffer.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ctc_body.hpp"

namespace lstm::kernels::cuda {

// Sizes of a call, from its lengths.
struct CtcSizes {
    int64_t total_labels = 0;  // sum of target lengths
    int64_t total_states = 0;  // sum over samples of frames * (2 * labels + 1): one table
    int64_t max_states = 1;    // 2 * (largest target length) + 1
};

// input_lengths, target_lengths: host (batch), validated (>= 1 and >= 0).
inline CtcSizes ctc_sizes(int64_t batch, const int64_t* input_lengths,
                          const int64_t* target_lengths) {
    CtcSizes s;
    for (int64_t n = 0; n < batch; ++n) {
        const int64_t states = 2 * target_lengths[n] + 1;
        s.total_labels += target_lengths[n];
        s.total_states += input_lengths[n] * states;
        s.max_states = std::max(s.max_states, states);
    }
    return s;
}

// Byte offsets into the device scratch. The first upload_bytes are filled on the host (in a
// staging buffer with the same layout) and copied in one transfer.
struct CtcLayout {
    size_t samples = 0;  // CtcSample (batch)
    size_t labels = 0;   // int32 (total_labels)
    size_t order = 0;    // int32 (total_labels)
    // int32 (2 * batch): target lengths then input lengths, as cuDNN's CTC reads them.
    size_t lengths32 = 0;
    size_t upload_bytes = 0;
    size_t log_norm = 0;  // double (max_time * batch, 2)
    size_t loglik = 0;    // double (batch)
    size_t losses = 0;    // double (batch): downloaded for the reduction
    size_t costs = 0;     // float (batch): cuDNN's costs
    size_t alpha = 0;     // double (total_states)
    size_t beta = 0;      // double (total_states)
    size_t ring = 0;      // double (batch * 2 * 2 * max_states)
    size_t bytes = 0;     // total
};

// Every piece starts at a multiple of 256 bytes, the alignment cudaMalloc guarantees, so the
// tables are as aligned as a fresh allocation.
constexpr size_t kCtcAlign = 256;

inline CtcLayout ctc_layout(int64_t max_time, int64_t batch, const CtcSizes& sizes) {
    size_t at = 0;
    auto take = [&](size_t bytes) {
        const size_t start = (at + kCtcAlign - 1) / kCtcAlign * kCtcAlign;
        at = start + bytes;
        return start;
    };
    const auto count = [](int64_t n) { return static_cast<size_t>(n); };
    CtcLayout l;
    l.samples = take(count(batch) * sizeof(CtcSample));
    l.labels = take(count(sizes.total_labels) * sizeof(int32_t));
    l.order = take(count(sizes.total_labels) * sizeof(int32_t));
    l.lengths32 = take(count(2 * batch) * sizeof(int32_t));
    l.upload_bytes = at;
    l.log_norm = take(count(max_time * batch) * 2 * sizeof(double));
    l.loglik = take(count(batch) * sizeof(double));
    l.losses = take(count(batch) * sizeof(double));
    l.costs = take(count(batch) * sizeof(float));
    l.alpha = take(count(sizes.total_states) * sizeof(double));
    l.beta = take(count(sizes.total_states) * sizeof(double));
    l.ring = take(count(batch * 4 * sizes.max_states) * sizeof(double));
    l.bytes = (at + kCtcAlign - 1) / kCtcAlign * kCtcAlign;
    return l;
}

// What the host fills in: targets (padded with target_stride > 0, or concatenated with 0) and the
// lengths, all host memory and validated; grad_scale and divide_by_target_length as in
// kernels::cpu::CtcProblem.
struct CtcHostInputs {
    int64_t batch = 0;
    const int64_t* targets = nullptr;
    int64_t target_stride = 0;
    const int64_t* input_lengths = nullptr;
    const int64_t* target_lengths = nullptr;
    double grad_scale = 1.0;
    bool divide_by_target_length = false;
};

// Fills the upload part of `staging` (host, at least layout.upload_bytes, any alignment that
// suits CtcSample, i.e. 8 bytes) with the per-sample facts, the labels as int32, each sample's
// label order sorted by (class, index) and the int32 lengths. Overwrites; allocates nothing.
inline void ctc_fill_upload(const CtcHostInputs& in, const CtcLayout& layout, void* staging) {
    char* base = static_cast<char*>(staging);
    auto* samples = reinterpret_cast<CtcSample*>(base + layout.samples);
    auto* labels = reinterpret_cast<int32_t*>(base + layout.labels);
    auto* order = reinterpret_cast<int32_t*>(base + layout.order);
    auto* lengths32 = reinterpret_cast<int32_t*>(base + layout.lengths32);
    int64_t label_start = 0, state_offset = 0, concatenated = 0;
    for (int64_t n = 0; n < in.batch; ++n) {
        const int64_t count = in.target_lengths[n], frames = in.input_lengths[n];
        CtcSample& s = samples[n];
        s.state_offset = state_offset;
        s.label_start = label_start;
        s.frames = static_cast<int32_t>(frames);
        s.labels = static_cast<int32_t>(count);
        s.scale = in.grad_scale;
        if (in.divide_by_target_length) s.scale /= static_cast<double>(std::max<int64_t>(count, 1));
        const int64_t* src =
            in.targets + (in.target_stride > 0 ? n * in.target_stride : concatenated);
        int32_t* dst = labels + label_start;
        int32_t* ord = order + label_start;
        for (int64_t k = 0; k < count; ++k) {
            dst[k] = static_cast<int32_t>(src[k]);
            ord[k] = static_cast<int32_t>(k);
        }
        // Unique keys (the index breaks ties), so std::sort's order is fully determined; it sorts
        // in place without allocating.
        std::sort(ord, ord + count, [dst](int32_t x, int32_t y) {
            return dst[x] != dst[y] ? dst[x] < dst[y] : x < y;
        });
        lengths32[n] = static_cast<int32_t>(count);
        lengths32[in.batch + n] = static_cast<int32_t>(frames);
        concatenated += count;
        label_start += count;
        state_offset += frames * (2 * count + 1);
    }
}

// Whether both recursion rings of a block (2 rows of max_states doubles) fit in the shared memory
// a kernel gets without opting in (48 KiB); otherwise the rings live in global scratch.
constexpr size_t kCtcSharedRingBytes = size_t(48) << 10;
inline bool ctc_ring_in_shared(int64_t max_states) {
    return static_cast<size_t>(2 * max_states) * sizeof(double) <= kCtcSharedRingBytes;
}

// Threads of a recursion block: one state each up to 512 (a multiple of the warp), more states
// than that are taken in turns. 512 keeps a block's barrier cheap; a sample's steps are serial
// anyway, so more threads would only wait.
constexpr int64_t kCtcMaxRecursionThreads = 512;
inline int64_t ctc_recursion_threads(int64_t max_states) {
    const int64_t warps = (max_states + kWarpLanes - 1) / kWarpLanes;
    return std::min(kCtcMaxRecursionThreads, warps * kWarpLanes);
}

// Threads of a gradient block (a power of two, for the tree sum): one frame's classes and states.
constexpr int64_t kCtcGradThreads = 128;
// Warps (frames) per block of the normalizer kernel.
constexpr int64_t kCtcNormWarps = 8;

}  // namespace lstm::kernels::cuda
