#pragma once

// AVX-512 kernels of the fused variant: weight packing, a register-blocked GEMM micro-kernel,
// and the fused LSTM element-wise work in the micro-kernel's epilogue, so a step's gates go from
// accumulator registers to activations, c_t and h_t without a trip through memory.
//
// Operates on the layout of kernels/cpu/fused_cell.hpp (interleaved gate columns, 16-unit
// blocks, compact sorted rows) and implements the same kernel-set interface as
// PortableFusedKernels, so lstm/variants/fused.hpp runs either with the same orchestration.
//
// The code is compiled for AVX-512F + FMA through a target pragma whatever -march says, and is
// only called after kernels/cpu/cpu_features.hpp found the instructions at run time. Where the
// compiler cannot do that, Avx512FusedKernels is the portable kernel set (never selected).
//
// Packed layout: a "strip" is a K x 16 panel of B, row k at strip + 16 k (64 bytes). Forward
// weights: strip blk * 4 + gate holds W[gate * H + 16 blk + u][k] (K = in or H), so the four
// strips of a block give the micro-kernel one block's i, f, g, o at once. Backward weights:
// strip q holds W[row of gate column c][16 q + u] for every gate column c (K = G).
//
// Micro-kernel: MR <= 6 rows x NV <= 4 strips of accumulators (24 zmm), one broadcast of A per
// row and one load per strip for each k. Every output element is summed over k in order, so
// results do not depend on how rows or blocks are split among threads.

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/fused_cell.hpp"

#if LSTM_HAVE_AVX512_KERNELS
// GCC 12's AVX-512 intrinsics initialise their "undefined" vectors from themselves, which its
// flow analysis reports as -W(maybe-)uninitialized wherever they are inlined (GCC bug 105593,
// fixed in GCC 13); the state at the intrinsics' own lines is what counts, so the include is
// wrapped (as kernels/cpu/gemm.hpp does for Eigen).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma,avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma,avx2")
#endif

