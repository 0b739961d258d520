#pragma once

// What the CUDA `basic` and `fused` variants share: the compact frame layout, their engine on the
// stack loop (lstm/stack_loop.hpp, the same loop the CPU engines run on), their plans. The
// engine is written once against a small "backend" (GEMM, element-wise op, lane ordering): the
// CUDA backend (cuda_common.cpp) issues cuBLAS calls and the kernels of
// kernels/cuda/lstm_kernels.cu, and the CPU tests run the same loop and engine with a host backend
// (naive GEMM, the ops' bodies in plain loops), so the whole orchestration is checked against the
// reference without a GPU. No CUDA header here.
//
// Layout. Sequences are sorted by length once per call (lstm::detail::make_batch_order: longest
// first, stable), so the sequences still running at step t are sorted rows [0, active[t]).
// Per-frame arrays are compact, like PyTorch's PackedSequence: frame (t, r) is row offset[t] + r,
// offsets in time order, S = offset[T] = sum of lengths rows in all. A step is then one contiguous
// block of rows, an all-steps GEMM is one GEMM over S rows, and work is proportional to valid
// frames. Each direction keeps a running h and c per sorted row: a row that has not started yet
// (reverse direction) still holds its initial state, a row that has ended keeps its final one, so
// the recurrent GEMM of every step reads one block and hn/cn are the running state after the loop.
//
// Styles. `basic`: per step an input GEMM, a recurrent GEMM and separate element-wise passes;
// backward per step, with the weight-gradient GEMMs inside the time loop; one stream.
// `fused`: one input GEMM over all steps per layer and direction, per step one recurrent GEMM and
// one fused kernel; backward per step one fused kernel and one GEMM, weight gradients and the
// input gradient as GEMMs over all steps; the directions of a layer run on two lanes (streams).
//
// Split backward (both styles): `data` leaves every frame's dgates in the reserve (over the
// activated gates), `weights` computes the parameter gradients from them, from h_{t-1} (saved per
// frame by forward) and from the layer inputs, in the order `all` uses: same results either way.
//
// Projections (proj_size P > 0, LSTMP): h_t = h_raw W_hr^T with h_raw = o * tanh(c_t), so h, the
// output and h0/hn are Hs = config.state_size() = P wide (Hs = H without a projection; S
// stays the number of valid frames) while c stays H wide. Per step the element-wise pass writes
// h_raw, one more GEMM projects it into the layer output and a small op carries it into the
// running h (saving h_{t-1} first). Backward first forms the total gradient reaching h_t (carry
// plus output), a GEMM takes it back to h_raw (dh W_hr), and the cell's backward reads that.
// A training forward keeps every frame's h_raw and backward every frame's total dh in the
// reserve, because the weights part needs both for dW_hr += dh^T h_raw after the data part has
// overwritten the gates. Without a projection none of this runs and nothing extra is carved.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/lstm_ops.hpp"
#include "lstm/config.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/params.hpp"
#include "lstm/stack_loop.hpp"
#include "lstm/variant.hpp"

