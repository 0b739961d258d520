#pragma once

// What the CUDA `basic` and `fused` variants share: the compact frame layout, the sizing and
// carving of workspace and reserve, the plan keys, and the time loop itself. The loop is written
// once against a small "backend" (GEMM, element-wise op, lane ordering): the CUDA backend
// (cuda_common.cpp) issues cuBLAS calls and the kernels of kernels/cuda/lstm_kernels.cu, and the
// CPU tests run the same loop with a host backend (naive GEMM, the ops' bodies in plain loops),
// so the whole orchestration is checked against the reference without a GPU. No CUDA header here.
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/lstm_ops.hpp"
#include "lstm/config.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/params.hpp"
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
// Workspace and reserve (device memory for the CUDA variants)
// ------------------------------------------------------------------------------------------------

// Scratch of one call. Per-frame arrays are compact with T * N rows of room (S <= T * N).
template <typename T>
struct Workspace {
    int64_t* index;  // frame_index_count(T, N): the device copy of the FrameIndex
    T* x_c;          // (T*N, I) layer-0 input, compact
    T* ping;         // (T*N, W) W = max(I, D*Hs): inference layer output / backward d(output)
    T* pong;         // (T*N, W) the other half of the ping-pong pair
    T* gates[2];     // (T*N, G) per direction: inference gates (training keeps them in the reserve)
    T* h[2];         // (N, Hs) per direction: running h (forward) / gradient into h (backward)
    T* c[2];         // (N, H) per direction: running c (forward) / gradient into c (backward)
    T* c_init[2];    // (N, H) per direction, backward: this cell's c0, sorted
    T* ones;         // (T*N) all ones: bias gradients as a GEMM with a ones vector
    // (N, H) per direction, with a projection only (else null): one step's h_raw in an inference
    // forward / the gradient reaching h_raw in backward. Carved last, so that a config without a
    // projection keeps the layout it had before projections existed.
    T* h_raw[2];
};

// What a training forward leaves for backward; every per-frame array compact with T * N rows.
template <typename T>
struct Reserve {
    T* out;     // (L, T*N, D*Hs) every layer's output
    T* gates;   // (L*D, T*N, G) activated gates; backward's data part overwrites them with dgates
    T* cell;    // (L*D, T*N, H) c_t
    T* h_prev;  // (L*D, T*N, Hs) h_{t-1}, the partner of dgates in the recurrent weight gradient
    // With a projection only (else null), the partners of dW_hr: h_raw = o * tanh(c_t) written by
    // forward, and the total gradient reaching h_t written by backward's data part.
    T* h_raw;  // (L*D, T*N, H)
    T* dh;     // (L*D, T*N, P)
};

template <typename T>
Workspace<T> carve_workspace(lstm::detail::Carver& carve, const Config& config, int64_t seq_len,
                             int64_t batch) {
    const int64_t frames = seq_len * batch, hidden = config.hidden_size;
    const int64_t width = std::max(config.input_size, config.output_size());
    Workspace<T> w{};
    w.index = carve.take<int64_t>(frame_index_count(seq_len, batch));
    w.x_c = carve.take<T>(frames * config.input_size);
    w.ping = carve.take<T>(frames * width);
    w.pong = carve.take<T>(frames * width);
    for (int d = 0; d < 2; ++d) {
        const bool used = d < config.num_directions();
        w.gates[d] = used ? carve.take<T>(frames * 4 * hidden) : nullptr;
        w.h[d] = used ? carve.take<T>(batch * config.state_size()) : nullptr;
        w.c[d] = used ? carve.take<T>(batch * hidden) : nullptr;
        w.c_init[d] = used ? carve.take<T>(batch * hidden) : nullptr;
    }
    w.ones = carve.take<T>(frames);
    for (int d = 0; d < 2; ++d) {
        const bool used = d < config.num_directions() && config.proj_size > 0;
        w.h_raw[d] = used ? carve.take<T>(batch * hidden) : nullptr;
    }
    return w;
}

