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
// Precision::bf16 (float data): the engine rounds every product's operand to bf16 where it
// enters (docs/precision.md) and the kernel set computes on the rounded floats in fp32, the
// rounding of bf16 without its speed: each cell's weights when the cell begins, before packing;
// the layer inputs as whole planes (the stack loop's round_operand_plane); h_t into a ping-pong
// copy (h_round) that the next step's recurrent product reads, the layer output keeping the fp32
// h for y and hn; h_raw before the projection; and in backward each step's dgates in place once
// the kernel has taken the bias gradient from its registers, and the projection's dh.
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

#include "kernels/common/bf16.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/crew.hpp"
#include "kernels/cpu/environment.hpp"
#include "kernels/cpu/fused_cell.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "kernels/cpu/team.hpp"
#include "lstm/detail/carve.hpp"
#include "lstm/stack_loop.hpp"
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
// CPU that runs it; FusedEngine takes a kernel set constructed from the layout and buffers.
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
// run side by side (FusedEngine::side_by_side) has one per direction.
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
    // Precision::bf16 only (null without).
    T* h_round;  // (2, N, Hp) forward: h_t rounded to bf16, ping-pong by step, the next step's
                 // recurrent operand (the layer output keeps the fp32 h)
};

// What a training forward leaves for backward besides the layer outputs (the stack loop keeps
// those): per cell, planes of T * N rows, compact and sorted (lstm/stack_loop.hpp's RowLayout).
template <typename T>
struct Reserve {
    T* gates;  // (L*D, T*N, G) activated gates, interleaved; backward overwrites them with dgates
    T* cell;   // (L*D, T*N, Hp) c_t
    T* dbias;  // (L*D, G) backward: each cell's bias gradient, from the data part to the weights
               // part (the forward leaves it alone)
    // Projections only (null without).
    T* h_raw;  // (L*D, T*N, Hp) h_t before the projection, units < H
    T* dh;     // (L*D, T*N, P) backward: the gradient reaching each projected h_t, from the data
               // part to the weights part (dW_hr)
};

template <typename T>
CellScratch<T> carve_cell_scratch(detail::Carver& carve, const Config& config, int64_t seq_len,
                                  int64_t batch, bool bf16) {
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
    if (bf16) c.h_round = carve.take<T>(2 * batch * hp);
    return c;
}

// The team engine of `fused` on kernel set K (PortableFusedKernels or a SimdFusedKernels held to
// one target), run by the stack loop (lstm/stack_loop.hpp); constructed once per call.
template <typename T, typename K>
class FusedEngine : public HostEngine<T> {
public:
    FusedEngine(const Config& config, int64_t seq_len, int64_t batch,
                Precision precision = Precision::full)
        : config_(config),
          lay_(config.hidden_size, config.state_size()),
          seq_len_(seq_len),
          batch_(batch),
          bf16_(precision == Precision::bf16) {}

    int64_t x_stride() const { return fused_detail::x_stride(config_); }

    // Whether the two directions of a bidirectional layer run side by side, each on half of a
    // team of `threads`: their time loops are independent, so each half meets only itself at
    // the per-step barriers (2 threads: none at all), and each thread keeps all of one
    // direction's weights instead of half of both. Halves of an odd team would differ in size
    // and the larger would wait for the smaller, so odd teams run the directions one after the
    // other on the whole team, as unidirectional layers do. Only for kernel sets whose bits do
    // not depend on the split: a split backward (data, then weights on the whole team) must
    // give the bits of one call.
    bool side_by_side(int threads) const {
        return kSameBitsAnySplit && threads >= 2 && threads % 2 == 0;
    }

    void carve_workspace(detail::Carver& carve) {
        cells_[0] = carve_cell_scratch<T>(carve, config_, seq_len_, batch_, bf16_);
        cells_[1] = config_.num_directions() == 2
                        ? carve_cell_scratch<T>(carve, config_, seq_len_, batch_, bf16_)
                        : cells_[0];
        weights_bf16_ = bf16_ ? carve.take<T>(param_count(config_)) : nullptr;
    }

    // Precision::bf16: the stack loop hands over the planes read only as products' operands.
    bool rounds_operands() const { return bf16_; }
    void round_operand_plane(const RowLayout& rows, T* plane, int64_t width, int64_t ld,
                             const Crew& team) const {
        const BlockRange steps = team.share(rows.seq_len);
        const int64_t first = rows.offsets[steps.begin], last = rows.offsets[steps.end];
        round_block(plane + first * ld, last - first, 0, width, ld);
    }

