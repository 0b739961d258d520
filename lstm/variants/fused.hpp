#pragma once

// `fused` (cpu): the fast CPU variant (TF's LSTMBlockFusedCell, PyTorch's fused LSTMCell). Per
// layer and direction: the input projection of every valid frame as one GEMM; per step one
// recurrent GEMM on weights packed once per call, followed by one fused element-wise pass (or,
// on the SIMD paths, the pass inside the GEMM's epilogue); backward mirrors it, and the weight
// gradients are GEMMs over all steps at once. Rows are sorted by length once per call and kept
// compact (kernels/cpu/fused_cell.hpp), so every GEMM covers exactly the valid frames.
//
// Threads: ONE OpenMP team for the whole call, of omp_get_max_threads() threads unless the
// machine lacks the cores for them: on the SIMD paths, whose bits do not depend on the team size,
// kernels/cpu/team.hpp shrinks the team while another process takes cores, since every barrier a
// descheduled thread misses costs a scheduler slice. Each thread owns a contiguous range of
// 16-unit blocks with all four gates of its units (gate columns are interleaved per block), so
// the element-wise work of a step needs only the thread's own GEMM output, and a step ends with
// one barrier (the next step reads every thread's h_t, or dgates in backward). GEMMs inside the
// team are single-threaded. Work split by rows (dx) and by steps (gather, scatter) uses the same
// team. A bidirectional layer on an even team of the SIMD paths runs its two directions side by
// side, each on half of the team (a kernels/cpu/crew.hpp crew with its own barrier and its own
// scratch, CellScratch), so the halves never wait for each other inside the layer; with 2
// threads each thread runs one whole direction without a single barrier.
//
// Instruction sets (float only; double always takes the portable path):
//  - avx512, avx2 and neon: kernels/cpu/fused_simd.hpp, register-blocked GEMMs with the gate
//    math in the epilogue, written once with Google Highway (in lstm_cpu) and held to one of its
//    targets: AVX3 (needs AVX-512 F, BW, DQ and VL), AVX2 (needs AVX2 with FMA) or, on 64-bit
//    ARM, NEON, whatever else the CPU has. The kernel set is built with that target's functions
//    per call, before the team starts, so an AVX-512 host on the avx2 path runs exactly what an
//    AVX2-only one (AMD Zen 3) runs.
//  - eigen: the portable path, Eigen GEMMs (kernels/cpu/gemm.hpp) plus the scalar passes of
//    kernels/cpu/fused_cell.hpp built on kernels/common/gates.hpp.
// These are the variant's paths (Variant::paths): a plan takes the one its request names, else
// default_fused_isa() picks it when the plan is made (LSTM_FUSED_ISA, else the widest SIMD path
// this CPU runs, else eigen). All write the same reserve layout, so a forward on one and a
// backward on another agree.
//
// Denormals: the team runs with flush-to-zero / denormals-are-zero (kernels/cpu/cpu_features.hpp,
// restored when the call returns), so values below the smallest normal float read and come out
// as zero. Without it a loss on the last step of a long sequence lets the backward gradients
// decay into denormals, and the microcode assists they cost made Braun's CE-long step ~5x slower.
//
// Split backward (BackwardPart): the time loop of a cell already leaves its dgates in the reserve
// (over the activated gates) and its bias gradient in a small reserve slot, and the weight
// gradients are GEMMs over those after the loop; `data` stops before the GEMMs, `weights` runs
// only them (re-gathering the layer-0 input and h0, which live in the workspace). `all` runs a
// cell's GEMMs right after its loop, so the three give the same bits.
//
// Projections (proj_size P > 0, LSTMP): h_t = W_hr (o_t * tanh(c_t)) has P < H features. The
// kernel sets run the cell as without one, their recurrent GEMM just reads P features instead of
// H (FusedLayout::recurrent), and write h before the projection ("h_raw", own units) where h
// would go; a barrier, then the projection h = h_raw W_hr^T, split across the team by columns of
// P, writes the layer output the next step reads. Backward adds one phase per step in front of
// the kernel's: the gradient reaching the projected h_t (dy plus dgates_{t+1} W_hh, P columns per
// thread), a barrier, then dh_raw = dh W_hr for the own units, which the kernel's pass takes as
// its carried dh. The reserve keeps h_raw and each step's dh, from which the weight gradients
// form dW_hr. Both extra products are plain loops summing every element in a fixed order, so the
// same-bits-for-any-team promise below holds with projections too. Without a projection none of
// this runs and the layout is the one above.
//
// Determinism: results are bit-identical run to run for a fixed thread count. On the avx512 and
// avx2 paths they are also identical for any thread count (every output element is summed in the
// same order whatever the split); the eigen path does not promise that (Eigen picks its blocking
// from the sizes each thread sees).

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/crew.hpp"
#include "kernels/cpu/environment.hpp"
#include "kernels/cpu/fused_cell.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "kernels/cpu/team.hpp"
#include "lstm/detail/batch_order.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/variant.hpp"