template <typename T>
Reserve<T> carve_reserve(lstm::detail::Carver& carve, const Config& config, int64_t seq_len,
                         int64_t batch) {
    const int64_t frames = seq_len * batch, hidden = config.hidden_size;
    Reserve<T> r{};
    r.out = carve.take<T>(config.num_layers * frames * config.output_size());
    r.gates = carve.take<T>(config.num_cells() * frames * 4 * hidden);
    r.cell = carve.take<T>(config.num_cells() * frames * hidden);
    r.h_prev = carve.take<T>(config.num_cells() * frames * config.state_size());
    if (config.proj_size > 0) {
        r.h_raw = carve.take<T>(config.num_cells() * frames * hidden);
        r.dh = carve.take<T>(config.num_cells() * frames * config.proj_size);
    }
    return r;
}

// The caller's buffers may start at any address (docs/architecture.md): both are carved from
// their first lstm::detail::kDeviceAlignment boundary, and the sizes leave room for the skipped
// bytes. The reserve of a training forward must come back to backward at the same address, so
// that both calls find the same boundary.
inline size_t workspace_size(const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
    return lstm::detail::carved_bytes_from_boundary<lstm::detail::kDeviceAlignment>(
        dtype, [&](lstm::detail::Carver& carve, auto element) {
            carve_workspace<decltype(element)>(carve, config, seq_len, batch);
        });
}

inline size_t reserve_size(const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
    return lstm::detail::carved_bytes_from_boundary<lstm::detail::kDeviceAlignment>(
        dtype, [&](lstm::detail::Carver& carve, auto element) {
            carve_reserve<decltype(element)>(carve, config, seq_len, batch);
        });
}

// The workspace / reserve inside a caller's buffer of workspace_size / reserve_size bytes at
// `base` (device memory on the GPU, host in the CPU tests; any alignment): the arrays start at
// the first device-alignment boundary, so every one of them is 256-byte aligned in memory.
template <typename T>
Workspace<T> workspace_in(void* base, const Config& config, int64_t seq_len, int64_t batch) {
    lstm::detail::Carver carve =
        lstm::detail::carver_from_boundary<lstm::detail::kDeviceAlignment>(base);
    return carve_workspace<T>(carve, config, seq_len, batch);
}