namespace lstm::cuda {

enum class LoopStyle { basic, fused };

inline const char* to_string(LoopStyle style) {
    return style == LoopStyle::basic ? "basic" : "fused";
}

// ------------------------------------------------------------------------------------------------
// Frame index: the length sort and the compact offsets, computed on the host once per call and
// uploaded to the device as one block of int64.
// ------------------------------------------------------------------------------------------------

struct FrameIndex {
    int64_t* order;   // (N) order[r] = original batch entry of sorted row r
    int64_t* pos;     // (N) pos[n] = sorted row of original entry n (inverse of order)
    int64_t* active;  // (T) rows valid at step t (sequences with length > t)
    int64_t* offset;  // (T + 1) first compact row of step t; offset[T] = S, the valid frames
    int64_t* frame;   // (T * N, first S used) frame[k] = t * N + order[r] for compact row k
};

// Number of int64 a FrameIndex of (T, N) takes.
inline int64_t frame_index_count(int64_t seq_len, int64_t batch) {
    return 2 * batch + 2 * seq_len + 1 + seq_len * batch;
}

// Points the arrays of a FrameIndex into base (frame_index_count() int64, host or device), in
// the order of the fields.
inline FrameIndex carve_frame_index(int64_t* base, int64_t seq_len, int64_t batch) {
    FrameIndex f{};
    f.order = base;
    f.pos = f.order + batch;
    f.active = f.pos + batch;
    f.offset = f.active + seq_len;
    f.frame = f.offset + seq_len + 1;
    return f;
}

// Fills `out` (host) from lengths (host, N entries; empty: all T). Allocation-free.
inline void make_frame_index(Span<const int64_t> lengths, int64_t seq_len, int64_t batch,
                             const FrameIndex& out) {
    lstm::detail::make_batch_order(lengths, seq_len, batch,
                                   lstm::detail::BatchOrder{out.order, out.active});
    for (int64_t r = 0; r < batch; ++r) out.pos[out.order[r]] = r;
    int64_t k = 0;
    for (int64_t t = 0; t < seq_len; ++t) {
        out.offset[t] = k;
        for (int64_t r = 0; r < out.active[t]; ++r) out.frame[k++] = t * batch + out.order[r];
    }
    out.offset[seq_len] = k;
    // Unused tail (padding frames): deterministic contents, never read.
    for (; k < seq_len * batch; ++k) out.frame[k] = 0;
}

// ------------------------------------------------------------------------------------------------
// Sizes cuBLAS can take
// ------------------------------------------------------------------------------------------------

// Why the loop cannot run (config, T, N) with cuBLAS's 32-bit GEMM sizes, or nullopt. Every GEMM
// dimension and leading dimension the loop passes is one of: the input width I, the gate columns
// 4H, which bound the others (H, P < H, Hs and the layer output width D * Hs with D <= 2), and
// the rows of a GEMM: at most N per step, or with the fused style up to T * N for the GEMMs over
// all steps. Checked when sizing the buffers, which Variant::forward / backward do before any
// device work, so a call is refused whole rather than failing after some of its outputs were
// written. supports() asks with T = N = 1 for the parts that depend on the config alone.
inline std::optional<std::string> loop_size_problem(const Config& config, LoopStyle style,
                                                    int64_t seq_len, int64_t batch) {
    constexpr int64_t kMax = std::numeric_limits<int>::max();
    // 4H cannot wrap (Config::validate bounds H by 2^48); T * N is computed with an overflow
    // check, since a caller may ask with any T and N.
    int64_t frames = 0;
    const bool frames_wrap = __builtin_mul_overflow(seq_len, batch, &frames);
    const std::pair<const char*, int64_t> sizes[] = {
        {"input_size (I)", config.input_size},
        {"gate columns (4 * hidden_size)", 4 * config.hidden_size},
        {"N (GEMM rows per step)", batch}};
    for (const auto& [name, value] : sizes)
        if (value > kMax)
            return std::string("cuBLAS takes 32-bit sizes; ") + name + " = " +
                   std::to_string(value) + " exceeds " + std::to_string(kMax);
    if (style == LoopStyle::fused && (frames_wrap || frames > kMax))
        return "cuBLAS takes 32-bit sizes; fused runs GEMMs over all T * N frames, and T * N = " +
               std::to_string(seq_len) + " * " + std::to_string(batch) + " exceeds " +
               std::to_string(kMax);
    return std::nullopt;
}

// ------------------------------------------------------------------------------------------------
// When a plan's captured graph may be replayed
// ------------------------------------------------------------------------------------------------

// Everything a captured call depends on beyond its plan (whose key fixes every size; the bias
// flag too, which fixes the work): the lengths, the mode and every pointer (a graph bakes them
// in). Appends to `out` (cleared first), so a plan reuses its storage.
inline void append_pointer(std::vector<uint64_t>& out, const void* p) {
    out.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

template <typename T>
void call_signature(const ForwardArgs<T>& a, std::vector<uint64_t>& out) {
    out.clear();
    out.push_back(0);  // forward
    out.push_back(a.reserve != nullptr);
    out.push_back(static_cast<uint64_t>(a.lengths.size));
    for (int64_t v : a.lengths) out.push_back(static_cast<uint64_t>(v));
    const std::initializer_list<const void*> pointers = {a.x.data(),      a.h0.data(), a.c0.data(),
                                                         a.params.data(), a.y.data(),  a.hn.data(),
                                                         a.cn.data(),     a.workspace, a.reserve};
    for (const void* p : pointers) append_pointer(out, p);
}

template <typename T>
void call_signature(const BackwardArgs<T>& a, std::vector<uint64_t>& out) {
    out.clear();
    out.push_back(1);  // backward
    out.push_back(static_cast<uint64_t>(a.part));
    out.push_back(static_cast<uint64_t>(a.lengths.size));
    for (int64_t v : a.lengths) out.push_back(static_cast<uint64_t>(v));
    const std::initializer_list<const void*> pointers = {
        a.x.data(),       a.h0.data(),  a.c0.data(), a.params.data(), a.dy.data(),
        a.dhn.data(),     a.dcn.data(), a.dx.data(), a.dh0.data(),    a.dc0.data(),
        a.dparams.data(), a.workspace,  a.reserve};
    for (const void* p : pointers) append_pointer(out, p);
}

// When `fused` runs a call eagerly, captures it into a CUDA graph or replays the graph: the first
// call of a signature runs eagerly, the next call that repeats it is captured (and the graph
// launched), later calls with the captured signature replay. Capturing only what repeats keeps
// one-off calls (lengths that change every batch, a first call during which cuBLAS sets itself
// up) out of capture, where a lazy allocation or first-use setup would break it, and keeps the
// capture cost off calls that would never replay. Host-only, so the CPU tests check it.
enum class GraphAction { eager, capture, replay };

class GraphSchedule {
public:
    // Room for signatures of `words` entries, so that steady-state calls allocate nothing.
    void reserve(size_t words) {
        captured_.reserve(words);
        eager_.reserve(words);
    }

    // What to do with a call of signature `call` (call_signature) while graphs are enabled;
    // `have_graph`: the plan holds an executable graph (captured from captured_).
    GraphAction decide(const std::vector<uint64_t>& call, bool have_graph) const {
        if (have_graph && call == captured_) return GraphAction::replay;
        if (ran_eagerly_ && call == eager_) return GraphAction::capture;
        return GraphAction::eager;
    }

    // Records that `call` ran as `action` (after a capture: only once it succeeded). Swaps `call`
    // into the schedule's storage, keeping every vector's capacity; its contents are unspecified
    // afterwards.
    void record(GraphAction action, std::vector<uint64_t>& call) {
        if (action == GraphAction::eager) {
            eager_.swap(call);
            ran_eagerly_ = true;
        } else if (action == GraphAction::capture) {
            captured_.swap(call);
            ran_eagerly_ = false;
        }
    }

private:
    std::vector<uint64_t> captured_;  // the signature the plan's graph was captured from
    std::vector<uint64_t> eager_;     // of the last eager call (valid when ran_eagerly_)
    bool ran_eagerly_ = false;
};

// ------------------------------------------------------------------------------------------------
// Workspace and reserve beyond the stack loop's (device memory for the CUDA variants; the loop
// carves the sorted input, the ping-pong planes and every layer's output)
// ------------------------------------------------------------------------------------------------

// Scratch of one call. Per-frame arrays are compact with T * N rows of room (S <= T * N).
template <typename T>
struct Workspace {
    int64_t* index;  // frame_index_count(T, N): the device copy of the FrameIndex
    T* gates[2];     // (T*N, G) per direction: inference gates (training keeps them in the reserve)
    T* h[2];         // (N, Hs) per direction: running h (forward) / gradient into h (backward)
    T* c[2];         // (N, H) per direction: running c (forward) / gradient into c (backward)
    T* c_init[2];    // (N, H) per direction, backward: this cell's c0, sorted
    T* ones;         // (T*N) all ones: bias gradients as a GEMM with a ones vector
    T* h_raw[2];     // (N, H) per direction, with a projection only (else null): one step's h_raw
                     // in an inference forward / the gradient reaching h_raw in backward
};

// What a training forward leaves for backward besides the layer outputs; every per-frame array
// compact with T * N rows per cell.
template <typename T>
struct Reserve {
    T* gates;   // (L*D, T*N, G) activated gates; backward's data part overwrites them with dgates
    T* cell;    // (L*D, T*N, H) c_t
    T* h_prev;  // (L*D, T*N, Hs) h_{t-1}, the partner of dgates in the recurrent weight gradient
    // With a projection only (else null), the partners of dW_hr: h_raw = o * tanh(c_t) written by
    // forward, and the total gradient reaching h_t written by backward's data part.
    T* h_raw;  // (L*D, T*N, H)
    T* dh;     // (L*D, T*N, P)
};

// ------------------------------------------------------------------------------------------------
// The engine, generic over the backend
// ------------------------------------------------------------------------------------------------
//
// A backend provides, for element type T and lanes 0 and 1 (lane 0 is the caller's stream):
//   void gemm(int lane, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
//             const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
//       row-major C = alpha op(A) op(B) + beta C with kernels::cpu::gemm's meaning (beta == 0:
//       C is not read); m, n or k may be 0 only where the engine never asks for it.
//   template <class Op> void run(int lane, const Op& op, int64_t count);   op(i), i < count
//   void wait(int lane, int on_lane);  later work of `lane` starts after what `on_lane` has queued
// The stack loop (lstm/stack_loop.hpp) runs the engine with one crew of one member: every hook
// only queues work. The workspace's index must hold this call's FrameIndex on the device (the
// caller uploads it) before the first queued op runs.

template <typename T, typename Backend>
class CudaEngine {
public:
    static constexpr bool kHostMemory = false;
    // The caller's buffers may start at any address (docs/architecture.md): both are carved from
    // their first device-alignment boundary, so every array is 256-byte aligned in memory. The
    // reserve of a training forward must come back to backward at the same address, so that
    // both calls find the same boundary.
    static constexpr size_t kBoundary = lstm::detail::kDeviceAlignment;

    // backend and host_rows (stack_row_count(T, N) int64 of host memory for the loop's row
    // index) may be null only to size the buffers.
    CudaEngine(const Config& config, int64_t seq_len, int64_t batch,
               LoopStyle style = LoopStyle::basic, Backend* backend = nullptr,
               int64_t* host_rows = nullptr)
        : style_(style),
          config_(config),
          seq_len_(seq_len),
          batch_(batch),
          frames_(seq_len * batch),
          b_(backend),
          host_rows_(host_rows) {}

    int64_t x_stride() const { return config_.input_size; }
    // Directions run on lanes instead (fused), queued one after the other.
    bool side_by_side(int) const { return false; }
    int64_t* host_rows() const { return host_rows_; }
    template <typename Body>
    void run_team(Body&& body) {
        body(Crew::alone());
    }
    const Workspace<T>& workspace() const { return ws_; }
    const Reserve<T>& reserve() const { return rs_; }

    void carve_workspace(lstm::detail::Carver& carve) {
        const int64_t hidden = config_.hidden_size;
        ws_.index = carve.take<int64_t>(frame_index_count(seq_len_, batch_));
        dev_ = carve_frame_index(ws_.index, seq_len_, batch_);
        for (int d = 0; d < 2; ++d) {
            const bool used = d < config_.num_directions();
            ws_.gates[d] = used ? carve.take<T>(frames_ * 4 * hidden) : nullptr;
            ws_.h[d] = used ? carve.take<T>(batch_ * config_.state_size()) : nullptr;
            ws_.c[d] = used ? carve.take<T>(batch_ * hidden) : nullptr;
            ws_.c_init[d] = used ? carve.take<T>(batch_ * hidden) : nullptr;
        }
        ws_.ones = carve.take<T>(frames_);
        for (int d = 0; d < 2; ++d) {
            const bool used = d < config_.num_directions() && config_.proj_size > 0;
            ws_.h_raw[d] = used ? carve.take<T>(batch_ * hidden) : nullptr;
        }
    }

    void carve_reserve(lstm::detail::Carver& carve) {
        const int64_t planes = config_.num_cells() * frames_, hidden = config_.hidden_size;
        rs_.gates = carve.take<T>(planes * 4 * hidden);
        rs_.cell = carve.take<T>(planes * hidden);
        rs_.h_prev = carve.take<T>(planes * config_.state_size());
        if (config_.proj_size > 0) {
            rs_.h_raw = carve.take<T>(planes * hidden);
            rs_.dh = carve.take<T>(planes * config_.proj_size);
        }
    }

    // dst (S, width) compact <- src (T, N, width) caller order, on lane 0 (the device index maps
    // each compact row to its source row).
    void gather_frames(const RowLayout& rows, const T* src, int64_t width, T* dst, int64_t,
                       const Crew&) {
        b_->run(0, kernels::cuda::GatherFrames<T>{src, dev_.frame, width, dst},
                rows.frames() * width);
    }
    // dst (T, N, width) caller order <- src (S, width) compact, padded rows zeroed; lane 0.
    void scatter_frames(const RowLayout&, const T* src, int64_t, int64_t width, T* dst,
                        const Crew&) {
        b_->run(0,
                kernels::cuda::UnpackFrames<T>{src, dev_.pos, dev_.active, dev_.offset, batch_,
                                               width, dst},
                frames_ * width);
    }

    // The cell's initial states; `fused` projects every frame's input at once.
    void begin_forward(const ForwardCell<T>& c, const Crew&) {
        if (c.direction == 0) fork();
        const int lane = lane_of(c.direction);
        const int64_t g_cols = gate_cols(), hs = config_.state_size();
        const T* params = c.args->params.data();
        gather_state(lane, c.args->h0, c.cell * batch_ * hs, hs, ws_.h[c.direction]);
        gather_state(lane, c.args->c0, c.cell * batch_ * config_.hidden_size, config_.hidden_size,
                     ws_.c[c.direction]);
        if (style_ == LoopStyle::fused)
            b_->gemm(lane, false, true, c.layout->frames(), g_cols, c.in_width, T(1), c.in,
                     c.in_width, params + c.p.weight_ih, c.in_width, T(0), forward_gates(c),
                     g_cols);
    }

    void forward_step(const ForwardCell<T>& c, const StepTime& st, const Crew&) {
        namespace k = kernels::cuda;
        if (st.rows == 0) return;
        const auto [hidden, g_cols, hs, proj, out_width] = widths();
        const int lane = lane_of(c.direction);
        const int64_t in_width = c.in_width, rows = st.rows, k0 = st.row;
        const CellOffsets& p = c.p;
        const T* params = c.args->params.data();
        T* h = ws_.h[c.direction];
        T* cs = ws_.c[c.direction];
        T* gates = forward_gates(c) + k0 * g_cols;
        T* c_out = c.training ? rs_.cell + st.frame * hidden : nullptr;
        T* h_prev_out = c.training ? rs_.h_prev + st.frame * hs : nullptr;
        T* out = c.out + k0 * out_width + c.direction * hs;
        // Where o * tanh(c) goes: straight into the output and the running h, or, with a
        // projection, into h_raw, which the projection GEMM and CarryHidden then turn into those.
        T* h_raw = proj == 0    ? nullptr
                   : c.training ? rs_.h_raw + st.frame * hidden
                                : ws_.h_raw[c.direction];
        T* cell_h_dst = proj > 0 ? h_raw : out;
        const int64_t cell_h_ld = proj > 0 ? hidden : out_width;
        T* cell_h_run = proj > 0 ? nullptr : h;
        T* cell_h_prev = proj > 0 ? nullptr : h_prev_out;
        if (style_ == LoopStyle::basic)
            b_->gemm(lane, false, true, rows, g_cols, in_width, T(1), c.in + k0 * in_width,
                     in_width, params + p.weight_ih, in_width, T(0), gates, g_cols);
        b_->gemm(lane, false, true, rows, g_cols, hs, T(1), h, hs, params + p.weight_hh, hs, T(1),
                 gates, g_cols);
        if (style_ == LoopStyle::basic) {
            if (p.has_bias())
                b_->run(lane, k::AddBias<T>{gates, params + p.bias_ih, params + p.bias_hh, g_cols},
                        rows * g_cols);
            b_->run(lane, k::Activate<T>{gates, hidden}, rows * g_cols);
            b_->run(lane, k::UpdateCell<T>{gates, hidden, cs, c_out}, rows * hidden);
            b_->run(lane,
                    k::UpdateHidden<T>{gates, hidden, cs, cell_h_run, cell_h_prev, cell_h_dst,
                                       cell_h_ld},
                    rows * hidden);
        } else {
            b_->run(lane,
                    k::FusedForward<T>{gates, p.has_bias() ? params + p.bias_ih : nullptr,
                                       p.has_bias() ? params + p.bias_hh : nullptr, hidden, cs,
                                       cell_h_run, c_out, cell_h_prev, cell_h_dst, cell_h_ld},
                    rows * hidden);
        }
        if (proj > 0) {
            // h_t (rows, P) = h_raw (rows, H) W_hr^T, into the output; then the running h.
            b_->gemm(lane, false, true, rows, proj, hidden, T(1), h_raw, hidden,
                     params + p.weight_hr, hidden, T(0), out, out_width);
            b_->run(lane, k::CarryHidden<T>{out, out_width, hs, h, h_prev_out}, rows * hs);
        }
    }

    // hn (Hs wide) / cn (H wide): the running state after the loop.
    void end_forward(const ForwardCell<T>& c, const Crew&) {
        const int lane = lane_of(c.direction);
        const int64_t hs = config_.state_size(), hidden = config_.hidden_size;
        scatter_state(lane, ws_.h[c.direction], c.cell * batch_ * hs, hs, c.args->hn);
        scatter_state(lane, ws_.c[c.direction], c.cell * batch_ * hidden, hidden, c.args->cn);
        if (c.direction == config_.num_directions() - 1) join();
    }

    void begin_backward(const BackwardCell<T>& c, const Crew&) {
        if (c.weights && c.layer == config_.num_layers - 1 && c.direction == 0) fill_ones();
        if (c.direction == 0) fork();
        const int lane = lane_of(c.direction);
        const int64_t hs = config_.state_size(), hidden = config_.hidden_size;
        const int64_t h_state = c.cell * batch_ * hs, c_state = c.cell * batch_ * hidden;
        gather_state(lane, c.args->dhn, h_state, hs, ws_.h[c.direction]);
        gather_state(lane, c.args->dcn, c_state, hidden, ws_.c[c.direction]);
        gather_state(lane, c.args->c0, c_state, hidden, ws_.c_init[c.direction]);
    }

    // Leaves the step's dgates in the reserve (and, with a projection, its total dh); `basic`
    // also adds into d_in per step (direction 0 overwrites, 1 adds).
    void backward_step(const BackwardCell<T>& c, const StepTime& st, const Crew&) {
        namespace k = kernels::cuda;
        if (st.rows == 0) return;
        const auto [hidden, g_cols, hs, proj, out_width] = widths();
        const int lane = lane_of(c.direction);
        const int64_t in_width = c.in_width, rows = st.rows, k0 = st.row;
        const CellOffsets& p = c.p;
        const T* params = c.args->params.data();
        T* dh = ws_.h[c.direction];
        T* dc = ws_.c[c.direction];
        const T* c_init = ws_.c_init[c.direction];
        // The step before this one in forward order: where c_{t-1} comes from.
        const T* c_prev_step = rs_.cell + st.frame_prev * hidden;
        T* g = rs_.gates + st.frame * g_cols;
        const T* cell = rs_.cell + st.frame * hidden;
        const T* d_out_step = c.d_out + k0 * out_width + c.direction * hs;
        // What the cell's backward reads as the gradient reaching o * tanh(c): the carry plus the
        // output's gradient, or, with a projection, (carry + output) W_hr, formed here.
        const T* cell_dh = dh;
        const T* cell_d_out = d_out_step;
        if (proj > 0) {
            T* dh_total = rs_.dh + st.frame * proj;
            T* dh_raw = ws_.h_raw[c.direction];
            b_->run(lane, k::SumOutputGrad<T>{dh, d_out_step, out_width, hs, dh_total}, rows * hs);
            b_->gemm(lane, false, false, rows, hidden, proj, T(1), dh_total, proj,
                     params + p.weight_hr, hidden, T(0), dh_raw, hidden);
            cell_dh = dh_raw;
            cell_d_out = nullptr;
        }
        if (style_ == LoopStyle::basic) {
            if (proj == 0)
                b_->run(lane, k::AddOutputGrad<T>{dh, d_out_step, out_width, hidden},
                        rows * hidden);
            b_->run(lane, k::HiddenBackward<T>{g, cell, cell_dh, dc, hidden}, rows * hidden);
            b_->run(lane, k::CellBackward<T>{g, c_prev_step, st.rows_prev, c_init, dc, hidden},
                    rows * hidden);
        } else {
            b_->run(lane,
                    k::FusedBackward<T>{g, cell, c_prev_step, st.rows_prev, c_init, cell_dh,
                                        cell_d_out, out_width, dc, hidden},
                    rows * hidden);
        }
        // Gradient into h_{t-1} of the active rows; the others keep their carry.
        b_->gemm(lane, false, false, rows, hs, g_cols, T(1), g, g_cols, params + p.weight_hh, hs,
                 T(0), dh, hs);
        if (style_ == LoopStyle::basic && c.d_in)
            b_->gemm(lane, false, false, rows, in_width, g_cols, T(1), g, g_cols,
                     params + p.weight_ih, in_width, c.direction == 0 ? T(0) : T(1),
                     c.d_in + k0 * in_width, in_width);
    }

    // dh0 / dc0 of the cell; `fused` then adds the weight gradients as GEMMs over all frames.
    void end_backward(const BackwardCell<T>& c, const Crew&) {
        const int lane = lane_of(c.direction);
        const int64_t hs = config_.state_size(), hidden = config_.hidden_size;
        scatter_state(lane, ws_.h[c.direction], c.cell * batch_ * hs, hs, c.args->dh0);
        scatter_state(lane, ws_.c[c.direction], c.cell * batch_ * hidden, hidden, c.args->dc0);
        if (style_ == LoopStyle::fused && c.weights)
            weight_grads(c, 0, c.layout->frames(), c.cell * frames_, lane);
        if (c.direction == config_.num_directions() - 1) join();
    }

    // `fused`: d_in (S, in) = sum over directions of dgates (S, G) W_ih (G, in), on lane 0
    // (direction 1's after end_backward joined its lane); `basic` added it per step.
    void input_grads(const BackwardCell<T>& c, const Crew&) {
        if (style_ != LoopStyle::fused || c.d_in == nullptr) return;
        b_->gemm(0, false, false, c.layout->frames(), c.in_width, gate_cols(), T(1),
                 rs_.gates + c.cell * frames_ * gate_cols(), gate_cols(),
                 c.args->params.data() + c.p.weight_ih, c.in_width, c.direction == 0 ? T(0) : T(1),
                 c.d_in, c.in_width);
    }

    // BackwardPart::weights: the weight GEMMs of backward in its order, every cell on its lane.
    void begin_weights(const BackwardCell<T>& c, const Crew&) {
        if (c.layer != 0 || c.direction != 0) return;
        fill_ones();
        fork();
    }
    void weight_step(const BackwardCell<T>& c, const StepTime& st, const Crew&) {
        if (style_ == LoopStyle::basic && st.rows > 0)
            weight_grads(c, st.row, st.rows, st.frame, lane_of(c.direction));
    }
    void end_weights(const BackwardCell<T>& c, const Crew&) {
        if (style_ == LoopStyle::fused)
            weight_grads(c, 0, c.layout->frames(), c.cell * frames_, lane_of(c.direction));
        if (c.cell == config_.num_cells() - 1) join();
    }

private:
    int64_t gate_cols() const { return 4 * config_.hidden_size; }
    // What the step hooks read of the config: H, the gate columns 4H, Hs, P and the layer
    // output's width D * Hs.
    struct Widths {
        int64_t hidden, g_cols, hs, proj, out_width;
    };
    Widths widths() const {
        return {config_.hidden_size, gate_cols(), config_.state_size(), config_.proj_size,
                config_.output_size()};
    }
    int lanes() const { return style_ == LoopStyle::fused ? int(config_.num_directions()) : 1; }
    int lane_of(int64_t direction) const {
        return style_ == LoopStyle::fused ? static_cast<int>(direction) : 0;
    }
    // Lane 1 joins after what lane 0 queued so far; lane 0 later waits for lane 1's work.
    void fork() const {
        for (int lane = 1; lane < lanes(); ++lane) b_->wait(lane, 0);
    }
    void join() const {
        for (int lane = 1; lane < lanes(); ++lane) b_->wait(0, lane);
    }
    void fill_ones() const { b_->run(0, kernels::cuda::Fill<T>{ws_.ones, T(1)}, frames_); }

    // The cell's gates: the reserve's plane when training, else the direction's workspace.
    T* forward_gates(const ForwardCell<T>& c) const {
        return c.training ? rs_.gates + c.cell * frames_ * gate_cols() : ws_.gates[c.direction];
    }

    // dst (N, width) sorted, on `lane` <- the rows of one cell's state in v (L*D, N, width)
    // original order (width Hs for h, H for c), `state` its first element; zeros when v is empty.
    // Overwrites.
    void gather_state(int lane, const TensorView<const T>& v, int64_t state, int64_t width,
                      T* dst) const {
        b_->run(lane,
                kernels::cuda::GatherRows<T>{v.empty() ? nullptr : v.data() + state, dev_.order,
                                             width, dst},
                batch_ * width);
    }

    // The cell's rows of v (L*D, N, width) original order, from `state` on <- src (N, width)
    // sorted, on `lane`; nothing when v is empty (an output not asked for). Overwrites.
    void scatter_state(int lane, const T* src, int64_t state, int64_t width,
                       const TensorView<T>& v) const {
        if (v.empty()) return;
        b_->run(lane, kernels::cuda::ScatterRows<T>{src, dev_.order, width, v.data() + state},
                batch_ * width);
    }

    // Compact rows [k0, k0 + rows) of cell c, `frame` the first one's row in the reserve's
    // per-cell planes: ADDS dgates^T h_{t-1} into dW_hh (4H, Hs), dgates^T x into dW_ih (4H, in),
    // with a projection dh^T h_raw into dW_hr (P, H), and the column sums of dgates into both
    // biases (dparams, PyTorch layout; x is the layer input (S, in) compact). One step of
    // `basic`, or all S frames at once for `fused`.
    void weight_grads(const BackwardCell<T>& c, int64_t k0, int64_t rows, int64_t frame,
                      int lane) const {
        const int64_t hidden = config_.hidden_size, g_cols = gate_cols();
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = c.in_width;
        const CellOffsets& p = c.p;
        T* grads = c.args->dparams.data();
        const T* g = rs_.gates + frame * g_cols;
        const T* h_prev = rs_.h_prev + frame * hs;
        b_->gemm(lane, true, false, g_cols, hs, rows, T(1), g, g_cols, h_prev, hs, T(1),
                 grads + p.weight_hh, hs);
        b_->gemm(lane, true, false, g_cols, in_width, rows, T(1), g, g_cols, c.in + k0 * in_width,
                 in_width, T(1), grads + p.weight_ih, in_width);
        if (proj > 0)
            b_->gemm(lane, true, false, proj, hidden, rows, T(1), rs_.dh + frame * proj, proj,
                     rs_.h_raw + frame * hidden, hidden, T(1), grads + p.weight_hr, hidden);
        if (!p.has_bias()) return;
        b_->gemm(lane, true, false, g_cols, 1, rows, T(1), g, g_cols, ws_.ones, 1, T(1),
                 grads + p.bias_ih, 1);
        b_->gemm(lane, true, false, g_cols, 1, rows, T(1), g, g_cols, ws_.ones, 1, T(1),
                 grads + p.bias_hh, 1);
    }

    LoopStyle style_;
    const Config& config_;
    int64_t seq_len_, batch_, frames_;
    Backend* b_;
    int64_t* host_rows_;
    Workspace<T> ws_{};
    Reserve<T> rs_{};
    FrameIndex dev_{};
};

// The engine's buffers are sized without a backend.
struct SizingBackend {};
template <typename T>
using CudaSizing = CudaEngine<T, SizingBackend>;

inline size_t workspace_size(const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
    return stack_buffer_bytes<CudaSizing>(config, dtype, seq_len, batch, false);
}
inline size_t reserve_size(const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
    return stack_buffer_bytes<CudaSizing>(config, dtype, seq_len, batch, true);
}

// The stack loop on the CUDA engine with backend B.
template <typename T, typename B>
using CudaLoop = StackLoop<T, CudaEngine<T, B>>;

// ------------------------------------------------------------------------------------------------
// The plans of the CUDA variants (cuda_common.cpp, lstm_cuda only): per entry point (a training or
// an inference forward, each backward part) the index upload, optional graph capture and replay,
// then the stack loop on the engine with the CUDA backend. Arguments are validated by
// Plan::forward / backward; every tensor is device memory, lengths host.
// ------------------------------------------------------------------------------------------------

std::unique_ptr<lstm::Plan> make_loop_plan(LoopStyle style, const Variant& variant,
                                           const PlanRequest& request);

}  // namespace lstm::cuda