namespace lstm::cpu {

namespace fused_detail {

// The avx2 path needs the instructions (AVX2, FMA) and Highway's AVX2 target in lstm_cpu, whose
// check also covers the BMI2 and F16C that target is compiled with.
inline bool avx2_runs() {
    return kernels::cpu::cpu_has_avx2_fma() && kernels::cpu::simd_fused_runs_avx2();
}

// The avx512 path needs the instructions and one of Highway's AVX-512 targets in lstm_cpu.
inline bool avx512_runs() {
    return kernels::cpu::cpu_has_avx512() && kernels::cpu::simd_fused_avx512_target() != 0;
}

// The neon path needs Highway's NEON target in lstm_cpu (ARM builds) and a CPU that runs it, as
// every 64-bit ARM processor does.
inline bool neon_runs() {
    const int64_t neon = kernels::cpu::simd_fused_neon_target();
    return neon != 0 && (kernels::cpu::simd_fused_targets() & neon) != 0;
}

}  // namespace fused_detail

// The SIMD paths, widest first: automatic takes the first one this CPU runs, and the tests and
// `lstm_tool info` iterate them, so a path added here is chosen, tested and reported.
inline constexpr FusedIsa kSimdFusedIsas[] = {FusedIsa::avx512, FusedIsa::avx2, FusedIsa::neon};

inline const char* fused_isa_name(FusedIsa isa) {
    switch (isa) {
        case FusedIsa::automatic:
            return "automatic";
        case FusedIsa::avx512:
            return "avx512";
        case FusedIsa::avx2:
            return "avx2";
        case FusedIsa::neon:
            return "neon";
        case FusedIsa::eigen:
            return "eigen";
    }
    return "?";
}

// What the SIMD path `isa` needs of the CPU, as messages say it ("" for the others).
inline const char* fused_isa_needs(FusedIsa isa) {
    switch (isa) {
        case FusedIsa::avx512:
            return "AVX-512 (F, BW, DQ and VL)";
        case FusedIsa::avx2:
            return "AVX2 with FMA";
        case FusedIsa::neon:
            return "ARM NEON (a 64-bit ARM build and processor)";
        case FusedIsa::automatic:
        case FusedIsa::eigen:
            break;
    }
    return "";
}

// The Highway target (kernels/cpu/fused_simd.hpp) that runs the SIMD path `isa`; 0 for the
// others, or where this build has no such target.
inline int64_t fused_isa_target(FusedIsa isa) {
    switch (isa) {
        case FusedIsa::avx512:
            return kernels::cpu::simd_fused_avx512_target();
        case FusedIsa::avx2:
            return kernels::cpu::simd_fused_avx2_target();
        case FusedIsa::neon:
            return kernels::cpu::simd_fused_neon_target();
        case FusedIsa::automatic:
        case FusedIsa::eigen:
            break;
    }
    return 0;
}

// Whether this CPU (and build) can run the fused variant's float path `isa`; automatic and
// eigen always can.
inline bool fused_isa_available(FusedIsa isa) {
    switch (isa) {
        case FusedIsa::avx512:
            return fused_detail::avx512_runs();
        case FusedIsa::avx2:
            return fused_detail::avx2_runs();
        case FusedIsa::neon:
            return fused_detail::neon_runs();
        case FusedIsa::automatic:
        case FusedIsa::eigen:
            return true;
    }
    return false;
}

// The float path a fused plan takes when its request names none: LSTM_FUSED_ISA (auto, avx512,
// avx2, neon, eigen; read at each plan request), else the first SIMD path of kSimdFusedIsas this
// CPU runs, else eigen. Throws lstm::Unsupported for a path the environment names and this CPU
// (or build) cannot run.
inline FusedIsa default_fused_isa() {
    const FusedIsa isa = kernels::cpu::fused_isa_from_environment();
    if (!fused_isa_available(isa))
        fail_as<Unsupported>("LSTM_FUSED_ISA = ", fused_isa_name(isa),
                             ", but this CPU (or build) has no ", fused_isa_needs(isa),
                             kernels::cpu::isa_cap_note());
    if (isa != FusedIsa::automatic) return isa;
    for (FusedIsa simd : kSimdFusedIsas)
        if (fused_isa_available(simd)) return simd;
    return FusedIsa::eigen;
}

// The float path named `path` (a name of fused_isa_name; "automatic" is not a path).
inline FusedIsa fused_isa_named(const std::string& path) {
    for (FusedIsa isa : kSimdFusedIsas)
        if (path == fused_isa_name(isa)) return isa;
    check(path == fused_isa_name(FusedIsa::eigen), "fused has no path '", path, "'");
    return FusedIsa::eigen;
}

namespace fused_detail {

using kernels::cpu::BlockRange;
using kernels::cpu::FusedBuffers;
using kernels::cpu::FusedBufferSizes;
using kernels::cpu::FusedLayout;
using kernels::cpu::kUnitBlock;
using kernels::cpu::RowRun;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The Highway kernel set held to the target of the SIMD path `isa` (fused_isa_target), on any
// CPU that runs it; FusedLoop takes a kernel set constructed from the layout and buffers.
template <FusedIsa isa>
class HeldSimdKernels : public kernels::cpu::SimdFusedKernels {
public:
    HeldSimdKernels(const FusedLayout& lay, const FusedBuffers<float>& buf)
        : SimdFusedKernels(lay, buf, fused_isa_target(isa)) {}
};

// Row stride of the sorted layer-0 input: padded to whole vectors, so AVX-512 loads of a row
// never straddle into the next one and every row starts aligned.
inline int64_t x_stride(const Config& config) { return round_up(config.input_size, kUnitBlock); }

// Widest layer input.
inline int64_t max_input(const Config& config) {
    return config.num_layers > 1 ? std::max(config.input_size, config.output_size())
                                 : config.input_size;
}

// Scratch of one cell (layer and direction) in flight. A bidirectional layer whose directions
// run side by side (FusedLoop::side_by_side) has one per direction.
template <typename T>
struct CellScratch {
    RowRun<T>* runs;     // (2T + 2) partners of h_{t-1} in the recurrent weight gradient
    int64_t* run_count;  // (1) how many of runs make_h_runs filled
    T* gates;            // (N, G) inference: one step's gates (training keeps all in the reserve)
    T* h_init;           // (N, Hp) this cell's h0, sorted, zero-padded
    T* c_init;           // (N, Hp) this cell's c0
    T* c_run;            // (N, Hp) inference: running c_t
    T* dc_run;           // (N, Hp) backward: gradient carried into c
    T* dhn;              // (N, Hp) backward: dhn of this cell, sorted
    T* dh0;              // (N, Hp) backward: gradient w.r.t. h0, sorted
    T* step_bias;        // (G) backward: one step's bias gradient (kernels::cpu::BiasGradSums)
    T* block_bias;       // (G) backward: the running block of step sums
    FusedBuffers<T> kern;
    // Projections only (null without); h_init, dhn and dh0 above then hold P < Hp columns.
    T* h_raw;      // (N, Hp) inference: one step's h before the projection; backward: one step's
                   // gradient reaching it
    T* wr_t;       // (H, P) W_hr transposed, for the forward projection
    T* w_hh_rows;  // (G, P) W_hh rows in interleaved gate order, for dh = dgates W_hh
    T* zeros;      // (Hp) a zero row: the kernel's dy, as dy enters through dh with a projection
};

// Scratch of one call. Rows are compact and length-sorted (kernels/cpu/fused_cell.hpp).
template <typename T>
struct Workspace {
    detail::BatchOrder batch;
    int64_t* offsets;  // (T + 1) compact row of step t's first row; offsets[T] = S
    int64_t* lengths;  // (N) length of sorted row r
    T* x_sorted;       // (S, x_stride) the layer-0 input
    T* ping;           // (S, W) W = max(x_stride, D*sw): inference layer output / backward d_out
    T* pong;           // (S, W) the other half of the pair
    // Direction d's scratch when the directions run side by side; cells[1] is cells[0] for a
    // unidirectional model.
    CellScratch<T> cells[2];
};

// What a training forward leaves for backward, rows compact and sorted.
template <typename T>
struct Reserve {
    T* out;    // (L, S, D*sw) every layer's output (sw = config.state_size())
    T* gates;  // (L*D, S, G) activated gates, interleaved; backward overwrites them with dgates
    T* cell;   // (L*D, S, Hp) c_t
    T* dbias;  // (L*D, G) backward: each cell's bias gradient, from the data part to the weights
               // part (the forward leaves it alone)
    // Projections only (null without).
    T* h_raw;  // (L*D, S, Hp) h_t before the projection, units < H
    T* dh;     // (L*D, S, P) backward: the gradient reaching each projected h_t, from the data part
               // to the weights part (dW_hr)
};

template <typename T>
CellScratch<T> carve_cell_scratch(detail::Carver& carve, const Config& config, int64_t seq_len,
                                  int64_t batch) {
    const FusedLayout lay(config.hidden_size, config.state_size());
    const int64_t hp = lay.hidden_padded;
    CellScratch<T> c{};
    c.runs = carve.take<RowRun<T>>(2 * seq_len + 2);
    c.run_count = carve.take<int64_t>(1);
    c.gates = carve.take<T>(batch * lay.gate_cols);
    for (T** state : {&c.h_init, &c.c_init, &c.c_run, &c.dc_run, &c.dhn, &c.dh0})
        *state = carve.take<T>(batch * hp);
    c.step_bias = carve.take<T>(lay.gate_cols);
    c.block_bias = carve.take<T>(lay.gate_cols);
    const FusedBufferSizes sizes(lay, max_input(config), batch);
    c.kern.w_ih_fwd = carve.take<T>(sizes.w_ih_fwd);
    c.kern.w_hh_fwd = carve.take<T>(sizes.w_hh_fwd);
    c.kern.bias = carve.take<T>(sizes.bias);
    c.kern.w_hh_bwd = carve.take<T>(sizes.w_hh_bwd);
    c.kern.w_ih_bwd = carve.take<T>(sizes.w_ih_bwd);
    c.kern.dh = carve.take<T>(sizes.dh);
    c.kern.dw = carve.take<T>(sizes.dw);
    c.kern.a_pack = carve.take<T>(sizes.a_pack);
    c.kern.b_pack = carve.take<T>(sizes.b_pack);
    if (config.proj_size > 0) {
        c.h_raw = carve.take<T>(batch * hp);
        c.wr_t = carve.take<T>(config.hidden_size * config.proj_size);
        c.w_hh_rows = carve.take<T>(lay.gate_cols * config.proj_size);
        c.zeros = carve.take<T>(hp);
    }
    return c;
}

template <typename T>
Workspace<T> carve_workspace(detail::Carver& carve, const Config& config, int64_t seq_len,
                             int64_t batch) {
    const int64_t rows = seq_len * batch;
    const int64_t width = std::max(x_stride(config), config.output_size());
    Workspace<T> w{};
    w.batch.order = carve.take<int64_t>(batch);
    w.batch.active = carve.take<int64_t>(seq_len);
    w.offsets = carve.take<int64_t>(seq_len + 1);
    w.lengths = carve.take<int64_t>(batch);
    w.x_sorted = carve.take<T>(rows * x_stride(config));
    w.ping = carve.take<T>(rows * width);
    w.pong = carve.take<T>(rows * width);
    w.cells[0] = carve_cell_scratch<T>(carve, config, seq_len, batch);
    w.cells[1] = config.num_directions() == 2 ? carve_cell_scratch<T>(carve, config, seq_len, batch)
                                              : w.cells[0];
    return w;
}

template <typename T>
Reserve<T> carve_reserve(detail::Carver& carve, const Config& config, int64_t seq_len,
                         int64_t batch) {
    const FusedLayout lay(config.hidden_size, config.state_size());
    const int64_t rows = seq_len * batch;
    Reserve<T> r{};
    r.out = carve.take<T>(config.num_layers * rows * config.output_size());
    r.gates = carve.take<T>(config.num_cells() * rows * lay.gate_cols);
    r.cell = carve.take<T>(config.num_cells() * rows * lay.hidden_padded);
    r.dbias = carve.take<T>(config.num_cells() * lay.gate_cols);
    if (config.proj_size > 0) {
        r.h_raw = carve.take<T>(config.num_cells() * rows * lay.hidden_padded);
        r.dh = carve.take<T>(config.num_cells() * rows * config.proj_size);
    }
    return r;
}

// The time index of the s-th step a direction processes.
inline int64_t step_time(int64_t s, int64_t seq_len, int64_t direction) {
    return direction == 0 ? s : seq_len - 1 - s;
}

// Compact offsets and per-row lengths from the batch order.
inline void make_offsets(const detail::BatchOrder& batch, int64_t seq_len, int64_t n,
                         int64_t* offsets, int64_t* lengths) {
    offsets[0] = 0;
    for (int64_t t = 0; t < seq_len; ++t) offsets[t + 1] = offsets[t] + batch.active[t];
    for (int64_t r = 0; r < n; ++r) lengths[r] = 0;
    for (int64_t t = 0; t < seq_len; ++t)
        for (int64_t r = 0; r < batch.active[t]; ++r) ++lengths[r];
}

// The calling thread's share of [0, count): used for work split by steps or rows.
inline BlockRange my_share(int64_t count) {
    return kernels::cpu::row_range(count, omp_get_thread_num(), omp_get_num_threads());
}

// One call's time loops for kernel set K (PortableFusedKernels or a SimdFusedKernels held to one
// target), constructed once per call on the calling thread.
template <typename T, typename K>
class FusedLoop {
public:
    FusedLoop(const Config& config, int64_t seq_len, int64_t batch)
        : config_(config),
          lay_(config.hidden_size, config.state_size()),
          seq_len_(seq_len),
          batch_(batch) {}