template <typename T>
Reserve<T> reserve_in(void* base, const Config& config, int64_t seq_len, int64_t batch) {
    lstm::detail::Carver carve =
        lstm::detail::carver_from_boundary<lstm::detail::kDeviceAlignment>(base);
    return carve_reserve<T>(carve, config, seq_len, batch);
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
// Plans: what a call caches in the context, and when a cached graph may be replayed
// ------------------------------------------------------------------------------------------------

// Key of the per-shape plan of one entry point (`entry`: "forward_training", "backward_data",
// ...; modes a caller alternates get plans of their own): everything that fixes buffer sizes,
// and the bias flag, which fixes no size but the work a captured graph does (the signature below
// holds only lengths and pointers).
// Lengths and pointers are not in it (they would grow the cache with every new batch); they go
// into the call's signature, and a plan whose signature differs runs eagerly and, when the new
// signature repeats, re-captures its graph in place (GraphSchedule below).
inline void write_plan_key(std::string& out, LoopStyle style, const char* entry,
                           const Config& config, DType dtype, int64_t seq_len, int64_t batch) {
    // Appends piece by piece into `out` (reused by the caller), so that a steady-state call
    // builds its key without touching the heap: every number is a short (SSO) string.
    out.clear();
    out += "cuda_";
    out += to_string(style);
    out += "/";
    out += entry;
    const std::pair<const char*, int64_t> fields[] = {
        {"/I", config.input_size}, {"/H", config.hidden_size},
        {"/L", config.num_layers}, {"/D", config.num_directions()},
        {"/P", config.proj_size},  {"/B", config.bias ? 1 : 0},
        {"/T", seq_len},           {"/N", batch}};
    for (const auto& [tag, value] : fields) {
        out += tag;
        out += std::to_string(value);
    }
    out += "/";
    out += lstm::to_string(dtype);
}

inline std::string plan_key(LoopStyle style, const char* entry, const Config& config, DType dtype,
                            int64_t seq_len, int64_t batch) {
    std::string out;
    write_plan_key(out, style, entry, config, dtype, seq_len, batch);
    return out;
}

// Everything a captured call depends on beyond its plan key: the lengths, the mode and every
// pointer (a graph bakes them in). Appends to `out` (cleared first) so a plan reuses its storage.
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
// The time loop, generic over the backend
// ------------------------------------------------------------------------------------------------
//
// A backend provides, for element type T and lanes 0 and 1 (lane 0 is the caller's stream):
//   void gemm(int lane, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
//             const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
//       row-major C = alpha op(A) op(B) + beta C with kernels::cpu::gemm's meaning (beta == 0:
//       C is not read); m, n or k may be 0 only where the loop never asks for it.
//   template <class Op> void run(int lane, const Op& op, int64_t count);   op(i), i < count
//   void wait(int lane, int on_lane);  later work of `lane` starts after what `on_lane` has queued

template <typename T, typename Backend>
class Loop {
public:
    // `host` is the FrameIndex of this call on the host; the workspace's index must already hold
    // the same block on the device (the caller uploads it) before the first queued op runs.
    Loop(LoopStyle style, const Config& config, int64_t seq_len, int64_t batch,
         const FrameIndex& host, Backend& backend)
        : style_(style),
          config_(config),
          seq_len_(seq_len),
          batch_(batch),
          frames_(seq_len * batch),
          host_(host),
          b_(backend) {}

    // Number of lanes the loop uses: the fused style runs the two directions of a layer
    // concurrently.
    int lanes() const { return style_ == LoopStyle::fused ? int(config_.num_directions()) : 1; }

    void forward(const ForwardArgs<T>& args) const {
        const Workspace<T> ws = workspace_in<T>(args.workspace, config_, seq_len_, batch_);
        const bool training = args.reserve != nullptr;
        const Reserve<T> rs =
            training ? reserve_in<T>(args.reserve, config_, seq_len_, batch_) : Reserve<T>{};
        const FrameIndex dev = carve_frame_index(ws.index, seq_len_, batch_);
        const int64_t valid = host_.offset[seq_len_], out_width = config_.output_size();
        b_.run(0,
               kernels::cuda::GatherFrames<T>{args.x.data(), dev.frame, config_.input_size, ws.x_c},
               valid * config_.input_size);
        const T* layer_in = ws.x_c;
        T* layer_out = nullptr;
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            layer_out =
                training ? rs.out + l * frames_ * out_width : (l % 2 == 0 ? ws.ping : ws.pong);
            fork();
            for (int64_t d = 0; d < config_.num_directions(); ++d)
                forward_cell(args, l, d, ws, rs, dev, layer_in, layer_out);
            join();
            layer_in = layer_out;
        }
        b_.run(0,
               kernels::cuda::UnpackFrames<T>{layer_out, dev.pos, dev.active, dev.offset, batch_,
                                              out_width, args.y.data()},
               frames_ * out_width);
    }

    void backward(const BackwardArgs<T>& args) const {
        const bool data = args.part != BackwardPart::weights;
        const bool weights = args.part != BackwardPart::data;
        const Workspace<T> ws = workspace_in<T>(args.workspace, config_, seq_len_, batch_);
        const Reserve<T> rs = reserve_in<T>(args.reserve, config_, seq_len_, batch_);
        const FrameIndex dev = carve_frame_index(ws.index, seq_len_, batch_);
        const int64_t valid = host_.offset[seq_len_], out_width = config_.output_size();
        if (weights) {
            // The layer-0 input and the ones vector are only partners of the weight gradients.
            b_.run(0,
                   kernels::cuda::GatherFrames<T>{args.x.data(), dev.frame, config_.input_size,
                                                  ws.x_c},
                   valid * config_.input_size);
            b_.run(0, kernels::cuda::Fill<T>{ws.ones, T(1)}, valid);
        }
        auto layer_input = [&](int64_t l) -> const T* {
            return l == 0 ? ws.x_c : rs.out + (l - 1) * frames_ * out_width;
        };
        if (!data) {
            fork();
            for (int64_t l = 0; l < config_.num_layers; ++l)
                for (int64_t d = 0; d < config_.num_directions(); ++d)
                    weight_grads_cell(args, l, d, ws, rs, layer_input(l));
            join();
            return;
        }
        // d(layer output) of the top layer is dy; each layer's d(input) feeds the one below.
        T* d_out = ws.ping;
        T* d_in = ws.pong;
        b_.run(0, kernels::cuda::GatherFrames<T>{args.dy.data(), dev.frame, out_width, d_out},
               valid * out_width);
        for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
            const int64_t in_width = config_.layer_input_size(l);
            T* want_d_in = (l > 0 || !args.dx.empty()) ? d_in : nullptr;
            fork();
            for (int64_t d = 0; d < config_.num_directions(); ++d)
                backward_cell(args, l, d, ws, rs, dev, layer_input(l), d_out, want_d_in, weights);
            join();
            if (style_ == LoopStyle::fused && want_d_in) {
                // d_in (S, in) = sum over directions of dgates (S, G) W_ih (G, in).
                for (int64_t d = 0; d < config_.num_directions(); ++d) {
                    const int64_t cell = l * config_.num_directions() + d;
                    const CellOffsets p = cell_offsets(config_, l, d);
                    b_.gemm(0, false, false, valid, in_width, gate_cols(), T(1),
                            rs.gates + cell * frames_ * gate_cols(), gate_cols(),
                            args.params.data() + p.weight_ih, in_width, d == 0 ? T(0) : T(1), d_in,
                            in_width);
                }
            }
            std::swap(d_out, d_in);
        }
        if (!args.dx.empty())
            b_.run(0,
                   kernels::cuda::UnpackFrames<T>{d_out, dev.pos, dev.active, dev.offset, batch_,
                                                  config_.input_size, args.dx.data()},
                   frames_ * config_.input_size);
    }

