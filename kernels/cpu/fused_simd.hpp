#pragma once

// The fused variant's SIMD kernel set, written once with Google Highway
// (kernels/cpu/fused_simd.cpp, compiled into lstm_cpu for every instruction set Highway targets:
// AVX-512, AVX2, SSE4 and an emulated 128-bit set on x86-64; NEON on ARM). The avx512, avx2 and
// neon paths of lstm/variants/fused.hpp are its AVX3, AVX2 and NEON targets. Weights packed once
// per call into 16-float strips (kernels/cpu/fused_cell.hpp), register-blocked micro-kernels with
// the LSTM gate math in the epilogue, and the reserve layout of kernels/cpu/fused_cell.hpp, so a
// forward on one kernel set and a backward on another agree.
//
// Micro-tiles are chosen per target from its vector registers (N floats per vector, a 16-float
// strip is 16/N vectors):
//  - 16 registers (AVX2, SSE4): forward 3 rows x 4 gate vectors (N units of one block), input
//    projection 3 rows x 4 consecutive vectors of a block's gate columns (whole cache lines),
//    backward, dh0, input and weight gradients 6 rows x 2 vectors;
//  - 32 registers (AVX-512, ARM64 NEON): 6 rows x 4 vectors for all of them.
// Every output element is summed over k in order, so results do not depend on how rows or blocks
// are split among threads, and an inference forward gives the training forward's bits.
//
// This header does not include Highway: the class calls through a table of the chosen target's
// functions, picked when it is constructed (before the variant's team starts), never later.

#include <cstdint>

#include "kernels/cpu/fused_cell.hpp"

namespace lstm::kernels::cpu {

// One Highway target's functions (defined in fused_simd.cpp).
struct SimdFusedOps;

// Highway's bits (HWY_AVX3, HWY_AVX2, ...) of the targets this kernel set was compiled for that
// this CPU runs, after any restriction by restrict_simd_to_avx2() (kernels/cpu/simd.hpp).
int64_t simd_fused_targets();

// Highway's bit for its AVX2 target (AVX2 + FMA + BMI2 + F16C), 0 in builds without it (not
// x86-64, or lstm_cpu compiled for AVX-512 as its baseline).
int64_t simd_fused_avx2_target();

// Highway's bit for its AVX-512 target (F, BW, DQ and VL): AVX3, or AVX3_DL where lstm_cpu was
// compiled for that as its baseline (then no AVX3 is compiled); 0 in builds without either.
int64_t simd_fused_avx512_target();

// Highway's bit for its NEON target (ARM's Advanced SIMD, which every 64-bit ARM processor has),
// 0 in builds without it (not ARM).
int64_t simd_fused_neon_target();

// Whether the AVX2 target is compiled and this CPU runs it, whatever restriction is in place.
bool simd_fused_runs_avx2();

// Highway's name of a target ("AVX3", "AVX2", "SSE4", "EMU128", ...).
const char* simd_fused_target_name(int64_t target);

// Floats per vector of a target compiled into this kernel set (0 for one that is not).
int64_t simd_fused_lanes(int64_t target);

// The vector activations of `target` (which must be in simd_fused_targets()) over x (count),
// written to sigmoid_out and tanh_out (count each, overwritten); for accuracy tests.
void simd_fused_activations(int64_t target, const float* x, int64_t count, float* sigmoid_out,
                            float* tanh_out);

// The vector cell of `target` on 16 units: pre (4, 16) pre-activations i, f, g, o; c_prev, dh,
// dc (16 each); out (11, 16) overwritten with i, f, g, o, c, h (forward) and di, df, dg, do,
// dc_prev (backward, from dh and dc reaching h_t and c_t); for accuracy tests.
void simd_fused_cell(int64_t target, const float* pre, const float* c_prev, const float* dh,
                     const float* dc, float* out);

// The Highway kernel set (float). Same contract as PortableFusedKernels, member by member: every
// member is called by every thread of the variant's team with the blocks (`own`) or rows it owns
// and never synchronises.
class SimdFusedKernels {
public:
    // Runs the best target in simd_fused_targets().
    SimdFusedKernels(const FusedLayout& lay, const FusedBuffers<float>& buf);
    // Runs exactly `target`, which the caller checked is in simd_fused_targets() (one that is
    // not compiled falls back to the best target).
    SimdFusedKernels(const FusedLayout& lay, const FusedBuffers<float>& buf, int64_t target);

    // The Highway target this set runs.
    int64_t target() const;

    // Packs the forward operands of one cell, own blocks: w_ih (4H, in), w_hh (4H, R) row-major
    // into strips (K, 16) per (block, gate), and b_ih + b_hh (4H each) interleaved. Overwrites.
    void pack_forward(const float* w_ih, int64_t in, const float* w_hh, const float* b_ih,
                      const float* b_hh, BlockRange own) const;

    // gates (rows, G), own columns, overwritten <- x (rows, ldx; in features) W_ih^T + biases.
    // whole_sequence: written with streaming stores (read back only much later).
    void input_projection(const float* x, int64_t ldx, int64_t rows, int64_t in, float* gates,
                          BlockRange own, ProjectionTarget target) const;

    // One forward segment, own blocks: the recurrent GEMM on top of the input projection in
    // s.gates, then activations (over s.gates), c_t and h_t (units < H) from the registers.
    void forward_step(const ForwardSegment<float>& s, BlockRange own) const;

    // Packs the backward operands of one cell, the rows of the own blocks' gate columns: w_hh
    // (4H, H) and w_ih (4H, in) as strips (G, 16) over their columns. Overwrites; the caller puts
    // a barrier before the first backward_step. w_hh null (a projection) packs w_ih alone.
    void pack_backward(const float* w_ih, int64_t in, const float* w_hh, BlockRange own) const;

    // One backward segment, own blocks: dh = dgates_next W_hh (or dh_carry), then the gate
    // gradients over s.gates, dc over s.dc and the bias gradient ADDED, from the registers.
    void backward_step(const BackwardSegment<float>& s, BlockRange own) const;

    // dh0 (rows, Hp) own units, overwritten <- dgates (rows, G) W_hh.
    void backward_dh0(int64_t rows, const float* dgates, float* dh0, BlockRange own) const;

    // Weight gradients of one cell, the gate rows of the own blocks, ADDED into dw_ih (4H, in)
    // and dw_hh (4H, R): dG^T X and dG^T H_prev over the compact rows of dgates (S, G), the
    // partners given as runs (see PortableFusedKernels::weight_grads).
    void weight_grads(const float* dgates, const RowRun<float>* x_runs, int64_t x_run_count,
                      const RowRun<float>* h_runs, int64_t h_run_count, int64_t in, float* dw_ih,
                      float* dw_hh, BlockRange own) const;

    // d_in rows [rows.begin, rows.end) of (S, ld_in), in features: overwritten (accumulate
    // false) or ADDED (true) <- dgates (S, G) W_ih.
    void input_grads(const float* dgates, BlockRange rows, int64_t in, float* d_in, int64_t ld_in,
                     bool accumulate) const;

private:
    FusedLayout lay_;
    FusedBuffers<float> buf_;
    const SimdFusedOps* ops_;
};

}  // namespace lstm::kernels::cpu