    void forward(const ForwardArgs<T>& args) const {
        detail::Carver ws_carve = detail::carver_from_boundary(args.workspace);
        const Workspace<T> ws = carve_workspace<T>(ws_carve, config_, seq_len_, batch_);
        const bool training = args.reserve != nullptr;
        Reserve<T> rs{};
        if (training) {
            detail::Carver rs_carve = detail::carver_from_boundary(args.reserve);
            rs = carve_reserve<T>(rs_carve, config_, seq_len_, batch_);
        }
        detail::make_batch_order(args.lengths, seq_len_, batch_, ws.batch);
        make_offsets(ws.batch, seq_len_, batch_, ws.offsets, ws.lengths);
        const K kerns[2] = {K(lay_, ws.cells[0].kern), K(lay_, ws.cells[1].kern)};
        kernels::cpu::run_governed_team(governor(), [&] {
            const kernels::cpu::ScopedFlushDenormals flush;
            forward_team(args, ws, rs, training, kerns);
        });
    }

    void backward(const BackwardArgs<T>& args) const {
        detail::Carver ws_carve = detail::carver_from_boundary(args.workspace);
        const Workspace<T> ws = carve_workspace<T>(ws_carve, config_, seq_len_, batch_);
        detail::Carver rs_carve = detail::carver_from_boundary(args.reserve);
        const Reserve<T> rs = carve_reserve<T>(rs_carve, config_, seq_len_, batch_);
        detail::make_batch_order(args.lengths, seq_len_, batch_, ws.batch);
        make_offsets(ws.batch, seq_len_, batch_, ws.offsets, ws.lengths);
        const K kerns[2] = {K(lay_, ws.cells[0].kern), K(lay_, ws.cells[1].kern)};
        kernels::cpu::run_governed_team(governor(), [&] {
            const kernels::cpu::ScopedFlushDenormals flush;
            backward_team(args, ws, rs, kerns);
        });
    }

private:
    // Whether the kernel set gives the same bits however its work is split among threads: the
    // SIMD ones do; the eigen path's GEMMs block by the sizes each thread sees.
    static constexpr bool kSameBitsAnySplit =
        !std::is_same_v<K, kernels::cpu::PortableFusedKernels<T>>;

    // The SIMD kernel sets' team may shrink under load; the eigen path keeps the team it is
    // given, or its bits would follow the machine's load.
    static kernels::cpu::TeamGovernor* governor() {
        return kSameBitsAnySplit ? &kernels::cpu::time_loop_governor() : nullptr;
    }

    int64_t rows_total(const Workspace<T>& ws) const { return ws.offsets[seq_len_]; }

    // Whether the two directions of a bidirectional layer run side by side, each on half of a
    // team of `threads`: their time loops are independent, so each half meets only itself at
    // the per-step barriers (2 threads: none at all), and each thread keeps all of one
    // direction's weights instead of half of both. Halves of an odd team would differ in size
    // and the larger would wait for the smaller, so odd teams run the directions one after the
    // other on the whole team, as unidirectional layers do. Only for kernel sets whose bits do
    // not depend on the split: a split backward (data, then weights on the whole team) must
    // give the bits of one call.
    bool side_by_side(int threads) const {
        return kSameBitsAnySplit && config_.num_directions() == 2 && threads >= 2 &&
               threads % 2 == 0;
    }