private:
    int64_t gate_cols() const { return 4 * config_.hidden_size; }
    int lane_of(int64_t direction) const {
        return style_ == LoopStyle::fused ? static_cast<int>(direction) : 0;
    }
    // The time index of the s-th step a direction processes.
    int64_t step_time(int64_t s, int64_t direction) const {
        return direction == 0 ? s : seq_len_ - 1 - s;
    }
    // Lane 1 joins after what lane 0 queued so far; lane 0 later waits for lane 1's work.
    void fork() const {
        for (int lane = 1; lane < lanes(); ++lane) b_.wait(lane, 0);
    }
    void join() const {
        for (int lane = 1; lane < lanes(); ++lane) b_.wait(0, lane);
    }

    // dst (N, width) sorted, on `lane` <- the rows of one cell's state in v (L*D, N, width)
    // original order (width Hs for h, H for c), `state` its first element; zeros when v is empty.
    // Overwrites.
    void gather_state(int lane, const TensorView<const T>& v, int64_t state, int64_t width,
                      const FrameIndex& dev, T* dst) const {
        b_.run(lane,
               kernels::cuda::GatherRows<T>{v.empty() ? nullptr : v.data() + state, dev.order,
                                            width, dst},
               batch_ * width);
    }

    // The cell's rows of v (L*D, N, width) original order, from `state` on <- src (N, width)
    // sorted, on `lane`; nothing when v is empty (an output not asked for). Overwrites.
    void scatter_state(int lane, const T* src, int64_t state, int64_t width, const FrameIndex& dev,
                       const TensorView<T>& v) const {
        if (v.empty()) return;
        b_.run(lane, kernels::cuda::ScatterRows<T>{src, dev.order, width, v.data() + state},
               batch_ * width);
    }

    // One direction of one layer: layer_in (S, in) compact -> this direction's columns of
    // layer_out (S, D*Hs) compact (overwritten), hn (Hs wide) / cn (H wide) of the cell, and
    // (training) the cell's reserve.
    void forward_cell(const ForwardArgs<T>& args, int64_t layer, int64_t direction,
                      const Workspace<T>& ws, const Reserve<T>& rs, const FrameIndex& dev,
                      const T* layer_in, T* layer_out) const {
        namespace k = kernels::cuda;
        const int lane = lane_of(direction);
        const int64_t hidden = config_.hidden_size, g_cols = gate_cols();
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer), out_width = config_.output_size();
        const int64_t cell = layer * config_.num_directions() + direction;
        const int64_t h_state = cell * batch_ * hs, c_state = cell * batch_ * hidden;
        const CellOffsets p = cell_offsets(config_, layer, direction);
        const T* params = args.params.data();
        const bool training = args.reserve != nullptr;
        T* h = ws.h[direction];
        T* c = ws.c[direction];
        gather_state(lane, args.h0, h_state, hs, dev, h);
        gather_state(lane, args.c0, c_state, hidden, dev, c);
        T* gates_all = training ? rs.gates + cell * frames_ * g_cols : ws.gates[direction];
        T* cell_all = training ? rs.cell + cell * frames_ * hidden : nullptr;
        T* h_prev_all = training ? rs.h_prev + cell * frames_ * hs : nullptr;
        T* h_raw_all = training && proj > 0 ? rs.h_raw + cell * frames_ * hidden : nullptr;
        if (style_ == LoopStyle::fused)
            b_.gemm(lane, false, true, host_.offset[seq_len_], g_cols, in_width, T(1), layer_in,
                    in_width, params + p.weight_ih, in_width, T(0), gates_all, g_cols);
        for (int64_t s = 0; s < seq_len_; ++s) {
            const int64_t t = step_time(s, direction);
            const int64_t rows = host_.active[t];
            if (rows == 0) continue;
            const int64_t k0 = host_.offset[t];
            T* gates = gates_all + k0 * g_cols;
            T* c_out = cell_all ? cell_all + k0 * hidden : nullptr;
            T* h_prev_out = h_prev_all ? h_prev_all + k0 * hs : nullptr;
            T* out = layer_out + k0 * out_width + direction * hs;
            // Where o * tanh(c) goes: straight into the output and the running h, or, with a
            // projection, into h_raw, which the projection GEMM and CarryHidden then turn into
            // those.
            T* h_raw =
                proj > 0 ? (h_raw_all ? h_raw_all + k0 * hidden : ws.h_raw[direction]) : nullptr;
            T* cell_h_dst = proj > 0 ? h_raw : out;
            const int64_t cell_h_ld = proj > 0 ? hidden : out_width;
            T* cell_h_run = proj > 0 ? nullptr : h;
            T* cell_h_prev = proj > 0 ? nullptr : h_prev_out;
            if (style_ == LoopStyle::basic)
                b_.gemm(lane, false, true, rows, g_cols, in_width, T(1), layer_in + k0 * in_width,
                        in_width, params + p.weight_ih, in_width, T(0), gates, g_cols);
            b_.gemm(lane, false, true, rows, g_cols, hs, T(1), h, hs, params + p.weight_hh, hs,
                    T(1), gates, g_cols);
            if (style_ == LoopStyle::basic) {
                if (p.has_bias())
                    b_.run(lane,
                           k::AddBias<T>{gates, params + p.bias_ih, params + p.bias_hh, g_cols},
                           rows * g_cols);
                b_.run(lane, k::Activate<T>{gates, hidden}, rows * g_cols);
                b_.run(lane, k::UpdateCell<T>{gates, hidden, c, c_out}, rows * hidden);
                b_.run(lane,
                       k::UpdateHidden<T>{gates, hidden, c, cell_h_run, cell_h_prev, cell_h_dst,
                                          cell_h_ld},
                       rows * hidden);
            } else {
                b_.run(lane,
                       k::FusedForward<T>{gates, p.has_bias() ? params + p.bias_ih : nullptr,
                                          p.has_bias() ? params + p.bias_hh : nullptr, hidden, c,
                                          cell_h_run, c_out, cell_h_prev, cell_h_dst, cell_h_ld},
                       rows * hidden);
            }
            if (proj > 0) {
                // h_t (rows, P) = h_raw (rows, H) W_hr^T, into the output; then the running h.
                b_.gemm(lane, false, true, rows, proj, hidden, T(1), h_raw, hidden,
                        params + p.weight_hr, hidden, T(0), out, out_width);
                b_.run(lane, k::CarryHidden<T>{out, out_width, hs, h, h_prev_out}, rows * hs);
            }
        }
        scatter_state(lane, h, h_state, hs, dev, args.hn);
        scatter_state(lane, c, c_state, hidden, dev, args.cn);
    }

    // Backward of one direction of one layer: reads d_out (S, D*Hs) compact, leaves the cell's
    // dgates (and, with a projection, each frame's total dh) in the reserve, writes dh0 / dc0 of
    // the cell; `basic` also adds into d_in (S, in) per step (direction 0 overwrites, 1 adds)
    // and, when `weights`, the weight gradients per step; `fused` adds the weight gradients as
    // GEMMs over all steps after the loop.
    void backward_cell(const BackwardArgs<T>& args, int64_t layer, int64_t direction,
                       const Workspace<T>& ws, const Reserve<T>& rs, const FrameIndex& dev,
                       const T* layer_in, const T* d_out, T* d_in, bool weights) const {
        namespace k = kernels::cuda;
        const int lane = lane_of(direction);
        const int64_t hidden = config_.hidden_size, g_cols = gate_cols();
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer), out_width = config_.output_size();
        const int64_t cell = layer * config_.num_directions() + direction;
        const int64_t h_state = cell * batch_ * hs, c_state = cell * batch_ * hidden;
        const CellOffsets p = cell_offsets(config_, layer, direction);
        const T* params = args.params.data();
        T* dgates_all = rs.gates + cell * frames_ * g_cols;
        const T* cell_all = rs.cell + cell * frames_ * hidden;
        T* dh = ws.h[direction];
        T* dc = ws.c[direction];
        T* c_init = ws.c_init[direction];
        gather_state(lane, args.dhn, h_state, hs, dev, dh);
        gather_state(lane, args.dcn, c_state, hidden, dev, dc);
        gather_state(lane, args.c0, c_state, hidden, dev, c_init);
        for (int64_t s = seq_len_ - 1; s >= 0; --s) {
            const int64_t t = step_time(s, direction);
            const int64_t rows = host_.active[t];
            if (rows == 0) continue;
            const int64_t k0 = host_.offset[t];
            // The step before this one in forward order: where c_{t-1} comes from.
            const int64_t tp = s > 0 ? step_time(s - 1, direction) : 0;
            const int64_t rows_prev = s > 0 ? host_.active[tp] : 0;
            const T* c_prev_step = cell_all + host_.offset[tp] * hidden;
            T* g = dgates_all + k0 * g_cols;
            const T* c = cell_all + k0 * hidden;
            const T* d_out_step = d_out + k0 * out_width + direction * hs;
            // What the cell's backward reads as the gradient reaching o * tanh(c): the carry plus
            // the output's gradient, or, with a projection, (carry + output) W_hr, formed here.
            const T* cell_dh = dh;
            const T* cell_d_out = d_out_step;
            if (proj > 0) {
                T* dh_total = rs.dh + (cell * frames_ + k0) * proj;
                T* dh_raw = ws.h_raw[direction];
                b_.run(lane, k::SumOutputGrad<T>{dh, d_out_step, out_width, hs, dh_total},
                       rows * hs);
                b_.gemm(lane, false, false, rows, hidden, proj, T(1), dh_total, proj,
                        params + p.weight_hr, hidden, T(0), dh_raw, hidden);
                cell_dh = dh_raw;
                cell_d_out = nullptr;
            }
            if (style_ == LoopStyle::basic) {
                if (proj == 0)
                    b_.run(lane, k::AddOutputGrad<T>{dh, d_out_step, out_width, hidden},
                           rows * hidden);
                b_.run(lane, k::HiddenBackward<T>{g, c, cell_dh, dc, hidden}, rows * hidden);
                b_.run(lane, k::CellBackward<T>{g, c_prev_step, rows_prev, c_init, dc, hidden},
                       rows * hidden);
            } else {
                b_.run(lane,
                       k::FusedBackward<T>{g, c, c_prev_step, rows_prev, c_init, cell_dh,
                                           cell_d_out, out_width, dc, hidden},
                       rows * hidden);
            }
            // Gradient into h_{t-1} of the active rows; the others keep their carry.
            b_.gemm(lane, false, false, rows, hs, g_cols, T(1), g, g_cols, params + p.weight_hh, hs,
                    T(0), dh, hs);
            if (style_ == LoopStyle::basic) {
                if (weights)
                    step_weight_grads(args, layer, direction, k0, rows, ws, rs, layer_in, lane);
                if (d_in)
                    b_.gemm(lane, false, false, rows, in_width, g_cols, T(1), g, g_cols,
                            params + p.weight_ih, in_width, direction == 0 ? T(0) : T(1),
                            d_in + k0 * in_width, in_width);
            }
        }
        scatter_state(lane, dh, h_state, hs, dev, args.dh0);
        scatter_state(lane, dc, c_state, hidden, dev, args.dc0);
        if (style_ == LoopStyle::fused && weights)
            step_weight_grads(args, layer, direction, 0, host_.offset[seq_len_], ws, rs, layer_in,
                              lane);
    }

    // BackwardPart::weights for one cell: the weight GEMMs of backward_cell in its order.
    void weight_grads_cell(const BackwardArgs<T>& args, int64_t layer, int64_t direction,
                           const Workspace<T>& ws, const Reserve<T>& rs, const T* layer_in) const {
        const int lane = lane_of(direction);
        if (style_ == LoopStyle::fused) {
            step_weight_grads(args, layer, direction, 0, host_.offset[seq_len_], ws, rs, layer_in,
                              lane);
            return;
        }
        for (int64_t s = seq_len_ - 1; s >= 0; --s) {
            const int64_t t = step_time(s, direction);
            if (host_.active[t] == 0) continue;
            step_weight_grads(args, layer, direction, host_.offset[t], host_.active[t], ws, rs,
                              layer_in, lane);
        }
    }

    // Compact rows [k0, k0 + rows) of one cell: ADDS dgates^T h_{t-1} into dW_hh (4H, Hs),
    // dgates^T x into dW_ih (4H, in), with a projection dh^T h_raw into dW_hr (P, H), and the
    // column sums of dgates into both biases (dparams, PyTorch layout; dgates, h_{t-1}, dh and
    // h_raw are the reserve's, x is layer_in (S, in) compact). One step of `basic`, or all S
    // frames at once for `fused`.
    void step_weight_grads(const BackwardArgs<T>& args, int64_t layer, int64_t direction,
                           int64_t k0, int64_t rows, const Workspace<T>& ws, const Reserve<T>& rs,
                           const T* layer_in, int lane) const {
        const int64_t hidden = config_.hidden_size, g_cols = gate_cols();
        const int64_t hs = config_.state_size(), proj = config_.proj_size;
        const int64_t in_width = config_.layer_input_size(layer);
        const int64_t cell = layer * config_.num_directions() + direction;
        const int64_t frame = cell * frames_ + k0;
        const CellOffsets p = cell_offsets(config_, layer, direction);
        T* grads = args.dparams.data();
        const T* g = rs.gates + frame * g_cols;
        const T* h_prev = rs.h_prev + frame * hs;
        b_.gemm(lane, true, false, g_cols, hs, rows, T(1), g, g_cols, h_prev, hs, T(1),
                grads + p.weight_hh, hs);
        b_.gemm(lane, true, false, g_cols, in_width, rows, T(1), g, g_cols,
                layer_in + k0 * in_width, in_width, T(1), grads + p.weight_ih, in_width);
        if (proj > 0)
            b_.gemm(lane, true, false, proj, hidden, rows, T(1), rs.dh + frame * proj, proj,
                    rs.h_raw + frame * hidden, hidden, T(1), grads + p.weight_hr, hidden);
        if (!p.has_bias()) return;
        b_.gemm(lane, true, false, g_cols, 1, rows, T(1), g, g_cols, ws.ones, 1, T(1),
                grads + p.bias_ih, 1);
        b_.gemm(lane, true, false, g_cols, 1, rows, T(1), g, g_cols, ws.ones, 1, T(1),
                grads + p.bias_hh, 1);
    }

    LoopStyle style_;
    const Config& config_;
    int64_t seq_len_, batch_, frames_;
    FrameIndex host_;
    Backend& b_;
};

// ------------------------------------------------------------------------------------------------
// Entry points of the CUDA variants (cuda_common.cpp, lstm_cuda only): plan lookup, index upload,
// optional graph capture and replay, then the loop above with the CUDA backend. Arguments are
// validated by Variant::forward / backward; every tensor is device memory, lengths host.
// ------------------------------------------------------------------------------------------------

template <typename T>
void run_cuda_forward(LoopStyle style, const Config& config, const ForwardArgs<T>& args);
template <typename T>
void run_cuda_backward(LoopStyle style, const Config& config, const BackwardArgs<T>& args);

}  // namespace lstm::cuda