    void carve_reserve(detail::Carver& carve) {
        const int64_t planes = config_.num_cells() * seq_len_ * batch_;
        rs_.gates = carve.take<T>(planes * lay_.gate_cols);
        rs_.cell = carve.take<T>(planes * lay_.hidden_padded);
        rs_.dbias = carve.take<T>(config_.num_cells() * lay_.gate_cols);
        if (config_.proj_size > 0) {
            rs_.h_raw = carve.take<T>(planes * lay_.hidden_padded);
            rs_.dh = carve.take<T>(planes * config_.proj_size);
        }
    }

    // body(team) on one OpenMP team, denormals flushed; the kernel sets are built before it
    // starts, one per lane.
    template <typename Body>
    void run_team(Body&& body) {
        kerns_[0].emplace(lay_, cells_[0].kern);
        kerns_[1].emplace(lay_, cells_[1].kern);
        kernels::cpu::run_governed_team(governor(), [&] {
            const kernels::cpu::ScopedFlushDenormals flush;
            body(kernels::cpu::Crew::whole_team());
        });
    }

    // Packs the cell's weights (own blocks), projects every frame's input at once when training
    // and gathers the cell's initial states (own columns).
    void begin_forward(const ForwardCell<T>& c, const Crew& crew) {
        const CellScratch<T>& cs = cells_[c.lane];
        const K& kern = *kerns_[c.lane];
        const BlockRange own = crew.blocks(lay_.blocks);
        const BlockRange hcols = state_columns(crew, own);
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, sw = config_.state_size();
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const CellOffsets& p = c.p;
        const ForwardArgs<T>& args = *c.args;
        const T* params = args.params.data();
        const T* w = product_weights(c, params, crew);
        kern.pack_forward(w + p.weight_ih, c.in_width, w + p.weight_hh,
                          p.has_bias() ? params + p.bias_ih : nullptr,
                          p.has_bias() ? params + p.bias_hh : nullptr, own);
        // Each thread packs the columns of W_hr^T it projects into, so no barrier.
        if (config_.proj_size > 0) pack_projection(w + p.weight_hr, cs.wr_t, hcols);
        // Training projects every frame at once into the reserve; inference projects one step at
        // a time into an (N, G) buffer instead of holding (S, G) of scratch. Each row's sums are
        // the same either way, so both give the same bits.
        if (c.training)
            kern.input_projection(c.in, c.ld_in, c.layout->frames(), c.in_width,
                                  plane(rs_.gates, c, lay_.gate_cols), own,
                                  kernels::cpu::ProjectionTarget::whole_sequence);
        kernels::cpu::gather_state_units(
            args.h0.empty() ? nullptr : args.h0.data() + c.cell * batch_ * sw, batch_, sw,
            c.layout->order, hcols.begin, hcols.end, cs.h_init, hp);
        // h0 is only the first steps' recurrent operand.
        if (bf16_) round_block(cs.h_init, batch_, hcols.begin, hcols.end, hp);
        kernels::cpu::gather_state_units(
            args.c0.empty() ? nullptr : args.c0.data() + c.cell * batch_ * hidden, batch_, hidden,
            c.layout->order, u0, u1, cs.c_init, hp);
        if (!c.training)
            for (int64_t r = 0; r < batch_; ++r)
                std::copy(cs.c_init + r * hp + u0, cs.c_init + r * hp + u1, cs.c_run + r * hp + u0);
    }

    // One step: inference projects the step's input first; with a projection the kernel writes
    // h before the projection, and after a crew barrier (the projection reads every unit of it)
    // the projection writes the layer output.
    void forward_step(const ForwardCell<T>& c, const StepTime& st, const Crew& crew) {
        const CellScratch<T>& cs = cells_[c.lane];
        const K& kern = *kerns_[c.lane];
        const BlockRange own = crew.blocks(lay_.blocks);
        const int64_t hp = lay_.hidden_padded;
        T* gates = c.training ? rs_.gates + st.frame * lay_.gate_cols : cs.gates;
        if (!c.training)
            kern.input_projection(c.in + st.row * c.ld_in, c.ld_in, st.rows, c.in_width, gates, own,
                                  kernels::cpu::ProjectionTarget::per_step);
        // Where the kernel writes h before the projection (null: it writes h itself).
        T* h_raw = config_.proj_size == 0 ? nullptr
                   : c.training           ? rs_.h_raw + st.frame * hp
                                          : cs.h_raw;
        forward_segments(c, st, cs, gates, h_raw, kern, own);
        const BlockRange hcols = state_columns(crew, own);
        if (config_.proj_size > 0) {
            // h_raw is only the projection's operand (and, kept, dW_hr's).
            if (bf16_)
                round_block(h_raw, st.rows, own.begin * kUnitBlock, own.end * kUnitBlock, hp);
            crew.sync();
            project_step(c, st, cs, h_raw, hcols);
        }
        // The next step's recurrent operand: the member's columns of h_t, rounded.
        const int64_t out_width = config_.output_size();
        if (bf16_)
            round_rows(c.out + st.row * out_width + c.direction * config_.state_size(), out_width,
                       st.rows, hcols.begin, std::min(hcols.end, config_.state_size()),
                       cs.h_round + (st.s % 2) * batch_ * hp, hp);
    }