    // The crew that runs direction d of a layer, for the calling thread of a side_by_side team:
    // the first half of the team runs direction 0, the second direction 1.
    kernels::cpu::Crew direction_crew(int64_t d) const {
        const int half = omp_get_num_threads() / 2;
        return kernels::cpu::Crew{omp_get_thread_num() - static_cast<int>(d) * half, half,
                                  &crew_barriers_[d]};
    }

    // The direction the calling thread of a side_by_side team runs.
    static int64_t my_direction() {
        return omp_get_thread_num() < omp_get_num_threads() / 2 ? 0 : 1;
    }

    // The columns of h-shaped states (h0, hn, dhn, dh0; the projection's outputs) a crew member
    // handles: its own units, or with a projection its share of the P columns.
    BlockRange state_columns(const kernels::cpu::Crew& crew, BlockRange own) const {
        if (config_.proj_size > 0) return crew.share(config_.proj_size);
        return BlockRange{own.begin * kUnitBlock, own.end * kUnitBlock};
    }

    // A layer's input (rows ld_in apart) and output (rows config.output_size() apart), host.
    struct LayerIo {
        const T* in;
        int64_t ld_in;
        T* out;
    };

    // Everything a forward does, run by every thread of the team.
    void forward_team(const ForwardArgs<T>& args, const Workspace<T>& ws, const Reserve<T>& rs,
                      bool training, const K (&kerns)[2]) const {
        const int64_t out_width = config_.output_size(), rows = rows_total(ws);
        const BlockRange steps = my_share(seq_len_);
        kernels::cpu::gather_compact(args.x.data(), batch_, config_.input_size, ws.batch.order,
                                     ws.batch.active, ws.offsets, steps.begin, steps.end,
                                     ws.x_sorted, x_stride(config_));
#pragma omp barrier
        const bool sides = side_by_side(omp_get_num_threads());
        LayerIo io{ws.x_sorted, x_stride(config_), nullptr};
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            io.out = training ? rs.out + l * rows * out_width : (l % 2 == 0 ? ws.ping : ws.pong);
            if (sides) {
                const int64_t d = my_direction();
                forward_cell(args, ws, rs, training, ws.cells[d], kerns[d], l, d, io,
                             direction_crew(d));
                // The next layer reads both directions' output.
#pragma omp barrier
            } else {
                for (int64_t d = 0; d < config_.num_directions(); ++d)
                    forward_cell(args, ws, rs, training, ws.cells[0], kerns[0], l, d, io,
                                 kernels::cpu::Crew::whole_team());
            }
            io.in = io.out;
            io.ld_in = out_width;
        }
        kernels::cpu::scatter_compact(io.out, out_width, batch_, out_width, ws.batch.order,
                                      ws.batch.active, ws.offsets, steps.begin, steps.end,
                                      args.y.data());
    }

    // Direction d of layer l, run by every member of `crew` with cs as its scratch: packs the
    // weights, projects the inputs (training), runs the time loop and writes hn / cn.
    void forward_cell(const ForwardArgs<T>& args, const Workspace<T>& ws, const Reserve<T>& rs,
                      bool training, const CellScratch<T>& cs, const K& kern, int64_t l, int64_t d,
                      const LayerIo& io, const kernels::cpu::Crew& crew) const {
        const BlockRange own = crew.blocks(lay_.blocks);
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t rows = rows_total(ws), proj = config_.proj_size, sw = config_.state_size();
        const BlockRange hcols = state_columns(crew, own);
        const int64_t in = config_.layer_input_size(l);
        const int64_t cell = l * config_.num_directions() + d;
        const CellOffsets p = cell_offsets(config_, l, d);
        const T* params = args.params.data();
        kern.pack_forward(params + p.weight_ih, in, params + p.weight_hh,
                          p.has_bias() ? params + p.bias_ih : nullptr,
                          p.has_bias() ? params + p.bias_hh : nullptr, own);
        // Each thread packs the columns of W_hr^T it projects into, so no barrier.
        if (proj > 0) pack_projection(params + p.weight_hr, cs.wr_t, hcols);
        // Training projects every frame at once into the reserve; inference projects one step at
        // a time into an (N, G) buffer instead of holding (S, G) of scratch. Each row's sums are
        // the same either way, so both give the same bits.
        T* gates = training ? rs.gates + cell * seq_len_ * batch_ * gc : nullptr;
        if (training)
            kern.input_projection(io.in, io.ld_in, rows, in, gates, own,
                                  kernels::cpu::ProjectionTarget::whole_sequence);
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const int64_t state = cell * batch_ * hidden, h_state = cell * batch_ * sw;
        kernels::cpu::gather_state_units(args.h0.empty() ? nullptr : args.h0.data() + h_state,
                                         batch_, sw, ws.batch.order, hcols.begin, hcols.end,
                                         cs.h_init, hp);
        kernels::cpu::gather_state_units(args.c0.empty() ? nullptr : args.c0.data() + state, batch_,
                                         hidden, ws.batch.order, u0, u1, cs.c_init, hp);
        T* cells = training ? rs.cell + cell * seq_len_ * batch_ * hp : nullptr;
        // Where the kernel writes h before the projection (null: it writes h itself).
        T* h_raw = proj == 0  ? nullptr
                   : training ? rs.h_raw + cell * seq_len_ * batch_ * hp
                              : cs.h_raw;
        if (!training)
            for (int64_t r = 0; r < batch_; ++r)
                std::copy(cs.c_init + r * hp + u0, cs.c_init + r * hp + u1, cs.c_run + r * hp + u0);
        crew.sync();
        for (int64_t s = 0; s < seq_len_; ++s) {
            const int64_t t = step_time(s, seq_len_, d);
            T* step_gates = gates ? gates + ws.offsets[t] * gc : cs.gates;
            if (!gates)
                kern.input_projection(io.in + ws.offsets[t] * io.ld_in, io.ld_in,
                                      ws.batch.active[t], in, step_gates, own,
                                      kernels::cpu::ProjectionTarget::per_step);
            T* step_h_raw = h_raw && training ? h_raw + ws.offsets[t] * hp : h_raw;
            forward_step(ws, cs, d, s, step_gates, cells, step_h_raw, io.out, kern, own);
            if (proj > 0) {
                // The projection reads every unit of h_raw.
                crew.sync();
                project_step(ws, cs, d, t, step_h_raw, io.out, hcols);
            }
            crew.sync();
        }
        write_final_state(args, ws, cs, d, cell, cells, io.out, u0, u1, hcols);
    }