namespace lstm::kernels::cpu {

namespace avx512 {

using Vec = __m512;

// On a micro-tile's entry point: inlined into a large caller, GCC 12 allocated the accumulators
// worse and the backward step ran 1.7x slower (measured); a call per tile costs nothing next to
// the tile's thousands of FMAs.
#define LSTM_TILE_NOINLINE __attribute__((noinline))

// Rows of accumulators per micro-tile: 6 x 4 strips = 24 of the 32 zmm registers, leaving room
// for the 4 B vectors and a broadcast.
constexpr int kTileRows = 6;
static_assert(kTileRows == kGradTileCols, "weight-gradient tiles are packed at the tile height");
// Strips per micro-tile (64 output columns).
constexpr int kTileStrips = 4;
static_assert(kTileStrips * kUnitBlock == kGradPanelCols,
              "partner panels are packed per micro-tile");
// Rows per chunk of the input projection: the chunk of x stays in L2 across the thread's blocks.
constexpr int64_t kProjectionRows = 240;
// Rows per chunk of the input-gradient GEMM: the chunk of dgates stays in L2 across panels.
constexpr int64_t kInputGradRows = 96;

// ---- vector math: the functions of kernels/common/gates.hpp, 16 lanes at a time ------------

inline Vec splat(float v) { return _mm512_set1_ps(v); }

// e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact), e^r by its
// degree-7 Taylor polynomial (truncation below 1e-8 relative), then 2^n by scalef, which
// overflows to +inf and underflows to 0 the way expf does. NaN propagates.
inline Vec exp_ps(Vec x) {
    x = _mm512_min_ps(splat(89.0f), _mm512_max_ps(splat(-104.0f), x));
    const Vec n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(1.44269504f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    Vec r = _mm512_fnmadd_ps(n, splat(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
    Vec p = splat(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, splat(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, splat(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, splat(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, splat(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, splat(0.5f));
    p = _mm512_fmadd_ps(p, r, splat(1.0f));
    p = _mm512_fmadd_ps(p, r, splat(1.0f));
    return _mm512_scalef_ps(p, n);
}

// 1 / (1 + e^-x): exactly 0 and 1 at the extremes, as gates.hpp's sigmoid.
inline Vec sigmoid_ps(Vec x) {
    return _mm512_div_ps(splat(1.0f),
                         _mm512_add_ps(splat(1.0f), exp_ps(_mm512_sub_ps(splat(0.0f), x))));
}

// tanh x = sign(x) e / (e + 2) with e = expm1(2|x|). expm1 keeps its relative accuracy near 0
// (no 1 - 2/(e^2x + 1) cancellation): 2|x| = n ln2 + r, expm1(r) by its degree-8 Taylor
// polynomial, expm1 = 2^n expm1(r) + (2^n - 1). |x| is capped at 9, where tanh is 1 in float.
inline Vec tanh_ps(Vec x) {
    const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    const __m512i xi = _mm512_castps_si512(x);
    const Vec ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, xi));
    const Vec y = _mm512_add_ps(_mm512_min_ps(splat(9.0f), ax), _mm512_min_ps(splat(9.0f), ax));
    const Vec n = _mm512_roundscale_ps(_mm512_mul_ps(y, splat(1.44269504f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    Vec r = _mm512_fnmadd_ps(n, splat(0.693359375f), y);
    r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
    Vec q = splat(1.0f / 40320);
    q = _mm512_fmadd_ps(q, r, splat(1.0f / 5040));
    q = _mm512_fmadd_ps(q, r, splat(1.0f / 720));
    q = _mm512_fmadd_ps(q, r, splat(1.0f / 120));
    q = _mm512_fmadd_ps(q, r, splat(1.0f / 24));
    q = _mm512_fmadd_ps(q, r, splat(1.0f / 6));
    q = _mm512_fmadd_ps(q, r, splat(0.5f));
    q = _mm512_fmadd_ps(q, r, splat(1.0f));
    q = _mm512_mul_ps(q, r);
    const Vec two_n = _mm512_scalef_ps(splat(1.0f), n);
    const Vec e = _mm512_add_ps(_mm512_scalef_ps(q, n), _mm512_sub_ps(two_n, splat(1.0f)));
    const Vec t = _mm512_div_ps(e, _mm512_add_ps(e, splat(2.0f)));
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(sign_bit, xi)));
}

struct VecGates {
    Vec i, f, g, o;
};

// activate() of gates.hpp.
inline VecGates activate(Vec pre_i, Vec pre_f, Vec pre_g, Vec pre_o) {
    return {sigmoid_ps(pre_i), sigmoid_ps(pre_f), tanh_ps(pre_g), sigmoid_ps(pre_o)};
}

// cell_state(): f c_{t-1} + i g.
inline Vec cell_state(const VecGates& a, Vec c_prev) {
    return _mm512_fmadd_ps(a.f, c_prev, _mm512_mul_ps(a.i, a.g));
}

// hidden_state(): o tanh(c).
inline Vec hidden_state(const VecGates& a, Vec c) { return _mm512_mul_ps(a.o, tanh_ps(c)); }

struct VecCellGrads {
    Vec di, df, dg, d_o, dc_prev;
};

// cell_backward() of gates.hpp, operation for operation.
inline VecCellGrads cell_backward(const VecGates& a, Vec c_prev, Vec c, Vec dh, Vec dc) {
    const Vec one = splat(1.0f);
    const Vec tanh_c = tanh_ps(c);
    auto sig_grad = [&](Vec s) { return _mm512_mul_ps(s, _mm512_sub_ps(one, s)); };
    const Vec tanh_grad_c = _mm512_fnmadd_ps(tanh_c, tanh_c, one);
    const Vec dc_total = _mm512_add_ps(dc, _mm512_mul_ps(_mm512_mul_ps(dh, a.o), tanh_grad_c));
    VecCellGrads out;
    out.d_o = _mm512_mul_ps(_mm512_mul_ps(dh, tanh_c), sig_grad(a.o));
    out.di = _mm512_mul_ps(_mm512_mul_ps(dc_total, a.g), sig_grad(a.i));
    out.df = _mm512_mul_ps(_mm512_mul_ps(dc_total, c_prev), sig_grad(a.f));
    out.dg = _mm512_mul_ps(_mm512_mul_ps(dc_total, a.i), _mm512_fnmadd_ps(a.g, a.g, one));
    out.dc_prev = _mm512_mul_ps(dc_total, a.f);
    return out;
}

// Lanes of `count` valid elements (count >= 16: all).
inline __mmask16 lanes(int64_t count) {
    return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                       : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1u);
}

// Asks for `lines` cache lines from each of `rows` rows (row i at p + i * ld) ahead of use: the
// next tile's reserve and gradient rows come from L3 or memory, and fetching them while the
// current tile computes hides that latency.
// They go to L2 (T1): the tile's weight panel streams through L1 in the meantime.
inline void prefetch_rows(const float* p, int64_t ld, int64_t rows, int lines) {
    for (int64_t i = 0; i < rows; ++i)
        for (int q = 0; q < lines; ++q)
            _mm_prefetch(reinterpret_cast<const char*>(p + i * ld + q * kUnitBlock), _MM_HINT_T1);
}

// ---- operand accessors of the micro-kernel ------------------------------------------------

// A row-major: element (i, k) at p[i * ld + k].
struct RowsA {
    const float* p;
    int64_t ld;
    float at(int i, int64_t k) const { return p[i * ld + k]; }
};

// A stored transposed: element (i, k) at p[k * ld + i].
struct ColsA {
    const float* p;
    int64_t ld;
    float at(int i, int64_t k) const { return p[k * ld + i]; }
};

// A packed as tiles of kGradTileCols rows: element (i, k) at p[k * kGradTileCols + i].
struct PackedA {
    const float* p;
    float at(int i, int64_t k) const { return p[k * kGradTileCols + i]; }
};

// B as packed strips: vector v of row k at p + v * stride + 16 k.
struct StripsB {
    const float* p;
    int64_t stride;
    template <int NV>
    Vec load(int v, int64_t k) const {
        return _mm512_loadu_ps(p + v * stride + k * kUnitBlock);
    }
};

// B packed as one panel of NV interleaved strips (64-byte aligned): vector v of row k at
// p + (k NV + v) 16.
struct PanelB {
    const float* p;
    template <int NV>
    Vec load(int v, int64_t k) const {
        return _mm512_load_ps(p + (k * NV + v) * kUnitBlock);
    }
};

// acc (MR x NV vectors) += sum over k < depth of A(i, k) * B(k, v).
template <int MR, int NV, typename A, typename B>
inline void accumulate(int64_t depth, const A& a, const B& b, Vec (&acc)[MR][NV]) {
    for (int64_t k = 0; k < depth; ++k) {
        Vec bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = b.template load<NV>(v, k);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const Vec av = _mm512_set1_ps(a.at(i, k));
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
        }
    }
}

template <int MR, int NV>
inline void zero(Vec (&acc)[MR][NV]) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
}

// Calls f.template tile<MR>(row0) over rows [0, rows) in tiles of kTileRows; the last tile gets
// the remainder as its compile-time height.
template <typename F>
inline void for_each_row_tile(int64_t rows, const F& f) {
    int64_t r = 0;
    for (; r + kTileRows <= rows; r += kTileRows) f.template tile<kTileRows>(r);
    switch (rows - r) {
        case 5:
            f.template tile<5>(r);
            break;
        case 4:
            f.template tile<4>(r);
            break;
        case 3:
            f.template tile<3>(r);
            break;
        case 2:
            f.template tile<2>(r);
            break;
        case 1:
            f.template tile<1>(r);
            break;
        default:
            break;
    }
}

// Calls f.template panel<NV>(strip0) over strips [begin, end) in groups of kTileStrips.
template <typename F>
inline void for_each_panel(int64_t begin, int64_t end, const F& f) {
    int64_t s = begin;
    for (; s + kTileStrips <= end; s += kTileStrips) f.template panel<kTileStrips>(s);
    switch (end - s) {
        case 3:
            f.template panel<3>(s);
            break;
        case 2:
            f.template panel<2>(s);
            break;
        case 1:
            f.template panel<1>(s);
            break;
        default:
            break;
    }
}

}  // namespace avx512

// The AVX-512 kernel set (float). Same contract as PortableFusedKernels, member by member.
class Avx512FusedKernels {
public:
    Avx512FusedKernels(const FusedLayout& lay, const FusedBuffers<float>& buf)
        : lay_(lay), buf_(buf) {}

    // Packs the forward operands of one cell, own blocks: w_ih (4H, in), w_hh (4H, R), biases.
    void pack_forward(const float* w_ih, int64_t in, const float* w_hh, const float* b_ih,
                      const float* b_hh, BlockRange own) const {
        pack_gate_strips(w_ih, in, lay_, own, buf_.w_ih_fwd);
        pack_gate_strips(w_hh, lay_.recurrent, lay_, own, buf_.w_hh_fwd);
        pack_bias_interleaved(b_ih, b_hh, lay_, own, buf_.bias);
    }

    // gates (rows, G), own columns, overwritten <- x (rows, ldx; in features) W_ih^T + biases.
    // For a whole sequence the rows go out with streaming stores: they are read back long after
    // the cache has turned over, so fetching their lines for ownership first only costs (the
    // training projection measured 7% faster at the CE-short shape on a Xeon). The fence orders
    // those stores before the barrier that hands the rows to the time loop.
    void input_projection(const float* x, int64_t ldx, int64_t rows, int64_t in, float* gates,
                          BlockRange own, ProjectionTarget target) const {
        const bool stream = target == ProjectionTarget::whole_sequence;
        for (int64_t r0 = 0; r0 < rows; r0 += avx512::kProjectionRows) {
            const int64_t chunk = std::min(avx512::kProjectionRows, rows - r0);
            for (int64_t blk = own.begin; blk < own.end; ++blk) {
                const ProjectionTile t{
                    this, x + r0 * ldx, ldx, in, blk, gates + r0 * lay_.gate_cols, stream};
                avx512::for_each_row_tile(chunk, t);
            }
        }
        if (stream) _mm_sfence();
    }

    // One forward segment, own blocks: recurrent GEMM on top of the input projection, then the
    // gate math in the epilogue.
    void forward_step(const ForwardSegment<float>& s, BlockRange own) const {
        // The per-step GEMMs run over the whole depth at once: their 4-strip weight panels (80 KiB
        // at H = 320) stream from L2 fast enough, and K-chunks through L1 measured 3% slower.
        const int64_t gc = lay_.gate_cols, first = std::min<int64_t>(avx512::kTileRows, s.rows);
        for (int64_t blk = own.begin; blk < own.end; ++blk) {
            // Each tile prefetches the next one's operands; the first tile of the next block is
            // fetched here, while this block runs.
            if (blk + 1 < own.end) {
                const int64_t next = blk + 1;
                avx512::prefetch_rows(s.gates + next * 4 * kUnitBlock, gc, first, 4);
                avx512::prefetch_rows(s.c_prev + next * kUnitBlock, s.ld_c_prev, first, 1);
            }
            avx512::for_each_row_tile(s.rows, ForwardTile{this, &s, blk});
        }
    }

    // Packs the backward operands of one cell, rows of the own blocks' gate columns; the caller
    // puts a barrier before the first backward_step. w_hh null (a projection) packs w_ih alone.
    void pack_backward(const float* w_ih, int64_t in, const float* w_hh, BlockRange own) const {
        if (w_hh != nullptr) pack_column_strips(w_hh, lay_.hidden, lay_, own, buf_.w_hh_bwd);
        pack_column_strips(w_ih, in, lay_, own, buf_.w_ih_bwd);
    }

    // One backward segment, own blocks: dh = dgates_next W_hh (or dh_carry), then the gate
    // gradients in the epilogue.
    void backward_step(const BackwardSegment<float>& s, BlockRange own) const {
        avx512::for_each_panel(own.begin, own.end, BackwardPanel{this, &s, nullptr, 0, nullptr});
    }

    // dh0 (rows, Hp) own units, overwritten <- dgates (rows, G) W_hh.
    void backward_dh0(int64_t rows, const float* dgates, float* dh0, BlockRange own) const {
        avx512::for_each_panel(own.begin, own.end, BackwardPanel{this, nullptr, dgates, rows, dh0});
    }

    // Weight gradients of one cell, the gate rows of the own blocks, ADDED into dw_ih (4H, in)
    // and dw_hh (4H, R); see PortableFusedKernels::weight_grads.
    void weight_grads(const float* dgates, const RowRun<float>* x_runs, int64_t x_run_count,
                      const RowRun<float>* h_runs, int64_t h_run_count, int64_t in, float* dw_ih,
                      float* dw_hh, BlockRange own) const {
        if (own.count() == 0) return;
        weight_grad_chunks(dgates, x_runs, x_run_count, h_runs, h_run_count, in, dw_ih, dw_hh, own);
    }

    // d_in rows [rows.begin, rows.end) of (S, ld_in), in features: overwritten (accumulate
    // false) or ADDED (true) <- dgates (S, G) W_ih.
    void input_grads(const float* dgates, BlockRange rows, int64_t in, float* d_in, int64_t ld_in,
                     bool accumulate) const {
        const int64_t strips = (in + kUnitBlock - 1) / kUnitBlock;
        for (int64_t r0 = rows.begin; r0 < rows.end; r0 += avx512::kInputGradRows) {
            const int64_t chunk = std::min(avx512::kInputGradRows, rows.end - r0);
            avx512::for_each_panel(0, strips,
                                   InputGradPanel{this, dgates + r0 * lay_.gate_cols, chunk, in,
                                                  d_in + r0 * ld_in, ld_in, accumulate});
        }
    }

private:
    using Vec = avx512::Vec;

    // Input projection of one block over rows [0, rows) of a chunk.
    struct ProjectionTile {
        const Avx512FusedKernels* k;
        const float* x;
        int64_t ldx, in, blk;
        float* gates;  // 64-byte aligned rows (G floats each)
        bool stream;
        template <int MR>
        LSTM_TILE_NOINLINE void tile(int64_t r0) const {
            const int64_t gc = k->lay_.gate_cols, col = blk * 4 * kUnitBlock;
            Vec acc[MR][4];
#pragma GCC unroll 4
            for (int g = 0; g < 4; ++g) {
                const Vec b = _mm512_loadu_ps(k->buf_.bias + col + g * kUnitBlock);
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i) acc[i][g] = b;
            }
            avx512::accumulate<MR, 4>(
                in, avx512::RowsA{x + r0 * ldx, ldx},
                avx512::StripsB{k->buf_.w_ih_fwd + blk * 4 * in * kUnitBlock, in * kUnitBlock},
                acc);
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                for (int g = 0; g < 4; ++g) {
                    float* dst = gates + (r0 + i) * gc + col + g * kUnitBlock;
                    if (stream)
                        _mm512_stream_ps(dst, acc[i][g]);
                    else
                        _mm512_storeu_ps(dst, acc[i][g]);
                }
        }
    };

    // One forward row tile of one block: acc = input projection + h_{t-1} W_hh^T, then
    // activations, c_t = f c_{t-1} + i g, h_t = o tanh(c_t), all from registers.
    struct ForwardTile {
        const Avx512FusedKernels* k;
        const ForwardSegment<float>* s;
        int64_t blk;
        template <int MR>
        LSTM_TILE_NOINLINE void tile(int64_t r0) const {
            const int64_t gc = k->lay_.gate_cols, hidden = k->lay_.hidden;
            const int64_t depth = k->lay_.recurrent;
            const int64_t col = blk * 4 * kUnitBlock, unit = blk * kUnitBlock;
            Vec acc[MR][4];
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                for (int g = 0; g < 4; ++g)
                    acc[i][g] = _mm512_loadu_ps(s->gates + (r0 + i) * gc + col + g * kUnitBlock);
            const int64_t next = std::min<int64_t>(avx512::kTileRows, s->rows - r0 - MR);
            if (next > 0) {
                avx512::prefetch_rows(s->gates + (r0 + MR) * gc + col, gc, next, 4);
                avx512::prefetch_rows(s->c_prev + (r0 + MR) * s->ld_c_prev + unit, s->ld_c_prev,
                                      next, 1);
            }
            avx512::accumulate<MR, 4>(
                depth, avx512::RowsA{s->h_prev + r0 * s->ld_h_prev, s->ld_h_prev},
                avx512::StripsB{k->buf_.w_hh_fwd + blk * 4 * depth * kUnitBlock,
                                depth * kUnitBlock},
                acc);
            const __mmask16 valid = avx512::lanes(hidden - unit);
            if (valid != avx512::lanes(kUnitBlock)) {  // padded units: see the layout notes
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                    for (int g = 0; g < 4; ++g) acc[i][g] = _mm512_maskz_mov_ps(valid, acc[i][g]);
            }
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i) {
                const int64_t r = r0 + i;
                const avx512::VecGates a =
                    avx512::activate(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
                float* g = s->gates + r * gc + col;
                _mm512_storeu_ps(g, a.i);
                _mm512_storeu_ps(g + kUnitBlock, a.f);
                _mm512_storeu_ps(g + 2 * kUnitBlock, a.g);
                _mm512_storeu_ps(g + 3 * kUnitBlock, a.o);
                const Vec c_prev = _mm512_loadu_ps(s->c_prev + r * s->ld_c_prev + unit);
                const Vec c = avx512::cell_state(a, c_prev);
                _mm512_storeu_ps(s->c + r * s->ld_c + unit, c);
                _mm512_mask_storeu_ps(s->h + r * s->ld_h + unit, valid, avx512::hidden_state(a, c));
            }
        }
    };

    // Backward over one panel of NV unit blocks: dh = dgates_next W_hh for the panel's units,
    // then either the fused gate gradients (seg set) or a plain store into dh0 (seg null).
    struct BackwardPanel {
        const Avx512FusedKernels* k;
        const BackwardSegment<float>* seg;
        const float* dgates;  // dh0 mode: (rows, G)
        int64_t rows;         // dh0 mode
        float* dh0;           // dh0 mode: (rows, Hp)
        template <int NV>
        void panel(int64_t blk0) const {
            avx512::for_each_row_tile(seg ? seg->rows : rows, Tile<NV>{this, blk0});
        }
        template <int NV>
        struct Tile {
            const BackwardPanel* p;
            int64_t blk0;
            template <int MR>
            void tile(int64_t r0) const {
                p->template run<MR, NV>(r0, blk0);
            }
        };
        template <int MR, int NV>
        LSTM_TILE_NOINLINE void run(int64_t r0, int64_t blk0) const {
            const int64_t gc = k->lay_.gate_cols, hp = k->lay_.hidden_padded;
            const float* dg = seg ? seg->dgates_next : dgates;
            Vec acc[MR][NV];
            if (seg) {
                // This tile's epilogue operands, fetched while its GEMM runs.
                const int64_t unit = blk0 * kUnitBlock;
                avx512::prefetch_rows(seg->gates + r0 * gc + 4 * unit, gc, MR, 4 * NV);
                avx512::prefetch_rows(seg->c + r0 * hp + unit, hp, MR, NV);
                avx512::prefetch_rows(seg->c_prev + r0 * hp + unit, hp, MR, NV);
                avx512::prefetch_rows(seg->dy + r0 * seg->ld_dy + unit, seg->ld_dy, MR, NV);
            }
            if (dg) {
                avx512::zero(acc);
                avx512::accumulate<MR, NV>(
                    gc, avx512::RowsA{dg + r0 * gc, gc},
                    avx512::StripsB{k->buf_.w_hh_bwd + blk0 * gc * kUnitBlock, gc * kUnitBlock},
                    acc);
            } else {
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v)
                        acc[i][v] = _mm512_loadu_ps(seg->dh_carry + (r0 + i) * hp +
                                                    (blk0 + v) * kUnitBlock);
            }
            if (!seg) {
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v)
                        _mm512_storeu_ps(dh0 + (r0 + i) * hp + (blk0 + v) * kUnitBlock, acc[i][v]);
                return;
            }
            // Block by block, so the block's bias gradient stays in registers across the rows
            // (added in row order, as a row-at-a-time update would).
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) {
                float* bg = seg->bias_grad + (blk0 + v) * 4 * kUnitBlock;
                Vec bias[4];
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q) bias[q] = _mm512_loadu_ps(bg + q * kUnitBlock);
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i) cell_grads(r0 + i, blk0 + v, acc[i][v], bias);
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q) _mm512_storeu_ps(bg + q * kUnitBlock, bias[q]);
            }
        }
        // Gate gradients of row r, block blk, from the recurrent part of dh; adds them to bias.
        void cell_grads(int64_t r, int64_t blk, Vec dh_carry, Vec (&bias)[4]) const {
            const int64_t gc = k->lay_.gate_cols, hp = k->lay_.hidden_padded;
            const int64_t unit = blk * kUnitBlock, col = blk * 4 * kUnitBlock;
            const Vec dy = _mm512_maskz_loadu_ps(avx512::lanes(k->lay_.hidden - unit),
                                                 seg->dy + r * seg->ld_dy + unit);
            float* g = seg->gates + r * gc + col;
            const avx512::VecGates a{_mm512_loadu_ps(g), _mm512_loadu_ps(g + kUnitBlock),
                                     _mm512_loadu_ps(g + 2 * kUnitBlock),
                                     _mm512_loadu_ps(g + 3 * kUnitBlock)};
            float* dc = seg->dc + r * hp + unit;
            const avx512::VecCellGrads d =
                avx512::cell_backward(a, _mm512_loadu_ps(seg->c_prev + r * hp + unit),
                                      _mm512_loadu_ps(seg->c + r * hp + unit),
                                      _mm512_add_ps(dh_carry, dy), _mm512_loadu_ps(dc));
            _mm512_storeu_ps(g, d.di);
            _mm512_storeu_ps(g + kUnitBlock, d.df);
            _mm512_storeu_ps(g + 2 * kUnitBlock, d.dg);
            _mm512_storeu_ps(g + 3 * kUnitBlock, d.d_o);
            _mm512_storeu_ps(dc, d.dc_prev);
            bias[0] = _mm512_add_ps(bias[0], d.di);
            bias[1] = _mm512_add_ps(bias[1], d.df);
            bias[2] = _mm512_add_ps(bias[2], d.dg);
            bias[3] = _mm512_add_ps(bias[3], d.d_o);
        }
    };

    // d_in (rows, ld) (+)= dgates (rows, G) W_ih over one panel of NV feature strips.
    struct InputGradPanel {
        const Avx512FusedKernels* k;
        const float* dgates;
        int64_t rows, in;
        float* d_in;
        int64_t ld;
        bool add;
        template <int NV>
        void panel(int64_t q0) const {
            avx512::for_each_row_tile(rows, Tile<NV>{this, q0});
        }
        template <int NV>
        struct Tile {
            const InputGradPanel* p;
            int64_t q0;
            template <int MR>
            void tile(int64_t r0) const {
                p->template run<MR, NV>(r0, q0);
            }
        };
        template <int MR, int NV>
        LSTM_TILE_NOINLINE void run(int64_t r0, int64_t q0) const {
            const int64_t gc = k->lay_.gate_cols;
            Vec acc[MR][NV];
            __mmask16 mask[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) mask[v] = avx512::lanes(in - (q0 + v) * kUnitBlock);
            if (add) {
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v)
                        acc[i][v] = _mm512_maskz_loadu_ps(
                            mask[v], d_in + (r0 + i) * ld + (q0 + v) * kUnitBlock);
            } else {
                avx512::zero(acc);
            }
            avx512::accumulate<MR, NV>(
                gc, avx512::RowsA{dgates + r0 * gc, gc},
                avx512::StripsB{k->buf_.w_ih_bwd + q0 * gc * kUnitBlock, gc * kUnitBlock}, acc);
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v)
                    _mm512_mask_storeu_ps(d_in + (r0 + i) * ld + (q0 + v) * kUnitBlock, mask[v],
                                          acc[i][v]);
        }
    };

    // Floats from one packed dgates tile to the next: kGradChunk x 6 floats are 3 KiB, 48 lines,
    // so every 4th tile started in the same L1 set and the packing's row-by-row writes into all
    // of a thread's tiles (107 at H 320, 2 threads) crowded 4 sets; a line of padding after each
    // tile spreads them (see kGradTilePad).
    static constexpr int64_t kTileStride = kGradChunk * kGradTileCols + kGradTilePad;

    // Partner rows of one K-chunk: `len` rows from chunk row `k_off`, row j at b + j * ld.
    struct ChunkSegment {
        int64_t k_off, len;
        const float* b;
        int64_t ld;
    };

    // dw (4H, width) += dG^T B for one K-chunk, the gate rows of the own blocks. C rows are gate
    // columns (a packed tile of kGradTileCols at a time), C columns the partner's features (NV
    // strips at a time). Each panel of partner columns is packed first: its rows sit ld apart
    // (512 bytes for a 128-wide input), so read in place they fall into a few L1 sets and are
    // evicted between tiles; packed, the panel stays in L1 across all of them.
    struct GradChunk {
        const Avx512FusedKernels* k;
        const float* a_pack;  // the chunk's dgates, own columns, packed in tiles
        const ChunkSegment* segs;
        int64_t seg_count, len, width, c_begin, c_count;
        float* dw;
        float* b_pack;  // (len, 16 NV) scratch, 64-byte aligned
        template <int NV>
        void panel(int64_t strip0) const {
            const int64_t col0 = strip0 * kUnitBlock;
            __mmask16 mask[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) mask[v] = avx512::lanes(width - col0 - v * kUnitBlock);
            // Columns past `width` are packed as zeros; they only feed output lanes never stored.
            for (int64_t s = 0; s < seg_count; ++s)
                for (int64_t j = 0; j < segs[s].len; ++j) {
                    const float* src = segs[s].b + j * segs[s].ld + col0;
                    float* dst = b_pack + (segs[s].k_off + j) * NV * kUnitBlock;
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v)
                        _mm512_store_ps(dst + v * kUnitBlock,
                                        _mm512_maskz_loadu_ps(mask[v], src + v * kUnitBlock));
                }
            avx512::for_each_row_tile(c_count, Tile<NV>{this, col0});
        }
        template <int NV>
        struct Tile {
            const GradChunk* g;
            int64_t col0;
            template <int MR>
            void tile(int64_t r) const {
                g->template run<MR, NV>(r, col0);
            }
        };
        template <int MR, int NV>
        LSTM_TILE_NOINLINE void run(int64_t r, int64_t col0) const {
            const int64_t hidden = k->lay_.hidden;
            // Rows of padded units have no destination: a dummy pointer and an empty mask keep
            // the tile branch-free (masked-off lanes are neither read nor written).
            float* rows[MR];
            __mmask16 row_mask[MR];
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i) {
                const int64_t c = c_begin + r + i, blk = c / (4 * kUnitBlock);
                const int64_t gate = c / kUnitBlock % 4, unit = blk * kUnitBlock + c % kUnitBlock;
                const bool valid = unit < hidden;
                rows[i] = valid ? dw + (gate * hidden + unit) * width + col0 : dw;
                row_mask[i] = valid ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(0);
            }
            __mmask16 mask[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) mask[v] = avx512::lanes(width - col0 - v * kUnitBlock);
            // The chunk's products are summed from zero and only then added to dw: accumulating
            // onto dw made each element one sequential sum over every frame of the sequence
            // (T * N terms), whose rounding error grew with T * N (dW 5-46x further from float64
            // than PyTorch's at T 500-1000, N 32-1024); now it grows with the chunk length plus
            // the number of chunks, as a blocked GEMM's does.
            Vec acc[MR][NV];
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
            // The next tile's rows of C: consecutive gate columns are consecutive rows of dw
            // within a gate, and a tile straddling a gate boundary just prefetches less usefully.
            if (r + 2 * MR <= c_count) {
                const int64_t c = c_begin + r + MR, blk = c / (4 * kUnitBlock);
                const int64_t gate = c / kUnitBlock % 4, unit = blk * kUnitBlock + c % kUnitBlock;
                if (unit + MR <= hidden)
                    avx512::prefetch_rows(dw + (gate * hidden + unit) * width + col0, width, MR,
                                          NV);
            }
            avx512::accumulate<MR, NV>(len,
                                       avx512::PackedA{a_pack + r / kGradTileCols * kTileStride},
                                       avx512::PanelB{b_pack}, acc);
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v) {
                    const __mmask16 m = mask[v] & row_mask[i];
                    float* out = rows[i] + v * kUnitBlock;
                    _mm512_mask_storeu_ps(out, m,
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(m, out), acc[i][v]));
                }
        }
    };

    // The parts of `runs` (sorted, covering every compact row) inside [k0, k0 + len).
    static int64_t chunk_segments(const RowRun<float>* runs, int64_t run_count, int64_t& cursor,
                                  int64_t k0, int64_t len, ChunkSegment* out) {
        int64_t count = 0;
        while (cursor < run_count && runs[cursor].k0 + runs[cursor].count <= k0) ++cursor;
        for (int64_t i = cursor; i < run_count && runs[i].k0 < k0 + len; ++i) {
            const int64_t begin = std::max(runs[i].k0, k0);
            const int64_t end = std::min(runs[i].k0 + runs[i].count, k0 + len);
            if (end <= begin) continue;
            out[count++] =
                ChunkSegment{begin - k0, end - begin,
                             runs[i].rows + (begin - runs[i].k0) * runs[i].ld, runs[i].ld};
        }
        return count;
    }

    // a_pack <- dgates rows [k0, k0 + len), own columns, as tiles of kGradTileCols columns
    // (tile t, row k at a_pack + t * kTileStride + k * kGradTileCols); columns past the own range
    // are zero.
    void pack_grad_chunk(const float* dgates, int64_t k0, int64_t len, int64_t c_begin,
                         int64_t c_count, float* a_pack) const {
        const int64_t gc = lay_.gate_cols, full = c_count / kGradTileCols;
        const int64_t rest = c_count - full * kGradTileCols;
        const __mmask16 tile_lanes = avx512::lanes(kGradTileCols), rest_lanes = avx512::lanes(rest);
        // Row by row, so each source line is read once; the tiles are written in parallel streams.
        // A masked load of the tile's 6 columns and a masked store move them at once; the zero
        // lanes of the remainder tile's load pad it.
        const int row_lines = static_cast<int>((c_count + kUnitBlock - 1) / kUnitBlock);
        for (int64_t k = 0; k < len; ++k) {
            const float* src = dgates + (k0 + k) * gc + c_begin;
            float* dst = a_pack + k * kGradTileCols;
            if (k + kGradPackAhead < len)
                avx512::prefetch_rows(src + kGradPackAhead * gc, gc, 1, row_lines);
            for (int64_t t = 0; t < full; ++t)
                _mm512_mask_storeu_ps(dst + t * kTileStride, tile_lanes,
                                      _mm512_maskz_loadu_ps(tile_lanes, src + t * kGradTileCols));
            if (rest > 0)
                _mm512_mask_storeu_ps(
                    dst + full * kTileStride, tile_lanes,
                    _mm512_maskz_loadu_ps(rest_lanes, src + full * kGradTileCols));
        }
    }

    void weight_grad_chunks(const float* dgates, const RowRun<float>* x_runs, int64_t x_run_count,
                            const RowRun<float>* h_runs, int64_t h_run_count, int64_t in,
                            float* dw_ih, float* dw_hh, BlockRange own) const {
        const int64_t c_begin = own.begin * 4 * kUnitBlock, c_count = own.count() * 4 * kUnitBlock;
        float* a_pack = buf_.a_pack + (c_begin + kGradTileCols * own.begin) * kGradChunk +
                        kGradTilePad * kGradTilesPerBlock * own.begin;
        float* b_pack = buf_.b_pack + own.begin * kGradChunk * kGradPanelCols;
        int64_t total = 0;
        for (int64_t i = 0; i < x_run_count; ++i) total += x_runs[i].count;
        ChunkSegment segs[kGradChunk];
        int64_t x_cursor = 0, h_cursor = 0;
        for (int64_t k0 = 0; k0 < total; k0 += kGradChunk) {
            const int64_t len = std::min(kGradChunk, total - k0);
            pack_grad_chunk(dgates, k0, len, c_begin, c_count, a_pack);
            GradChunk g{this, a_pack, segs, 0, len, in, c_begin, c_count, dw_ih, b_pack};
            g.seg_count = chunk_segments(x_runs, x_run_count, x_cursor, k0, len, segs);
            avx512::for_each_panel(0, (in + kUnitBlock - 1) / kUnitBlock, g);
            g.seg_count = chunk_segments(h_runs, h_run_count, h_cursor, k0, len, segs);
            g.width = lay_.recurrent;
            g.dw = dw_hh;
            avx512::for_each_panel(0, (lay_.recurrent + kUnitBlock - 1) / kUnitBlock, g);
        }
    }

    FusedLayout lay_;
    FusedBuffers<float> buf_;
};

}  // namespace lstm::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // !LSTM_HAVE_AVX512_KERNELS

namespace lstm::kernels::cpu {
// No AVX-512 code on this compiler: the name exists so the variant compiles, and
// cpu_has_avx512() is false, so it is never selected.
using Avx512FusedKernels = PortableFusedKernels<float>;
}  // namespace lstm::kernels::cpu

#endif