    void end_forward(const ForwardCell<T>& c, const Crew& crew) {
        const BlockRange own = crew.blocks(lay_.blocks);
        write_final_state(c, cells_[c.lane], own, state_columns(crew, own));
    }

    // Packs the cell's weights for backward and gathers c0, dhn, dcn (and, when the weights part
    // runs too, h0 and the runs of h_{t-1} partners). Leaves the packed W_ih in the lane's kernel
    // buffers for input_grads.
    void begin_backward(const BackwardCell<T>& c, const Crew& crew) {
        const CellScratch<T>& cs = cells_[c.lane];
        const K& kern = *kerns_[c.lane];
        const BlockRange own = crew.blocks(lay_.blocks);
        const BlockRange hcols = state_columns(crew, own);
        const int64_t proj = config_.proj_size;
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const BackwardArgs<T>& args = *c.args;
        const CellOffsets& p = c.p;
        const T* w = product_weights(c, args.params.data(), crew);
        // With a projection the kernel set gets no W_hh: dh = dgates W_hh is P wide and formed by
        // projected_grad, from rows every member reads after a barrier.
        kern.pack_backward(w + p.weight_ih, c.in_width, proj > 0 ? nullptr : w + p.weight_hh, own);
        if (proj > 0) {
            kernels::cpu::pack_rows_interleaved(w + p.weight_hh, proj, lay_, own, cs.w_hh_rows,
                                                proj);
            std::fill(cs.zeros + u0, cs.zeros + u1, T(0));
        }
        gather_units(c, args.c0, own, cs.c_init);
        gather_h(c, args.dhn, hcols, cs.dhn);
        gather_units(c, args.dcn, own, cs.dc_run);
        bias_sums(c, cs, own, 0).start();
        if (c.weights) {
            gather_partner_h0(c, hcols, cs);
            if (crew.leads()) make_h_runs(c, cs);
        }
    }

    void backward_step(const BackwardCell<T>& c, const StepTime& st, const Crew& crew) {
        backward_at(c, st.s, crew);
    }

    // The weight gradients are GEMMs over all steps once the time loop is done (end_backward,
    // end_weights).
    void weight_step(const BackwardCell<T>&, const StepTime&, const Crew&) {}

    // One step more (s = -1: d(h0) of the sequences whose first step ran last), then the cell's
    // bias sums, its weight gradients when the weights part runs too, and dh0 / dc0.
    void end_backward(const BackwardCell<T>& c, const Crew& crew) {
        backward_at(c, -1, crew);
        crew.sync();
        const CellScratch<T>& cs = cells_[c.lane];
        const BlockRange own = crew.blocks(lay_.blocks);
        const BlockRange hcols = state_columns(crew, own);
        bias_sums(c, cs, own, 0).flush();
        if (c.weights) cell_weight_grads(c, cs, *kerns_[c.lane], own, hcols);
        write_state_grads(c, cs, own, hcols);
    }

    // d(layer input) of the cell, rows split across the team: overwritten by direction 0, added
    // by direction 1, each member over the same rows whichever way the directions ran, so the
    // bits are the same either way.
    void input_grads(const BackwardCell<T>& c, const Crew& team) const {
        if (c.d_in == nullptr) return;
        kerns_[c.lane]->input_grads(plane(rs_.gates, c, lay_.gate_cols),
                                    team.share(c.layout->frames()), c.in_width, c.d_in, c.in_width,
                                    c.direction > 0);
    }