    // Step s of direction d, gates (active rows, G) holding its input projection: rows that
    // continue read the previous step's h and c, rows that start here (only the reverse
    // direction starts sequences late) read the initial state. h_raw (active rows, Hp), host,
    // non-null with a projection: the kernel overwrites it with h before the projection (own
    // units) instead of writing the layer output.
    void forward_step(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d, int64_t s,
                      T* gates, T* cells, T* h_raw, T* layer_out, const K& kern,
                      BlockRange own) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t out_width = config_.output_size(), dir_col = d * config_.state_size();
        const int64_t t = step_time(s, seq_len_, d), n = ws.batch.active[t];
        const int64_t t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
        const int64_t n_prev = s > 0 ? ws.batch.active[t_prev] : 0;
        const int64_t split = std::min(n, n_prev);
        const int64_t row = ws.offsets[t], row_prev = ws.offsets[t_prev];
        T* c_now = cells ? cells + row * hp : cs.c_run;
        kernels::cpu::ForwardSegment<T> seg{};
        seg.gates = gates;
        seg.c = c_now;
        seg.ld_c = hp;
        seg.h = h_raw ? h_raw : layer_out + row * out_width + dir_col;
        seg.ld_h = h_raw ? hp : out_width;
        if (split > 0) {
            seg.rows = split;
            seg.h_prev = layer_out + row_prev * out_width + dir_col;
            seg.ld_h_prev = out_width;
            seg.c_prev = cells ? cells + row_prev * hp : cs.c_run;
            seg.ld_c_prev = hp;
            kern.forward_step(seg, own);
        }
        if (n > split) {
            seg.rows = n - split;
            seg.h_prev = cs.h_init + split * hp;
            seg.ld_h_prev = hp;
            seg.c_prev = (cells ? cs.c_init : cs.c_run) + split * hp;
            seg.ld_c_prev = hp;
            seg.gates = gates + split * gc;
            seg.c = c_now + split * hp;
            seg.h = h_raw ? h_raw + split * hp : layer_out + (row + split) * out_width + dir_col;
            kern.forward_step(seg, own);
        }
    }

    // hn (columns hcols of its sw = config.state_size() features) / cn (own units [u0, u1) of H)
    // of one cell: each row's state at its last processed step, into the caller's (L*D, N, sw) /
    // (L*D, N, H) host tensors, overwritten.
    void write_final_state(const ForwardArgs<T>& args, const Workspace<T>& ws,
                           const CellScratch<T>& cs, int64_t d, int64_t cell, const T* cells,
                           const T* layer_out, int64_t u0, int64_t u1, BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, sw = config_.state_size();
        const int64_t out_width = config_.output_size(), end = std::min(u1, hidden);
        const int64_t h_end = std::min(hcols.end, sw);
        for (int64_t r = 0; r < batch_; ++r) {
            const int64_t t_last = d == 0 ? ws.lengths[r] - 1 : 0;
            const int64_t row = ws.offsets[t_last] + r;
            if (!args.hn.empty()) {
                const int64_t dst = (cell * batch_ + ws.batch.order[r]) * sw;
                const T* h = layer_out + row * out_width + d * sw;
                for (int64_t u = hcols.begin; u < h_end; ++u) args.hn[dst + u] = h[u];
            }
            if (!args.cn.empty()) {
                const int64_t dst = (cell * batch_ + ws.batch.order[r]) * hidden;
                const T* c = cells ? cells + row * hp : cs.c_run + r * hp;
                for (int64_t u = u0; u < end; ++u) args.cn[dst + u] = c[u];
            }
        }
    }

    // wr_t (H, P) host, columns hcols overwritten <- W_hr (P, H) row-major, transposed, so the
    // projection's inner loop runs along contiguous output columns.
    void pack_projection(const T* w_hr, T* wr_t, BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, proj = config_.proj_size;
        for (int64_t u = 0; u < hidden; ++u)
            for (int64_t q = hcols.begin; q < hcols.end; ++q)
                wr_t[u * proj + q] = w_hr[q * hidden + u];
    }

    // The projection of step t of direction d: layer_out rows of the step, columns d P + hcols,
    // overwritten <- h_raw (active rows, Hp; units < H) W_hr^T, with wr_t packed. Every element
    // sums over units in order, whatever the split of columns, so the bits do not depend on the
    // team size.
    void project_step(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d, int64_t t,
                      const T* h_raw, T* layer_out, BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, proj = config_.proj_size;
        const int64_t out_width = config_.output_size(), n = ws.batch.active[t];
        if (hcols.count() == 0) return;
        for (int64_t r = 0; r < n; ++r) {
            T* out = layer_out + (ws.offsets[t] + r) * out_width + d * proj;
            const T* in = h_raw + r * hp;
            std::fill(out + hcols.begin, out + hcols.end, T(0));
            for (int64_t u = 0; u < hidden; ++u) {
                const T a = in[u];
                const T* w = cs.wr_t + u * proj;
                for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += a * w[q];
            }
        }
    }

    // Everything a backward does, run by every thread of the team. The data part walks the
    // layers top-down (each layer's d(input) feeds the one below) and leaves every cell's dgates
    // and bias gradient in the reserve; the weights part reads them (weights_team). `all` runs a
    // cell's weight GEMMs right after its time loop, while its dgates are the freshest data.
    void backward_team(const BackwardArgs<T>& args, const Workspace<T>& ws, const Reserve<T>& rs,
                       const K (&kerns)[2]) const {
        const bool data = args.part != BackwardPart::weights;
        const bool weights = args.part != BackwardPart::data;
        const int64_t out_width = config_.output_size(), rows = rows_total(ws);
        const BlockRange steps = my_share(seq_len_);
        // The layer-0 input is only a partner of the input-weight gradient.
        if (weights)
            kernels::cpu::gather_compact(args.x.data(), batch_, config_.input_size, ws.batch.order,
                                         ws.batch.active, ws.offsets, steps.begin, steps.end,
                                         ws.x_sorted, x_stride(config_));
        if (!data) {
            weights_team(args, ws, rs, kerns[0]);
            return;
        }
        // d(layer output) of the top layer is dy; each layer's d(input) feeds the one below.
        T* d_out = ws.ping;
        T* d_in = ws.pong;
        kernels::cpu::gather_compact(args.dy.data(), batch_, out_width, ws.batch.order,
                                     ws.batch.active, ws.offsets, steps.begin, steps.end, d_out,
                                     out_width);
        // Every cell reads rows of dy and x that other threads gathered, and a crew's own barrier
        // does not wait for the rest of the team.
#pragma omp barrier
        const bool sides = side_by_side(omp_get_num_threads());
        for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
            const int64_t in = config_.layer_input_size(l);
            const bool want_d_in = l > 0 || !args.dx.empty();
            // d(input) sums the directions in order, direction 0's product first, each thread
            // over the same rows whichever way the directions ran: the same bits either way.
            auto input_grads = [&](int64_t d) {
                if (!want_d_in) return;
                const int64_t cell = l * config_.num_directions() + d;
                const T* dgates = rs.gates + cell * seq_len_ * batch_ * lay_.gate_cols;
                kerns[sides ? d : 0].input_grads(dgates, my_share(rows), in, d_in, in, d > 0);
            };
            if (sides) {
                const int64_t d = my_direction();
                backward_cell(args, ws, rs, ws.cells[d], kerns[d], l, d, d_out, direction_crew(d));
                // d(input) reads every column of both directions' dgates and packed W_ih.
#pragma omp barrier
                input_grads(0);
                input_grads(1);
            } else {
                for (int64_t d = 0; d < config_.num_directions(); ++d) {
                    backward_cell(args, ws, rs, ws.cells[0], kerns[0], l, d, d_out,
                                  kernels::cpu::Crew::whole_team());
                    input_grads(d);
                }
            }
#pragma omp barrier
            std::swap(d_out, d_in);
        }
        if (!args.dx.empty())
            kernels::cpu::scatter_compact(d_out, config_.input_size, batch_, config_.input_size,
                                          ws.batch.order, ws.batch.active, ws.offsets, steps.begin,
                                          steps.end, args.dx.data());
    }

    // Direction d of layer l, backward, run by every member of `crew` with cs as its scratch:
    // packs the weights, runs the time loop over d_out ((S, D*sw) compact, host), then (unless
    // only the data part runs) the cell's weight gradients, and writes dh0 / dc0. Leaves the
    // cell's dgates in the reserve and its packed W_ih in cs.kern for input_grads.
    void backward_cell(const BackwardArgs<T>& args, const Workspace<T>& ws, const Reserve<T>& rs,
                       const CellScratch<T>& cs, const K& kern, int64_t l, int64_t d,
                       const T* d_out, const kernels::cpu::Crew& crew) const {
        const bool weights = args.part != BackwardPart::data;
        const BlockRange own = crew.blocks(lay_.blocks);
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t out_width = config_.output_size(), rows = rows_total(ws);
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const int64_t proj = config_.proj_size, sw = config_.state_size();
        const BlockRange hcols = state_columns(crew, own);
        const int64_t in = config_.layer_input_size(l);
        const T* layer_out = rs.out + l * rows * out_width;
        const int64_t cell = l * config_.num_directions() + d;
        const int64_t state = cell * batch_ * hidden, h_state = cell * batch_ * sw;
        const CellOffsets p = cell_offsets(config_, l, d);
        const T* params = args.params.data();
        T* gates = rs.gates + cell * seq_len_ * batch_ * gc;
        const T* cells = rs.cell + cell * seq_len_ * batch_ * hp;
        kernels::cpu::BiasGradSums<T> bias{cs.step_bias, cs.block_bias, rs.dbias + cell * gc,
                                           u0 * 4, u1 * 4};
        // Other members may still read the packed weights or the states of the crew's previous
        // cell (dx, weight gradients): wait before overwriting them.
        crew.sync();
        // With a projection the kernel set gets no W_hh: dh = dgates W_hh is P wide and formed by
        // projected_grad, from rows every member reads after the barrier below.
        kern.pack_backward(params + p.weight_ih, in, proj > 0 ? nullptr : params + p.weight_hh,
                           own);
        if (proj > 0) {
            kernels::cpu::pack_rows_interleaved(params + p.weight_hh, proj, lay_, own, cs.w_hh_rows,
                                                proj);
            std::fill(cs.zeros + u0, cs.zeros + u1, T(0));
        }
        auto gather = [&](const TensorView<const T>& v, T* dst) {
            kernels::cpu::gather_state_units(v.empty() ? nullptr : v.data() + state, batch_, hidden,
                                             ws.batch.order, u0, u1, dst, hp);
        };
        // h-shaped states: sw features, split by hcols.
        auto gather_h = [&](const TensorView<const T>& v, T* dst) {
            kernels::cpu::gather_state_units(v.empty() ? nullptr : v.data() + h_state, batch_, sw,
                                             ws.batch.order, hcols.begin, hcols.end, dst, hp);
        };
        gather(args.c0, cs.c_init);
        gather_h(args.dhn, cs.dhn);
        gather(args.dcn, cs.dc_run);
        bias.start();
        if (weights) {
            gather_h(args.h0, cs.h_init);
            if (crew.leads()) make_h_runs(ws, cs, d, layer_out);
        }
        crew.sync();
        if (proj == 0) {
            for (int64_t s = seq_len_ - 1; s >= -1; --s) {
                bias.begin_step();
                backward_step(ws, cs, d, s, gates, cells, cs.step_bias, d_out, kern, own);
                bias.end_step();
                crew.sync();
            }
        } else {
            T* dh = rs.dh + cell * seq_len_ * batch_ * proj;
            for (int64_t s = seq_len_ - 1; s >= -1; --s) {
                projected_grad(ws, cs, d, s, gates, dh, d_out, hcols);
                // The gate pass reads every column of this step's dh.
                crew.sync();
                bias.begin_step();
                backward_step_proj(ws, cs, d, s, gates, cells, cs.step_bias, dh,
                                   params + p.weight_hr, kern, own);
                bias.end_step();
                crew.sync();
            }
        }
        bias.flush();
        if (weights) cell_weight_grads(args, ws, cs, rs, l, d, kern, own, hcols);
        write_state_grads(args, ws, cs, state, h_state, u0, u1, hcols);
    }

    // BackwardPart::weights: every cell's weight and bias gradients from what the data part left
    // in the reserve, on the whole team, one cell after another. The workspace did not survive
    // the data call, so the layer-0 input (the caller gathers it) and each cell's h0 are gathered
    // again; everything else is in the reserve.
    void weights_team(const BackwardArgs<T>& args, const Workspace<T>& ws, const Reserve<T>& rs,
                      const K& kern) const {
        const kernels::cpu::Crew team = kernels::cpu::Crew::whole_team();
        const BlockRange own = team.blocks(lay_.blocks);
        const int64_t hp = lay_.hidden_padded, sw = config_.state_size();
        const BlockRange hcols = state_columns(team, own);
        const int64_t rows = rows_total(ws), out_width = config_.output_size();
        const CellScratch<T>& cs = ws.cells[0];
        for (int64_t l = 0; l < config_.num_layers; ++l)
            for (int64_t d = 0; d < config_.num_directions(); ++d) {
                const int64_t state = (l * config_.num_directions() + d) * batch_ * sw;
                // Other threads may still read the previous cell's h0 rows and runs.
#pragma omp barrier
                kernels::cpu::gather_state_units(args.h0.empty() ? nullptr : args.h0.data() + state,
                                                 batch_, sw, ws.batch.order, hcols.begin, hcols.end,
                                                 cs.h_init, hp);
                if (team.leads()) make_h_runs(ws, cs, d, rs.out + l * rows * out_width);
#pragma omp barrier
                cell_weight_grads(args, ws, cs, rs, l, d, kern, own, hcols);
            }
    }

    // Weight and bias gradients of cell (l, d), rows of the own blocks, ADDED into dparams
    // (PyTorch layout, host): dgates (S, G) and the bias gradient (G) come from the reserve, the
    // partners from the layer input (x_sorted or the layer below's output) and the h runs that
    // make_h_runs built for this cell (needs a barrier after it).
    // With a projection also dW_hr (P, H) += sum over frames of dh^T h_raw, rows hcols of it,
    // from the reserve's dh (S, P) and h_raw (S, Hp).
    void cell_weight_grads(const BackwardArgs<T>& args, const Workspace<T>& ws,
                           const CellScratch<T>& cs, const Reserve<T>& rs, int64_t l, int64_t d,
                           const K& kern, BlockRange own, BlockRange hcols) const {
        const int64_t gc = lay_.gate_cols, rows = rows_total(ws);
        const int64_t out_width = config_.output_size(), in = config_.layer_input_size(l);
        const int64_t cell = l * config_.num_directions() + d;
        const T* layer_in = l == 0 ? ws.x_sorted : rs.out + (l - 1) * rows * out_width;
        const int64_t ld_in = l == 0 ? x_stride(config_) : out_width;
        const CellOffsets p = cell_offsets(config_, l, d);
        T* grads = args.dparams.data();
        const RowRun<T> x_run{0, rows, layer_in, ld_in};
        kern.weight_grads(rs.gates + cell * seq_len_ * batch_ * gc, &x_run, 1, cs.runs,
                          *cs.run_count, in, grads + p.weight_ih, grads + p.weight_hh, own);
        if (p.has_bias())
            kernels::cpu::add_bias_grads(rs.dbias + cell * gc, lay_, own, grads + p.bias_ih,
                                         grads + p.bias_hh);
        if (p.has_projection())
            kernels::cpu::add_projection_grads(
                rs.dh + cell * seq_len_ * batch_ * config_.proj_size,
                rs.h_raw + cell * seq_len_ * batch_ * lay_.hidden_padded, rows, config_.proj_size,
                lay_, hcols, grads + p.weight_hr);
    }

    // Projections, backward step s of direction d (s = -1: only d(h0) of the first step), columns
    // hcols of P: dh (S, P) compact, this step's rows overwritten with the gradient reaching the
    // projected h_t (dy, plus dgates_{t+1} W_hh or dhn), and cs.dh0 (N, Hp; P columns) rows of
    // sequences whose first step was the next one overwritten with dgates_{t+1} W_hh. Reads the
    // next step's dgates from gates (S, G). Host; every element sums over gate columns in order.
    void projected_grad(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d, int64_t s,
                        const T* gates, T* dh, const T* d_out, BlockRange hcols) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols, proj = config_.proj_size;
        const int64_t out_width = config_.output_size();
        if (hcols.count() == 0) return;
        const int64_t t = s >= 0 ? step_time(s, seq_len_, d) : 0;
        const int64_t n = s >= 0 ? ws.batch.active[t] : 0;
        const bool has_next = s + 1 < seq_len_;
        const int64_t t_next = has_next ? step_time(s + 1, seq_len_, d) : 0;
        const int64_t n_next = has_next ? ws.batch.active[t_next] : 0;
        const T* dg_next = gates + ws.offsets[t_next] * gc;
        for (int64_t r = 0; r < std::max(n, n_next); ++r) {
            T* out = r < n ? dh + (ws.offsets[t] + r) * proj : cs.dh0 + r * hp;
            if (r < n_next) {
                // The recurrent part: dgates_{t+1} W_hh over the interleaved gate rows.
                std::fill(out + hcols.begin, out + hcols.end, T(0));
                const T* dg = dg_next + r * gc;
                for (int64_t c = 0; c < gc; ++c) {
                    const T a = dg[c];
                    const T* w = cs.w_hh_rows + c * proj;
                    for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += a * w[q];
                }
            } else {
                std::copy(cs.dhn + r * hp + hcols.begin, cs.dhn + r * hp + hcols.end,
                          out + hcols.begin);
            }
            if (r < n) {
                const T* dy = d_out + (ws.offsets[t] + r) * out_width + d * proj;
                for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += dy[q];
            }
        }
    }

    // Projections, backward step s of direction d after projected_grad (and a barrier): own
    // units of cs.h_raw (N, Hp) overwritten with dh_raw = dh W_hr (w_hr (P, H) row-major, host;
    // padded units 0), which the kernel's pass then takes as the carried gradient, dy being in dh
    // already. Rows split where c_{t-1} changes source; dbias (G) gets the dgates ADDED.
    void backward_step_proj(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d, int64_t s,
                            T* gates, const T* cells, T* dbias, const T* dh, const T* w_hr,
                            const K& kern, BlockRange own) const {
        if (s < 0) return;
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t proj = config_.proj_size;
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const int64_t end = std::min(u1, hidden);
        const int64_t t = step_time(s, seq_len_, d), n = ws.batch.active[t];
        const int64_t row = ws.offsets[t];
        for (int64_t r = 0; r < n; ++r) {
            T* out = cs.h_raw + r * hp;
            std::fill(out + u0, out + u1, T(0));
            const T* g = dh + (row + r) * proj;
            for (int64_t q = 0; q < proj; ++q) {
                const T a = g[q];
                const T* w = w_hr + q * hidden;
                for (int64_t u = u0; u < end; ++u) out[u] += a * w[u];
            }
        }
        const int64_t t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
        const int64_t n_prev = s > 0 ? ws.batch.active[t_prev] : 0;
        const int64_t split = std::min(n_prev, n), row_prev = ws.offsets[t_prev];
        const int64_t cuts[3] = {0, split, n};
        for (int i = 0; i < 2; ++i) {
            const int64_t a = cuts[i], b = cuts[i + 1];
            if (b <= a) continue;
            kernels::cpu::BackwardSegment<T> seg{};
            seg.rows = b - a;
            seg.dgates_next = nullptr;
            seg.dh_carry = cs.h_raw + a * hp;
            seg.dy = cs.zeros;
            seg.ld_dy = 0;
            seg.gates = gates + (row + a) * gc;
            seg.c = cells + (row + a) * hp;
            seg.c_prev = a < n_prev ? cells + (row_prev + a) * hp : cs.c_init + a * hp;
            seg.dc = cs.dc_run + a * hp;
            seg.bias_grad = dbias;
            kern.backward_step(seg, own);
        }
    }

    // Backward step s of direction d (s = -1: only the initial-state gradient of the first
    // step). Rows of this step split where the carry source changes (gradient from the next
    // step, or dhn for a sequence's last step) and where c_{t-1} does (previous step, or c0).
    // dbias (G) gets this step's dgates ADDED (own columns).
    void backward_step(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d, int64_t s,
                       T* gates, const T* cells, T* dbias, const T* d_out, const K& kern,
                       BlockRange own) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t out_width = config_.output_size();
        const int64_t t = s >= 0 ? step_time(s, seq_len_, d) : 0;
        const int64_t n = s >= 0 ? ws.batch.active[t] : 0;
        const bool has_next = s + 1 < seq_len_;
        const int64_t t_next = has_next ? step_time(s + 1, seq_len_, d) : 0;
        const int64_t n_next = has_next ? ws.batch.active[t_next] : 0;
        const T* dg_next = gates + ws.offsets[t_next] * gc;
        if (s >= 0) {
            const int64_t t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
            const int64_t n_prev = s > 0 ? ws.batch.active[t_prev] : 0;
            int64_t cuts[4] = {0, std::min(n_next, n), std::min(n_prev, n), n};
            std::sort(cuts + 1, cuts + 3);
            const int64_t row = ws.offsets[t], row_prev = ws.offsets[t_prev];
            for (int i = 0; i < 3; ++i) {
                const int64_t a = cuts[i], b = cuts[i + 1];
                if (b <= a) continue;
                kernels::cpu::BackwardSegment<T> seg{};
                seg.rows = b - a;
                seg.dgates_next = a < n_next ? dg_next + a * gc : nullptr;
                seg.dh_carry = cs.dhn + a * hp;
                seg.dy = d_out + (row + a) * out_width + d * lay_.hidden;
                seg.ld_dy = out_width;
                seg.gates = gates + (row + a) * gc;
                seg.c = cells + (row + a) * hp;
                seg.c_prev = a < n_prev ? cells + (row_prev + a) * hp : cs.c_init + a * hp;
                seg.dc = cs.dc_run + a * hp;
                seg.bias_grad = dbias;
                kern.backward_step(seg, own);
            }
        }
        // Rows whose first step was the next one: their recurrent gradient is d(h0).
        if (n_next > n) kern.backward_dh0(n_next - n, dg_next + n * gc, cs.dh0 + n * hp, own);
    }

    // Runs pairing each compact row of dgates with its h_{t-1}, in increasing row order, merged
    // where consecutive, into cs.runs and cs.run_count. Called by one member of the crew.
    void make_h_runs(const Workspace<T>& ws, const CellScratch<T>& cs, int64_t d,
                     const T* layer_out) const {
        const int64_t hp = lay_.hidden_padded, out_width = config_.output_size();
        const T* h_out = layer_out + d * config_.state_size();
        int64_t count = 0;
        auto push = [&](int64_t k0, int64_t rows, const T* src, int64_t ld) {
            if (rows == 0) return;
            RowRun<T>& last = cs.runs[count > 0 ? count - 1 : 0];
            if (count > 0 && last.ld == ld && last.k0 + last.count == k0 &&
                last.rows + last.count * ld == src) {
                last.count += rows;
                return;
            }
            cs.runs[count++] = RowRun<T>{k0, rows, src, ld};
        };
        for (int64_t t = 0; t < seq_len_; ++t) {
            // The step processed just before t in this direction.
            const bool first = d == 0 ? t == 0 : t == seq_len_ - 1;
            const int64_t t_prev = d == 0 ? t - 1 : t + 1;
            const int64_t n = ws.batch.active[t];
            const int64_t n_prev = first ? 0 : std::min(n, ws.batch.active[t_prev]);
            if (n_prev > 0)
                push(ws.offsets[t], n_prev, h_out + ws.offsets[t_prev] * out_width, out_width);
            push(ws.offsets[t] + n_prev, n - n_prev, cs.h_init + n_prev * hp, hp);
        }
        *cs.run_count = count;
    }

    // dh0 (columns hcols of sw = config.state_size(), at h_state of the (L*D, N, sw) host tensor)
    // / dc0 (own units of H, at state of (L*D, N, H)) of one cell, overwritten, back in the
    // caller's row order.
    void write_state_grads(const BackwardArgs<T>& args, const Workspace<T>& ws,
                           const CellScratch<T>& cs, int64_t state, int64_t h_state, int64_t u0,
                           int64_t u1, BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, end = std::min(u1, hidden);
        const int64_t sw = config_.state_size(), h_end = std::min(hcols.end, sw);
        for (int64_t r = 0; r < batch_; ++r) {
            const int64_t dst = state + ws.batch.order[r] * hidden;
            const int64_t h_dst = h_state + ws.batch.order[r] * sw;
            if (!args.dh0.empty())
                for (int64_t u = hcols.begin; u < h_end; ++u)
                    args.dh0[h_dst + u] = cs.dh0[r * hp + u];
            if (!args.dc0.empty())
                for (int64_t u = u0; u < end; ++u) args.dc0[dst + u] = cs.dc_run[r * hp + u];
        }
    }

    const Config& config_;
    FusedLayout lay_;
    int64_t seq_len_;
    int64_t batch_;
    // The per-direction crews' barriers when a bidirectional layer runs side by side; shared by
    // the team (the loop object outlives the call's one parallel region).
    mutable kernels::cpu::CrewBarrier crew_barriers_[2];
};

}  // namespace fused_detail