    // BackwardPart::weights: the workspace did not survive the data call, so each cell's h0 and
    // runs are gathered again; everything else is in the reserve.
    void begin_weights(const BackwardCell<T>& c, const Crew& team) {
        const BlockRange hcols = state_columns(team, team.blocks(lay_.blocks));
        gather_partner_h0(c, hcols, cells_[c.lane]);
        if (team.leads()) make_h_runs(c, cells_[c.lane]);
    }
    void end_weights(const BackwardCell<T>& c, const Crew& team) {
        const BlockRange own = team.blocks(lay_.blocks);
        cell_weight_grads(c, cells_[c.lane], *kerns_[c.lane], own, state_columns(team, own));
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

    // The columns of h-shaped states (h0, hn, dhn, dh0; the projection's outputs) a crew member
    // handles: its own units, or with a projection its share of the P columns.
    BlockRange state_columns(const Crew& crew, BlockRange own) const {
        if (config_.proj_size > 0) return crew.share(config_.proj_size);
        return BlockRange{own.begin * kUnitBlock, own.end * kUnitBlock};
    }

    // Cell c's plane of a per-cell (L*D, T*N, width) reserve array.
    template <typename U>
    U* plane(U* base, const CellRun& c, int64_t width) const {
        return base + c.cell * seq_len_ * batch_ * width;
    }

    // The bias-gradient sums of the member's own gate columns, `done` steps in.
    kernels::cpu::BiasGradSums<T> bias_sums(const CellRun& c, const CellScratch<T>& cs,
                                            BlockRange own, int64_t done) const {
        kernels::cpu::BiasGradSums<T> bias{cs.step_bias, cs.block_bias,
                                           rs_.dbias + c.cell * lay_.gate_cols,
                                           own.begin * kUnitBlock * 4, own.end * kUnitBlock * 4};
        bias.steps = done;
        return bias;
    }

    // dst (N, Hp) sorted, own units <- this cell's slice of an (L*D, N, H) state (zeros: empty).
    void gather_units(const CellRun& c, const TensorView<const T>& v, BlockRange own,
                      T* dst) const {
        const int64_t hidden = lay_.hidden;
        kernels::cpu::gather_state_units(v.empty() ? nullptr : v.data() + c.cell * batch_ * hidden,
                                         batch_, hidden, c.layout->order, own.begin * kUnitBlock,
                                         own.end * kUnitBlock, dst, lay_.hidden_padded);
    }
    // The same for an h-shaped (L*D, N, S) state, columns hcols.
    void gather_h(const CellRun& c, const TensorView<const T>& v, BlockRange hcols, T* dst) const {
        const int64_t sw = config_.state_size();
        kernels::cpu::gather_state_units(v.empty() ? nullptr : v.data() + c.cell * batch_ * sw,
                                         batch_, sw, c.layout->order, hcols.begin, hcols.end, dst,
                                         lay_.hidden_padded);
    }

    // cs.h_init columns hcols <- this cell's h0, sorted: the recurrent weight gradient's partner
    // of the sequences' first steps (rounded in bf16, as every partner).
    void gather_partner_h0(const BackwardCell<T>& c, BlockRange hcols,
                           const CellScratch<T>& cs) const {
        gather_h(c, c.args->h0, hcols, cs.h_init);
        if (bf16_) round_block(cs.h_init, batch_, hcols.begin, hcols.end, lay_.hidden_padded);
    }

    // Step st of cell c, gates (active rows, G) holding its input projection: rows that
    // continue read the previous step's h and c, rows that start here (only the reverse
    // direction starts sequences late) read the initial state. h_raw (active rows, Hp), host,
    // non-null with a projection: the kernel overwrites it with h before the projection (own
    // units) instead of writing the layer output.
    void forward_segments(const ForwardCell<T>& c, const StepTime& st, const CellScratch<T>& cs,
                          T* gates, T* h_raw, const K& kern, BlockRange own) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t out_width = config_.output_size();
        const int64_t dir_col = c.direction * config_.state_size();
        const int64_t n = st.rows, split = std::min(n, st.rows_prev);
        T* cells = c.training ? plane(rs_.cell, c, hp) : nullptr;
        T* c_now = cells ? cells + st.row * hp : cs.c_run;
        kernels::cpu::ForwardSegment<T> seg{};
        seg.gates = gates;
        seg.c = c_now;
        seg.ld_c = hp;
        seg.h = h_raw ? h_raw : c.out + st.row * out_width + dir_col;
        seg.ld_h = h_raw ? hp : out_width;
        if (split > 0) {
            seg.rows = split;
            seg.h_prev = bf16_ ? cs.h_round + ((st.s + 1) % 2) * batch_ * hp
                               : c.out + st.row_prev * out_width + dir_col;
            seg.ld_h_prev = bf16_ ? hp : out_width;
            seg.c_prev = cells ? cells + st.row_prev * hp : cs.c_run;
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
            seg.h = h_raw ? h_raw + split * hp : c.out + (st.row + split) * out_width + dir_col;
            kern.forward_step(seg, own);
        }
    }