// The plan of `fused`: the path (kernel set) chosen when it was made, the sizes of the carving
// above, and the time loop on that kernel set.
class FusedPlan final : public Plan {
public:
    FusedPlan(const Variant& variant, const PlanRequest& r)
        : Plan(variant, r, workspace_size(r), reserve_size(r)), isa_(fused_isa_named(r.path)) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override {
        with_loop(a.x, [&](auto&& time_loop) { time_loop.forward(a); });
    }
    void run_forward(const ForwardArgs<double>& a) const override {
        loop<double, kernels::cpu::PortableFusedKernels<double>>(a.x).forward(a);
    }
    void run_backward(const BackwardArgs<float>& a) const override {
        with_loop(a.x, [&](auto&& time_loop) { time_loop.backward(a); });
    }
    void run_backward(const BackwardArgs<double>& a) const override {
        loop<double, kernels::cpu::PortableFusedKernels<double>>(a.x).backward(a);
    }

private:
    static size_t workspace_size(const PlanRequest& r) {
        return detail::carved_bytes_from_boundary(r.dtype, [&](detail::Carver& carve, auto e) {
            fused_detail::carve_workspace<decltype(e)>(carve, r.config, r.seq_len, r.batch);
        });
    }
    static size_t reserve_size(const PlanRequest& r) {
        return detail::carved_bytes_from_boundary(r.dtype, [&](detail::Carver& carve, auto e) {
            fused_detail::carve_reserve<decltype(e)>(carve, r.config, r.seq_len, r.batch);
        });
    }
    // x (T, N, I), host.
    template <typename T, typename K>
    fused_detail::FusedLoop<T, K> loop(const TensorView<const T>& x) const {
        return fused_detail::FusedLoop<T, K>(config(), x.size(0), x.size(1));
    }
    // Calls run(loop) with the fp32 time loop on the plan's kernel set; x (T, N, I), host.
    template <typename Run>
    void with_loop(const TensorView<const float>& x, Run&& run) const {
        switch (isa_) {
            case FusedIsa::avx512:
                return run(loop<float, fused_detail::HeldSimdKernels<FusedIsa::avx512>>(x));
            case FusedIsa::avx2:
                return run(loop<float, fused_detail::HeldSimdKernels<FusedIsa::avx2>>(x));
            case FusedIsa::neon:
                return run(loop<float, fused_detail::HeldSimdKernels<FusedIsa::neon>>(x));
            default:
                return run(loop<float, kernels::cpu::PortableFusedKernels<float>>(x));
        }
    }

    FusedIsa isa_;
};

class FusedVariant final : public Variant {
public:
    const char* name() const override { return "fused"; }
    Device device() const override { return Device::cpu; }

    std::optional<std::string> supports(const Config&, DType) const override {
        return std::nullopt;
    }
    // Backward splits at the seam it always had (time loop, then weight GEMMs over all steps).
    std::optional<std::string> supports_split_backward() const override { return std::nullopt; }

    // float: the SIMD paths this CPU (and build) runs, widest first, then eigen; double: eigen.
    std::vector<std::string> paths(DType dtype) const override {
        std::vector<std::string> out;
        if (dtype == DType::f32)
            for (FusedIsa isa : kSimdFusedIsas)
                if (fused_isa_available(isa)) out.emplace_back(fused_isa_name(isa));
        out.emplace_back(fused_isa_name(FusedIsa::eigen));
        return out;
    }
    std::string default_path(DType dtype) const override {
        return fused_isa_name(dtype == DType::f32 ? default_fused_isa() : FusedIsa::eigen);
    }
    std::string why_no_path(const std::string& path) const override {
        for (FusedIsa isa : kSimdFusedIsas)
            if (path == fused_isa_name(isa))
                return std::string("this CPU (or build) has no ") + fused_isa_needs(isa) +
                       kernels::cpu::isa_cap_note();
        return "";
    }
    std::string describe_path(const std::string& path) const override {
        const FusedIsa isa = fused_isa_named(path);
        if (isa == FusedIsa::eigen)
            return "eigen kernels (Eigen compiled for " +
                   std::string(kernels::cpu::gemm_instruction_sets()) + ")";
        // The Highway kernel set, held to one target whatever simd_target says.
        return path + " kernels (Highway, " +
               kernels::cpu::simd_fused_target_name(fused_isa_target(isa)) + " target)";
    }

protected:
    std::unique_ptr<Plan> build_plan(const PlanRequest& request) const override {
        return std::make_unique<FusedPlan>(*this, request);
    }
};

}  // namespace lstm::cpu