    // hn (columns hcols of its sw = config.state_size() features) / cn (own units of H) of one
    // cell: each row's state at its last processed step, into the caller's (L*D, N, sw) /
    // (L*D, N, H) host tensors, overwritten.
    void write_final_state(const ForwardCell<T>& c, const CellScratch<T>& cs, BlockRange own,
                           BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, sw = config_.state_size();
        const int64_t out_width = config_.output_size();
        const int64_t u0 = own.begin * kUnitBlock, end = std::min(own.end * kUnitBlock, hidden);
        const int64_t h_end = std::min(hcols.end, sw);
        const ForwardArgs<T>& args = *c.args;
        const RowLayout& rows = *c.layout;
        const T* cells = c.training ? plane(rs_.cell, c, hp) : nullptr;
        for (int64_t r = 0; r < batch_; ++r) {
            const int64_t t_last = c.direction == 0 ? rows.lengths[r] - 1 : 0;
            const int64_t row = rows.offsets[t_last] + r;
            if (!args.hn.empty()) {
                const int64_t dst = (c.cell * batch_ + rows.order[r]) * sw;
                const T* h = c.out + row * out_width + c.direction * sw;
                for (int64_t u = hcols.begin; u < h_end; ++u) args.hn[dst + u] = h[u];
            }
            if (!args.cn.empty()) {
                const int64_t dst = (c.cell * batch_ + rows.order[r]) * hidden;
                const T* cr = cells ? cells + row * hp : cs.c_run + r * hp;
                for (int64_t u = u0; u < end; ++u) args.cn[dst + u] = cr[u];
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

    // The projection of step st of cell c: layer output rows of the step, columns d P + hcols,
    // overwritten <- h_raw (active rows, Hp; units < H) W_hr^T, with wr_t packed. Every element
    // sums over units in order, whatever the split of columns, so the bits do not depend on the
    // team size.
    void project_step(const ForwardCell<T>& c, const StepTime& st, const CellScratch<T>& cs,
                      const T* h_raw, BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, proj = config_.proj_size;
        const int64_t out_width = config_.output_size();
        if (hcols.count() == 0) return;
        for (int64_t r = 0; r < st.rows; ++r) {
            T* out = c.out + (st.row + r) * out_width + c.direction * proj;
            const T* in = h_raw + r * hp;
            std::fill(out + hcols.begin, out + hcols.end, T(0));
            for (int64_t u = 0; u < hidden; ++u) {
                const T a = in[u];
                const T* w = cs.wr_t + u * proj;
                for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += a * w[q];
            }
        }
    }

    // Backward step s of cell c (s = -1: only d(h0) of the first step), the member's share of
    // it, into the lane's scratch and the reserve.
    void backward_at(const BackwardCell<T>& c, int64_t s, const Crew& crew) {
        const CellScratch<T>& cs = cells_[c.lane];
        const K& kern = *kerns_[c.lane];
        const BlockRange own = crew.blocks(lay_.blocks);
        const int64_t proj = config_.proj_size;
        T* gates = plane(rs_.gates, c, lay_.gate_cols);
        const T* cells = plane(rs_.cell, c, lay_.hidden_padded);
        kernels::cpu::BiasGradSums<T> bias = bias_sums(c, cs, own, seq_len_ - 1 - s);
        if (proj == 0) {
            bias.begin_step();
            backward_segments(c, s, cs, gates, cells, cs.step_bias, kern, own);
            bias.end_step();
            round_dgates(c, s, gates, own);
            return;
        }
        T* dh = plane(rs_.dh, c, proj);
        const BlockRange hcols = state_columns(crew, own);
        projected_grad(c, s, cs, gates, dh, hcols);
        // This step's dh is only an operand: of dh_raw = dh W_hr and of dW_hr.
        if (bf16_ && s >= 0) {
            const int64_t t = step_time(s, seq_len_, c.direction);
            round_block(dh + c.layout->offsets[t] * proj, c.layout->active[t], hcols.begin,
                        hcols.end, proj);
        }
        // The gate pass reads every column of this step's dh.
        crew.sync();
        bias.begin_step();
        const T* w_hr = (bf16_ ? weights_bf16_ : c.args->params.data()) + c.p.weight_hr;
        backward_step_proj(c, s, cs, gates, cells, cs.step_bias, dh, w_hr, kern, own);
        bias.end_step();
        round_dgates(c, s, gates, own);
    }

    // Precision::bf16, after backward step s of cell c: the member's gate columns of the step's
    // dgates rounded in place, as the next step, dx and the weight gradients read them (the bias
    // gradient took them in fp32).
    void round_dgates(const BackwardCell<T>& c, int64_t s, T* gates, BlockRange own) const {
        if (!bf16_ || s < 0) return;
        const int64_t t = step_time(s, seq_len_, c.direction), gc = lay_.gate_cols;
        round_block(gates + c.layout->offsets[t] * gc, c.layout->active[t],
                    own.begin * kUnitBlock * 4, own.end * kUnitBlock * 4, gc);
    }

    // Columns [begin, end) of `rows` rows of a (rows, ld) array rounded to bf16 in place.
    static void round_block(T* a, int64_t rows, int64_t begin, int64_t end, int64_t ld) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = begin; j < end; ++j)
                a[r * ld + j] = kernels::round_to_bf16(a[r * ld + j]);
    }
    // dst (rows, ld_dst) columns [begin, end) overwritten <- src (rows, ld_src), rounded to bf16.
    static void round_rows(const T* src, int64_t ld_src, int64_t rows, int64_t begin, int64_t end,
                           T* dst, int64_t ld_dst) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = begin; j < end; ++j)
                dst[r * ld_dst + j] = kernels::round_to_bf16(src[r * ld_src + j]);
    }

    // The weights the cell's products read: params, or in bf16 this cell's W_ih, W_hh and W_hr
    // rounded into weights_bf16_ (the crew's shares, then a crew barrier: each member packs rows
    // others rounded). Biases are read from params.
    const T* product_weights(const CellRun& c, const T* params, const Crew& crew) {
        if (!bf16_) return params;
        const CellOffsets& p = c.p;
        const int64_t gates = 4 * lay_.hidden;
        const int64_t begins[3] = {p.weight_ih, p.weight_hh, p.weight_hr};
        const int64_t counts[3] = {gates * c.in_width, gates * config_.state_size(),
                                   p.has_projection() ? config_.proj_size * lay_.hidden : 0};
        for (int i = 0; i < 3; ++i) {
            const BlockRange share = crew.share(counts[i]);
            round_rows(params + begins[i] + share.begin, 0, 1, 0, share.count(),
                       weights_bf16_ + begins[i] + share.begin, 0);
        }
        crew.sync();
        return weights_bf16_;
    }

    // Projections, backward step s of cell c (s = -1: only d(h0) of the first step), columns
    // hcols of P: dh (T*N, P) plane, this step's rows overwritten with the gradient reaching the
    // projected h_t (dy, plus dgates_{t+1} W_hh or dhn), and cs.dh0 (N, Hp; P columns) rows of
    // sequences whose first step was the next one overwritten with dgates_{t+1} W_hh. Reads the
    // next step's dgates from gates (T*N, G). Host; every element sums over gate columns in order.
    void projected_grad(const BackwardCell<T>& c, int64_t s, const CellScratch<T>& cs,
                        const T* gates, T* dh, BlockRange hcols) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols, proj = config_.proj_size;
        const int64_t out_width = config_.output_size(), d = c.direction;
        const RowLayout& rows = *c.layout;
        if (hcols.count() == 0) return;
        const int64_t t = s >= 0 ? step_time(s, seq_len_, d) : 0;
        const int64_t n = s >= 0 ? rows.active[t] : 0;
        const bool has_next = s + 1 < seq_len_;
        const int64_t t_next = has_next ? step_time(s + 1, seq_len_, d) : 0;
        const int64_t n_next = has_next ? rows.active[t_next] : 0;
        const T* dg_next = gates + rows.offsets[t_next] * gc;
        for (int64_t r = 0; r < std::max(n, n_next); ++r) {
            T* out = r < n ? dh + (rows.offsets[t] + r) * proj : cs.dh0 + r * hp;
            if (r < n_next) {
                // The recurrent part: dgates_{t+1} W_hh over the interleaved gate rows.
                std::fill(out + hcols.begin, out + hcols.end, T(0));
                const T* dg = dg_next + r * gc;
                for (int64_t col = 0; col < gc; ++col) {
                    const T a = dg[col];
                    const T* w = cs.w_hh_rows + col * proj;
                    for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += a * w[q];
                }
            } else {
                std::copy(cs.dhn + r * hp + hcols.begin, cs.dhn + r * hp + hcols.end,
                          out + hcols.begin);
            }
            if (r < n) {
                const T* dy = c.d_out + (rows.offsets[t] + r) * out_width + d * proj;
                for (int64_t q = hcols.begin; q < hcols.end; ++q) out[q] += dy[q];
            }
        }
    }

    // Projections, backward step s of cell c after projected_grad (and a barrier): own units of
    // cs.h_raw (N, Hp) overwritten with dh_raw = dh W_hr (w_hr (P, H) row-major, host; padded
    // units 0), which the kernel's pass then takes as the carried gradient, dy being in dh
    // already. Rows split where c_{t-1} changes source; dbias (G) gets the dgates ADDED.
    void backward_step_proj(const BackwardCell<T>& c, int64_t s, const CellScratch<T>& cs, T* gates,
                            const T* cells, T* dbias, const T* dh, const T* w_hr, const K& kern,
                            BlockRange own) const {
        if (s < 0) return;
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, gc = lay_.gate_cols;
        const int64_t proj = config_.proj_size, d = c.direction;
        const int64_t u0 = own.begin * kUnitBlock, u1 = own.end * kUnitBlock;
        const int64_t end = std::min(u1, hidden);
        const RowLayout& rows = *c.layout;
        const int64_t t = step_time(s, seq_len_, d), n = rows.active[t];
        const int64_t row = rows.offsets[t];
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
        const int64_t n_prev = s > 0 ? rows.active[t_prev] : 0;
        const int64_t split = std::min(n_prev, n), row_prev = rows.offsets[t_prev];
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

    // Backward step s of cell c (s = -1: only the initial-state gradient of the first step).
    // Rows of this step split where the carry source changes (gradient from the next step, or
    // dhn for a sequence's last step) and where c_{t-1} does (previous step, or c0). dbias (G)
    // gets this step's dgates ADDED (own columns).
    void backward_segments(const BackwardCell<T>& c, int64_t s, const CellScratch<T>& cs, T* gates,
                           const T* cells, T* dbias, const K& kern, BlockRange own) const {
        const int64_t hp = lay_.hidden_padded, gc = lay_.gate_cols, d = c.direction;
        const int64_t out_width = config_.output_size();
        const RowLayout& rows = *c.layout;
        const int64_t t = s >= 0 ? step_time(s, seq_len_, d) : 0;
        const int64_t n = s >= 0 ? rows.active[t] : 0;
        const bool has_next = s + 1 < seq_len_;
        const int64_t t_next = has_next ? step_time(s + 1, seq_len_, d) : 0;
        const int64_t n_next = has_next ? rows.active[t_next] : 0;
        const T* dg_next = gates + rows.offsets[t_next] * gc;
        if (s >= 0) {
            const int64_t t_prev = s > 0 ? step_time(s - 1, seq_len_, d) : 0;
            const int64_t n_prev = s > 0 ? rows.active[t_prev] : 0;
            int64_t cuts[4] = {0, std::min(n_next, n), std::min(n_prev, n), n};
            std::sort(cuts + 1, cuts + 3);
            const int64_t row = rows.offsets[t], row_prev = rows.offsets[t_prev];
            for (int i = 0; i < 3; ++i) {
                const int64_t a = cuts[i], b = cuts[i + 1];
                if (b <= a) continue;
                kernels::cpu::BackwardSegment<T> seg{};
                seg.rows = b - a;
                seg.dgates_next = a < n_next ? dg_next + a * gc : nullptr;
                seg.dh_carry = cs.dhn + a * hp;
                seg.dy = c.d_out + (row + a) * out_width + d * lay_.hidden;
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

    // Runs pairing each plane row of cell c's dgates with its h_{t-1}, in increasing row order,
    // merged where consecutive, into cs.runs and cs.run_count. Called by one member of the crew.
    void make_h_runs(const BackwardCell<T>& c, const CellScratch<T>& cs) const {
        const int64_t hp = lay_.hidden_padded, out_width = config_.output_size();
        const int64_t d = c.direction;
        const RowLayout& rows = *c.layout;
        const T* h_out = c.out + d * config_.state_size();
        int64_t count = 0;
        auto push = [&](int64_t k0, int64_t n, const T* src, int64_t ld) {
            if (n == 0) return;
            RowRun<T>& last = cs.runs[count > 0 ? count - 1 : 0];
            if (count > 0 && last.ld == ld && last.k0 + last.count == k0 &&
                last.rows + last.count * ld == src) {
                last.count += n;
                return;
            }
            cs.runs[count++] = RowRun<T>{k0, n, src, ld};
        };
        for (int64_t t = 0; t < seq_len_; ++t) {
            // The step processed just before t in this direction.
            const bool first = d == 0 ? t == 0 : t == seq_len_ - 1;
            const int64_t t_prev = d == 0 ? t - 1 : t + 1;
            const int64_t n = rows.active[t];
            const int64_t n_prev = first ? 0 : std::min(n, rows.active[t_prev]);
            if (n_prev > 0)
                push(rows.offsets[t], n_prev, h_out + rows.offsets[t_prev] * out_width, out_width);
            push(rows.offsets[t] + n_prev, n - n_prev, cs.h_init + n_prev * hp, hp);
        }
        *cs.run_count = count;
    }

    // dh0 (columns hcols of sw = config.state_size()) / dc0 (own units of H) of cell c,
    // overwritten in the caller's (L*D, N, sw) / (L*D, N, H) host tensors, back in its row order.
    void write_state_grads(const BackwardCell<T>& c, const CellScratch<T>& cs, BlockRange own,
                           BlockRange hcols) const {
        const int64_t hidden = lay_.hidden, hp = lay_.hidden_padded, sw = config_.state_size();
        const int64_t u0 = own.begin * kUnitBlock, end = std::min(own.end * kUnitBlock, hidden);
        const int64_t h_end = std::min(hcols.end, sw);
        const BackwardArgs<T>& args = *c.args;
        for (int64_t r = 0; r < batch_; ++r) {
            const int64_t caller = c.layout->order[r];
            const int64_t dst = (c.cell * batch_ + caller) * hidden;
            const int64_t h_dst = (c.cell * batch_ + caller) * sw;
            if (!args.dh0.empty())
                for (int64_t u = hcols.begin; u < h_end; ++u)
                    args.dh0[h_dst + u] = cs.dh0[r * hp + u];
            if (!args.dc0.empty())
                for (int64_t u = u0; u < end; ++u) args.dc0[dst + u] = cs.dc_run[r * hp + u];
        }
    }

    // Weight and bias gradients of cell c, rows of the own blocks, ADDED into dparams (PyTorch
    // layout, host): dgates and the bias gradient come from the reserve, the partners from the
    // layer input and the h runs that make_h_runs built for this cell (needs a barrier after
    // it). With a projection also dW_hr (P, H) += sum over frames of dh^T h_raw, rows hcols of
    // it, from the reserve's dh and h_raw.
    void cell_weight_grads(const BackwardCell<T>& c, const CellScratch<T>& cs, const K& kern,
                           BlockRange own, BlockRange hcols) const {
        const int64_t frames = c.layout->frames(), hp = lay_.hidden_padded;
        const CellOffsets& p = c.p;
        T* grads = c.args->dparams.data();
        const RowRun<T> x_run{0, frames, c.in, c.ld_in};
        kern.weight_grads(plane(rs_.gates, c, lay_.gate_cols), &x_run, 1, cs.runs, *cs.run_count,
                          c.in_width, grads + p.weight_ih, grads + p.weight_hh, own);
        if (p.has_bias())
            kernels::cpu::add_bias_grads(rs_.dbias + c.cell * lay_.gate_cols, lay_, own,
                                         grads + p.bias_ih, grads + p.bias_hh);
        if (p.has_projection())
            kernels::cpu::add_projection_grads(plane(rs_.dh, c, config_.proj_size),
                                               plane(rs_.h_raw, c, hp), frames, config_.proj_size,
                                               lay_, hcols, grads + p.weight_hr);
    }

    const Config& config_;
    FusedLayout lay_;
    int64_t seq_len_;
    int64_t batch_;
    // Per lane (a direction running side by side has its own; cells_[1] is cells_[0] for a
    // unidirectional model): the scratch and the kernel set built on it.
    CellScratch<T> cells_[2];
    std::optional<K> kerns_[2];
    Reserve<T> rs_{};
    bool bf16_;                  // Precision::bf16: products' operands rounded (docs/precision.md)
    T* weights_bf16_ = nullptr;  // (param_count) bf16: each cell's weights rounded when it begins
};

}  // namespace fused_detail

// The sizes of a fused plan: the carving does not depend on the kernel set.
template <typename T>
using FusedSizing = fused_detail::FusedEngine<T, kernels::cpu::PortableFusedKernels<T>>;

// The plan of `fused`: the path (kernel set) chosen when it was made, the stack loop's sizes, and
// the loop on that path's engine.
class FusedPlan final : public Plan {
public:
    FusedPlan(const Variant& variant, const PlanRequest& r)
        : Plan(variant, r,
               stack_buffer_bytes<FusedSizing>(r.config, r.dtype, r.seq_len, r.batch, false,
                                               r.precision),
               stack_buffer_bytes<FusedSizing>(r.config, r.dtype, r.seq_len, r.batch, true,
                                               r.precision)),
          isa_(fused_isa_named(r.path)) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override {
        with_loop(a.x, [&](auto&& stack) { stack.forward(a); });
    }
    void run_forward(const ForwardArgs<double>& a) const override {
        loop<double, kernels::cpu::PortableFusedKernels<double>>(a.x).forward(a);
    }
    void run_backward(const BackwardArgs<float>& a) const override {
        with_loop(a.x, [&](auto&& stack) { stack.backward(a); });
    }
    void run_backward(const BackwardArgs<double>& a) const override {
        loop<double, kernels::cpu::PortableFusedKernels<double>>(a.x).backward(a);
    }

private:
    // x (T, N, I), host.
    template <typename T, typename K>
    StackLoop<T, fused_detail::FusedEngine<T, K>> loop(const TensorView<const T>& x) const {
        return StackLoop<T, fused_detail::FusedEngine<T, K>>(config(), x.size(0), x.size(1),
                                                             precision());
    }
    // Calls run(loop) with the fp32 stack loop on the plan's kernel set; x (T, N, I), host.
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
    // bf16 on every path: the engine rounds the operands where they enter the products (see the
    // top of this file), which the kernel sets then compute in fp32.
    std::optional<std::string> supports_precision(const Config&, DType, Precision) const override {
        return std::nullopt;
    }
    std::string describe_precision(Precision precision) const override {
        std::string path;
        try {
            path = default_path(DType::f32);
        } catch (const Error& e) {
            return std::string("cannot run: ") + e.what();
        }
        if (precision == Precision::full) return describe_path(path);
        return "operands rounded to bf16 and widened to fp32 for the " + path +
               " kernels: the rounding of a bf16 path, not its speed";
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
