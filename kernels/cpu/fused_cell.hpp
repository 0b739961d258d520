#pragma once

// The fused variant's data layout and its portable kernels: one element-wise pass per step over
// a thread's slice of hidden units (bias already folded in, activations, cell update, saving what
// backward needs), its mirror for backward, the weight packing those passes read, and the
// compact row order the variant computes in. The arithmetic per unit is kernels/common/gates.hpp,
// the same functions the CUDA kernels call. GEMMs come from gemm.hpp (Eigen); fused_simd.hpp
// implements the same operations with the element-wise pass inside the GEMM's epilogue.
//
// Layout, shared by every fused kernel (every instruction set writes and reads the same bytes):
//  - Units come in blocks of kUnitBlock = 16. Hp = H rounded up to 16, nb = Hp / 16, G = 4 Hp.
//  - Gate columns are interleaved per block: column (b * 4 + gate) * 16 + u holds gate `gate`
//    (i, f, g, o) of unit b * 16 + u. A thread that owns blocks [b0, b1) owns the contiguous
//    columns [64 b0, 64 b1) and with them all four gates of its units, so its element-wise pass
//    needs no other thread's data.
//  - Padded units (b * 16 + u >= H) have zero weights and zero bias; they follow the same
//    equations with zero pre-activations and zero inputs, so everything stored for them is finite
//    (c = 0, h = 0, dgates = 0) and a GEMM that multiplies them by zero weights adds exactly 0.
//    Their zero weights times an infinity in x or h0 give NaN pre-activations (0 * inf), which
//    backward's products with those zero weights carried into every unit's gradient; so every
//    forward kernel sets their pre-activations to 0 before the activations.
//  - Rows are compact and length-sorted: step t's active rows r < active[t] sit at rows
//    offsets[t] + r of a (S, width) array, S = sum of lengths, so a GEMM over "all time steps"
//    covers exactly the valid frames.
//
// Raw math only: host pointers and sizes, nothing from lstm/, no allocation, no throwing.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common/gates.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/split.hpp"

namespace lstm::kernels::cpu {

// Units per interleaved block: one AVX-512 register of floats.
constexpr int64_t kUnitBlock = 16;
// Rows of dgates per K-chunk of the AVX-512 weight-gradient GEMM (sizes its packing scratch): the
// chunk's packed partner panel, kGradChunk x 64 floats = 32 KiB, then stays in a 48 KiB L1 across
// every tile of gate columns (on a Xeon with that L1, measured 6-8% faster than 256 rows with the
// partner read from its rows, and than 64 or 96 rows packed; on Zen 4's 32 KiB L1 the same within
// noise, docs/performance.md).
constexpr int64_t kGradChunk = 128;
// Partner columns per packed panel of that GEMM: four 16-float strips (its micro-tile width).
constexpr int64_t kGradPanelCols = 64;
// Gate columns per packed tile of that GEMM (its micro-tile height).
constexpr int64_t kGradTileCols = 6;
// The most chunk rows a kernel set's weight-gradient GEMM uses (sizes the packed dgates). The
// Highway kernels keep the panel at kGradChunk x 64 floats whatever their width, so their AVX2
// instantiation (16-float panels) runs chunks of 512 rows: its tiles then load and store their
// rows of dw a quarter as often (kernels/cpu/fused_simd.cpp).
constexpr int64_t kGradChunkMax = 512;
// Floats of padding after each packed dgates tile, one cache line. The AVX2 target's tiles of
// 512 x 6 floats are 12 KiB apart, a multiple of an L1's way size, so the packing's row-by-row
// writes into all of a thread's tiles (107 at H 320 and 2 threads) fell into one L1 set and
// evicted one another; a line between them spreads the streams over the sets (the weight-gradient
// call 2-3% faster, braun/1x320-CE-short and CE-long, 2 threads, EPYC Zen 4, AVX2 target). Tiles
// of 128 rows (the AVX3 target's) fall into 4 sets; padded, the hand-written AVX-512 kernel that
// had such tiles before the AVX3 target replaced it took 0.2-1.2% less in its backward call
// (CE-short at 1 and 2 threads, CE-long at 2, same machine).
constexpr int64_t kGradTilePad = 16;
// Rows ahead that the packing of dgates asks for, into L2. By then dgates has left the caches,
// and each row is a new stream for the hardware prefetcher (rows are 4H floats apart), so the copy
// waited on memory at about 5 GB/s per thread. Measured on braun/1x320 CE-short and CE-long, 2
// threads, EPYC Zen 4, backward call timed in one process on alternating calls: 1-2% less on the
// AVX2 target with an L1 prefetch, and 1.4-3.7% less again into L2 instead (an L1 prefetch of 40
// lines a row, 4 rows ahead, crowds the L1); 1.1-2.2% less on the hand-written AVX-512 kernel of
// the time, unchanged at one thread. 2, 8 and 16 rows ahead were no better.
constexpr int64_t kGradPackAhead = 4;
// Packed tiles per 16-unit block: 64 gate columns in tiles of kGradTileCols, the last partial.
constexpr int64_t kGradTilesPerBlock = (4 * kUnitBlock + kGradTileCols - 1) / kGradTileCols;

// Sizes of the interleaved layout for hidden size H and recurrent width R (the features of h:
// H, or P with a projection, where the recurrent GEMM reads the projected h).
struct FusedLayout {
    int64_t hidden;         // H
    int64_t hidden_padded;  // Hp = H rounded up to kUnitBlock
    int64_t blocks;         // nb = Hp / kUnitBlock
    int64_t gate_cols;      // G = 4 Hp
    int64_t recurrent;      // R: K of the recurrent GEMM, columns of W_hh (4H, R)

    explicit FusedLayout(int64_t h) : FusedLayout(h, h) {}
    FusedLayout(int64_t h, int64_t r)
        : hidden(h),
          hidden_padded((h + kUnitBlock - 1) / kUnitBlock * kUnitBlock),
          blocks(hidden_padded / kUnitBlock),
          gate_cols(4 * hidden_padded),
          recurrent(r) {}

    // Interleaved column of gate `gate` (0..3) of unit `unit`.
    int64_t column(int64_t gate, int64_t unit) const {
        return (unit / kUnitBlock * 4 + gate) * kUnitBlock + unit % kUnitBlock;
    }
};

// dst (N, Hp) sorted, units [u_begin, u_end) of every row <- src (N, H) original rows, host; a
// null src gives zeros, and units >= H are zero (padding).
template <typename T>
void gather_state_units(const T* src, int64_t batch, int64_t hidden, const int64_t* order,
                        int64_t u_begin, int64_t u_end, T* dst, int64_t ld_dst) {
    for (int64_t r = 0; r < batch; ++r)
        for (int64_t u = u_begin; u < u_end; ++u)
            dst[r * ld_dst + u] = (src && u < hidden) ? src[order[r] * hidden + u] : T(0);
}

// ------------------------------------------------------------------------------------------------
// Portable weight packing (the Eigen path's operands)
// ------------------------------------------------------------------------------------------------

// wt (K, G) row-major, columns of blocks [b.begin, b.end) <- transpose of w (4H, K) row-major
// with gate rows interleaved (layout above); padded units get zero columns. Overwrites.
template <typename T>
void pack_transposed_interleaved(const T* w, int64_t k_size, const FusedLayout& lay, BlockRange b,
                                 T* wt) {
    const int64_t g_cols = lay.gate_cols;
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                const int64_t col = (blk * 4 + gate) * kUnitBlock + u;
                if (unit < lay.hidden) {
                    const T* row = w + (gate * lay.hidden + unit) * k_size;
                    for (int64_t k = 0; k < k_size; ++k) wt[k * g_cols + col] = row[k];
                } else {
                    for (int64_t k = 0; k < k_size; ++k) wt[k * g_cols + col] = T(0);
                }
            }
}

// bias (G) interleaved, columns of blocks b <- b_ih + b_hh (4H each); padded units get 0, and so
// does every unit when b_ih is null (a config without biases).
template <typename T>
void pack_bias_interleaved(const T* b_ih, const T* b_hh, const FusedLayout& lay, BlockRange b,
                           T* bias) {
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                const int64_t j = gate * lay.hidden + unit;
                bias[(blk * 4 + gate) * kUnitBlock + u] =
                    unit < lay.hidden && b_ih != nullptr ? b_ih[j] + b_hh[j] : T(0);
            }
}

// wr (G, ld) rows of blocks b (gate columns [64 b.begin, 64 b.end)) <- the rows of w (4H, K)
// reordered to interleaved gate order, columns [0, K); padded units give zero rows, and columns
// [K, ld) are zeroed. Overwrites.
template <typename T>
void pack_rows_interleaved(const T* w, int64_t k_size, const FusedLayout& lay, BlockRange b, T* wr,
                           int64_t ld) {
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                T* out = wr + ((blk * 4 + gate) * kUnitBlock + u) * ld;
                if (unit < lay.hidden)
                    std::memcpy(out, w + (gate * lay.hidden + unit) * k_size, sizeof(T) * k_size);
                else
                    std::fill(out, out + k_size, T(0));
                std::fill(out + k_size, out + ld, T(0));
            }
}

// ------------------------------------------------------------------------------------------------
// Strip packing of the SIMD kernel set (fused_simd.cpp reads these strips on every target)
// ------------------------------------------------------------------------------------------------

// Once per call and small next to the GEMMs that read them, so plain code serves every
// instruction set. A strip is 16 floats wide (kUnitBlock): one AVX-512 vector, two AVX2 ones.

// out: strips blk * 4 + gate for the blocks in b, each (K, 16), of w (4H, K) row-major; padded
// units are zero. Host; overwrites.
inline void pack_gate_strips(const float* w, int64_t k_size, const FusedLayout& lay, BlockRange b,
                             float* out) {
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate) {
            float* strip = out + (blk * 4 + gate) * k_size * kUnitBlock;
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                const float* row = w + (gate * lay.hidden + unit) * k_size;
                for (int64_t k = 0; k < k_size; ++k)
                    strip[k * kUnitBlock + u] = unit < lay.hidden ? row[k] : 0.0f;
            }
        }
}

// out: strips over the columns of w (4H, K) row-major, each (G, 16) with stride G * 16, rows
// for the gate columns of blocks b only: strip q, row c holds w[row of c][16 q + u], zero for
// padded units and for columns >= K. Host; overwrites.
inline void pack_column_strips(const float* w, int64_t k_size, const FusedLayout& lay, BlockRange b,
                               float* out) {
    const int64_t strips = (k_size + kUnitBlock - 1) / kUnitBlock;
    const int64_t stride = lay.gate_cols * kUnitBlock;
    for (int64_t c = b.begin * 4 * kUnitBlock; c < b.end * 4 * kUnitBlock; ++c) {
        const int64_t blk = c / (4 * kUnitBlock), gate = c / kUnitBlock % 4;
        const int64_t unit = blk * kUnitBlock + c % kUnitBlock;
        const float* row = unit < lay.hidden ? w + (gate * lay.hidden + unit) * k_size : nullptr;
        for (int64_t q = 0; q < strips; ++q) {
            float* dst = out + q * stride + c * kUnitBlock;
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t col = q * kUnitBlock + u;
                dst[u] = row && col < k_size ? row[col] : 0.0f;
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Portable element-wise passes over one thread's unit blocks
// ------------------------------------------------------------------------------------------------

// Forward of `rows` rows for blocks b. gates (rows, ldg) holds pre-activations (both GEMMs and
// both biases) and is overwritten with the activated gates; c_prev (rows, ldcp) is read, c
// (rows, ldc) overwritten with c_t (may alias c_prev); h (rows, ldh) gets h_t for units < H only.
// Padded units run too, so the stored gates and c are defined (see the layout notes).
template <typename T>
void fused_forward_pass(int64_t rows, const FusedLayout& lay, BlockRange b, T* gates, int64_t ldg,
                        const T* c_prev, int64_t ldcp, T* c, int64_t ldc, T* h, int64_t ldh) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t blk = b.begin; blk < b.end; ++blk) {
            T* pre = gates + r * ldg + blk * 4 * kUnitBlock;
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                const bool real = unit < lay.hidden;  // padded units: see the layout notes
                const Gates<T> a = activate(real ? pre[u] : T(0), real ? pre[kUnitBlock + u] : T(0),
                                            real ? pre[2 * kUnitBlock + u] : T(0),
                                            real ? pre[3 * kUnitBlock + u] : T(0));
                pre[u] = a.i;
                pre[kUnitBlock + u] = a.f;
                pre[2 * kUnitBlock + u] = a.g;
                pre[3 * kUnitBlock + u] = a.o;
                const T c_t = cell_state(a, c_prev[r * ldcp + unit]);
                c[r * ldc + unit] = c_t;
                if (unit < lay.hidden) h[r * ldh + unit] = hidden_state(a, c_t);
            }
        }
}

// Backward of `rows` rows for blocks b. gates (rows, ldg) holds the activated gates of the step
// and is overwritten with d(pre-activations); c (rows, ldc) is c_t, c_prev (rows, ldcp) c_{t-1};
// dh (rows, lddh) is the gradient reaching h_t through the recurrence (or dhn), dy (rows, ldy)
// the one from the layer output, read for units < H; dc (rows, lddc) holds the gradient reaching
// c_t and is overwritten with the one reaching c_{t-1}; bias_grad (G) gets the dgates ADDED.
template <typename T>
void fused_backward_pass(int64_t rows, const FusedLayout& lay, BlockRange b, T* gates, int64_t ldg,
                         const T* c, int64_t ldc, const T* c_prev, int64_t ldcp, const T* dh,
                         int64_t lddh, const T* dy, int64_t ldy, T* dc, int64_t lddc,
                         T* bias_grad) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t blk = b.begin; blk < b.end; ++blk) {
            T* g = gates + r * ldg + blk * 4 * kUnitBlock;
            T* bg = bias_grad + blk * 4 * kUnitBlock;
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                const Gates<T> a{g[u], g[kUnitBlock + u], g[2 * kUnitBlock + u],
                                 g[3 * kUnitBlock + u]};
                const T dh_total =
                    dh[r * lddh + unit] + (unit < lay.hidden ? dy[r * ldy + unit] : T(0));
                const CellGrads<T> d = cell_backward(a, c_prev[r * ldcp + unit], c[r * ldc + unit],
                                                     dh_total, dc[r * lddc + unit]);
                g[u] = d.di;
                g[kUnitBlock + u] = d.df;
                g[2 * kUnitBlock + u] = d.dg;
                g[3 * kUnitBlock + u] = d.d_o;
                dc[r * lddc + unit] = d.dc_prev;
                bg[u] += d.di;
                bg[kUnitBlock + u] += d.df;
                bg[2 * kUnitBlock + u] += d.dg;
                bg[3 * kUnitBlock + u] += d.d_o;
            }
        }
}

// dw (4H, K) row-major, the gate rows of blocks b, ADDED: dw[gate * H + unit][k] += wt[k][col]
// for wt (K, G) laid out as pack_transposed_interleaved writes it (the transposed weight
// gradient in interleaved columns); padded units are skipped.
template <typename T>
void add_transposed_interleaved(const T* wt, int64_t k_size, const FusedLayout& lay, BlockRange b,
                                T* dw) {
    const int64_t g_cols = lay.gate_cols;
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                if (unit >= lay.hidden) continue;
                const int64_t col = (blk * 4 + gate) * kUnitBlock + u;
                T* row = dw + (gate * lay.hidden + unit) * k_size;
                for (int64_t k = 0; k < k_size; ++k) row[k] += wt[k * g_cols + col];
            }
}

// Steps per block of BiasGradSums: near the square root of the longest sequences trained (Braun's
// CE-long has T 1000), which balances the block's additions against the blocks'.
constexpr int64_t kBiasBlockSteps = 32;

// A cell's bias gradient summed in three levels: each step's dgates rows (from zero) into `step`
// (G, interleaved), the steps of a block into `block`, the blocks into `total`. One running sum
// over every frame made its rounding error grow with T * N (the gradient 7-46x further from
// float64 than PyTorch's cascaded column sums at T 500-1000, N 32-1024); here it grows with
// N + kBiasBlockSteps + T / kBiasBlockSteps. Columns [c0, c1) are one thread's own: the kernels
// add a step's rows of those columns only, so nothing here is shared.
template <typename T>
struct BiasGradSums {
    T* step;   // (G) one step's sum, written by the kernels (their bias_grad)
    T* block;  // (G) the current block's sum
    T* total;  // (G) the blocks' sum: the cell's bias gradient, zeroed by start()
    int64_t c0 = 0, c1 = 0;
    int64_t steps = 0;

    void start() {
        std::fill(total + c0, total + c1, T(0));
        std::fill(block + c0, block + c1, T(0));
        steps = 0;
    }
    void begin_step() { std::fill(step + c0, step + c1, T(0)); }
    void end_step() {
        for (int64_t c = c0; c < c1; ++c) block[c] += step[c];
        if (++steps % kBiasBlockSteps == 0) flush();
    }
    // After the last step: the partial block joins the total.
    void flush() {
        for (int64_t c = c0; c < c1; ++c) {
            total[c] += block[c];
            block[c] = T(0);
        }
    }
};

// dW_hr (P, H) rows q in [rows_q.begin, rows_q.end) += sum over frames of dh[r, q] h_raw[r, :]:
// dh (rows, P) and h_raw (rows, Hp; what padded units hold is summed but never stored) compact,
// host; dW_hr row-major, PyTorch's layout. Summed per chunk of kGradChunk frames from zero, then
// added (one running sum over all T * N frames let the rounding error grow with their count), a
// block of kUnitBlock units at a time in registers, so no scratch is needed.
template <typename T>
void add_projection_grads(const T* dh, const T* h_raw, int64_t rows, int64_t proj,
                          const FusedLayout& lay, BlockRange rows_q, T* dw_hr) {
    const int64_t hidden = lay.hidden, hp = lay.hidden_padded;
    for (int64_t q = rows_q.begin; q < rows_q.end; ++q) {
        T* dw = dw_hr + q * hidden;
        for (int64_t u0 = 0; u0 < hidden; u0 += kUnitBlock) {
            T total[kUnitBlock] = {};
            for (int64_t k0 = 0; k0 < rows; k0 += kGradChunk) {
                T part[kUnitBlock] = {};
                for (int64_t r = k0; r < std::min(rows, k0 + kGradChunk); ++r) {
                    const T a = dh[r * proj + q];
                    const T* h = h_raw + r * hp + u0;
                    for (int64_t u = 0; u < kUnitBlock; ++u) part[u] += a * h[u];
                }
                for (int64_t u = 0; u < kUnitBlock; ++u) total[u] += part[u];
            }
            for (int64_t u = 0; u < std::min(kUnitBlock, hidden - u0); ++u) dw[u0 + u] += total[u];
        }
    }
}

// bias_ih_grad and bias_hh_grad (4H each) += bias_grad (G) interleaved, blocks b; the same value
// goes into both, as both biases enter the gates the same way.
template <typename T>
void add_bias_grads(const T* bias_grad, const FusedLayout& lay, BlockRange b, T* d_bias_ih,
                    T* d_bias_hh) {
    for (int64_t blk = b.begin; blk < b.end; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t u = 0; u < kUnitBlock; ++u) {
                const int64_t unit = blk * kUnitBlock + u;
                if (unit >= lay.hidden) continue;
                const T v = bias_grad[(blk * 4 + gate) * kUnitBlock + u];
                d_bias_ih[gate * lay.hidden + unit] += v;
                d_bias_hh[gate * lay.hidden + unit] += v;
            }
}

// ------------------------------------------------------------------------------------------------
// What the orchestration hands a kernel set
// ------------------------------------------------------------------------------------------------

// Rows [0, rows) of one forward step whose recurrent inputs come from one place (the previous
// step, or the initial state for sequences that start here). Row r of each array is at
// pointer + r * ld.
template <typename T>
struct ForwardSegment {
    int64_t rows;
    const T* h_prev;  // (rows, >= R) h_{t-1} (projected with a projection), ld_h_prev
    int64_t ld_h_prev;
    const T* c_prev;  // (rows, Hp) c_{t-1}, ld_c_prev
    int64_t ld_c_prev;
    T* gates;  // (rows, G) ld G: input projection + biases in, activated gates out
    T* c;      // (rows, Hp) c_t out, ld_c (may alias c_prev)
    int64_t ld_c;
    T* h;  // (rows, >= H) h_t out (before the projection, if any), units < H only, ld_h
    int64_t ld_h;
};

// Rows [0, rows) of one backward step with one source for the gradient carried into h_t and one
// for c_{t-1}.
template <typename T>
struct BackwardSegment {
    int64_t rows;
    const T* dgates_next;  // (rows, G) ld G: dgates of the step after this one; null: no GEMM,
                           // the carry is dh_carry
    const T* dh_carry;     // (rows, Hp) ld Hp: dhn (used when dgates_next is null)
    const T* dy;           // (rows, >= H) ld_dy: gradient from this step's output
    int64_t ld_dy;
    T* gates;         // (rows, G) ld G: activated gates in, dgates (w.r.t. pre-activations) out
    const T* c;       // (rows, Hp) ld Hp: c_t
    const T* c_prev;  // (rows, Hp) ld Hp: c_{t-1}
    T* dc;            // (rows, Hp) ld Hp: gradient reaching c_t in, reaching c_{t-1} out
    T* bias_grad;     // (G) ADDED: column sums of dgates
};

// A run of consecutive compact rows [k0, k0 + count) of dgates whose partners in a weight
// gradient (the layer input, or h_{t-1}) are rows + i * ld, i < count.
template <typename T>
struct RowRun {
    int64_t k0, count;
    const T* rows;
    int64_t ld;
};

// When the input projection's output is read back. `per_step` (inference projects one step into
// a small buffer and reads it at once): keep it in cache. `whole_sequence` (training projects
// every frame into the reserve; step t's rows are read only when the time loop reaches t, after
// megabytes of other traffic): a kernel set may write it past the cache.
enum class ProjectionTarget { per_step, whole_sequence };

// Packed operands and scratch of one (layer, direction), carved by the variant. Sizes are the
// same for every kernel set; the layout inside each packed array is the kernel set's own.
template <typename T>
struct FusedBuffers {
    T* w_ih_fwd;  // (in_max, G) forward input weights
    T* w_hh_fwd;  // (R, G) forward recurrent weights
    T* bias;      // (G) b_ih + b_hh, interleaved
    T* w_hh_bwd;  // (G, Hp) recurrent weights for dh_{t-1} = dgates W_hh (unused with a
                  // projection: the variant forms that product itself)
    T* w_ih_bwd;  // (G, in_max rounded up to 16) input weights for dx = dgates W_ih
    T* dh;        // (N, Hp) scratch: one step's recurrent gradient
    T* dw;        // (in_max + R, G) scratch: transposed weight gradients
    T* a_pack;    // (kGradChunkMax, G + 6 nb) + kGradTilePad kGradTilesPerBlock nb scratch: a
                  // chunk of dgates packed for the weight-gradient GEMM, one region per thread
                  // at its own columns
    T* b_pack;    // (nb, kGradChunk, 64) scratch: one panel of that GEMM's partner rows, packed,
                  // one region per thread at its first own block
};

// Element counts of FusedBuffers for hidden size H, widest layer input in_max and batch N.
struct FusedBufferSizes {
    int64_t w_ih_fwd, w_hh_fwd, bias, w_hh_bwd, w_ih_bwd, dh, dw, a_pack, b_pack;
    FusedBufferSizes(const FusedLayout& lay, int64_t in_max, int64_t batch) {
        const int64_t g = lay.gate_cols,
                      in_pad = (in_max + kUnitBlock - 1) / kUnitBlock * kUnitBlock;
        w_ih_fwd = in_pad * g;
        w_hh_fwd = lay.recurrent * g;
        bias = g;
        w_hh_bwd = g * lay.hidden_padded;
        w_ih_bwd = g * in_pad;
        dh = batch * lay.hidden_padded;
        dw = (in_max + lay.recurrent) * g;
        // Each thread pads its columns to whole tiles (less than one tile per block), and
        // leaves kGradTilePad floats after each tile.
        a_pack = kGradChunkMax * (g + kGradTileCols * lay.blocks) +
                 kGradTilePad * kGradTilesPerBlock * lay.blocks;
        // Threads own disjoint block ranges, so a region per block gives every thread its own.
        b_pack = lay.blocks * kGradChunk * kGradPanelCols;
    }
};

// ------------------------------------------------------------------------------------------------
// The portable kernel set: Eigen GEMMs plus the passes above
// ------------------------------------------------------------------------------------------------

// Every member is called by every thread of the variant's team with the unit blocks it owns
// (`own`) or the rows it owns; members never synchronise, the caller places the barriers. GEMMs
// run single-threaded inside the team (gemm.hpp's Eigen stays serial inside a parallel region).
template <typename T>
class PortableFusedKernels {
public:
    PortableFusedKernels(const FusedLayout& lay, const FusedBuffers<T>& buf)
        : lay_(lay), buf_(buf) {}

    // Packs the forward operands of one cell, own columns: w_ih (4H, in), w_hh (4H, R), biases.
    void pack_forward(const T* w_ih, int64_t in, const T* w_hh, const T* b_ih, const T* b_hh,
                      BlockRange own) const {
        pack_transposed_interleaved(w_ih, in, lay_, own, buf_.w_ih_fwd);
        pack_transposed_interleaved(w_hh, lay_.recurrent, lay_, own, buf_.w_hh_fwd);
        pack_bias_interleaved(b_ih, b_hh, lay_, own, buf_.bias);
    }

    // gates (rows, G), own columns, overwritten <- x (rows, ldx; in features) W_ih^T + biases.
    // `target` is only a hint for the SIMD set; Eigen's GEMM writes through the cache.
    void input_projection(const T* x, int64_t ldx, int64_t rows, int64_t in, T* gates,
                          BlockRange own, ProjectionTarget /*target*/) const {
        if (own.count() == 0 || rows == 0) return;
        const int64_t c0 = own.begin * 4 * kUnitBlock, n = own.count() * 4 * kUnitBlock;
        const int64_t g = lay_.gate_cols;
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(gates + r * g + c0, buf_.bias + c0, sizeof(T) * n);
        gemm(false, false, rows, n, in, T(1), x, ldx, buf_.w_ih_fwd + c0, g, T(1), gates + c0, g);
    }

    // One forward segment, own units: recurrent GEMM into the gates, then the fused pass.
    void forward_step(const ForwardSegment<T>& s, BlockRange own) const {
        if (own.count() == 0 || s.rows == 0) return;
        const int64_t c0 = own.begin * 4 * kUnitBlock, n = own.count() * 4 * kUnitBlock;
        const int64_t g = lay_.gate_cols;
        gemm(false, false, s.rows, n, lay_.recurrent, T(1), s.h_prev, s.ld_h_prev,
             buf_.w_hh_fwd + c0, g, T(1), s.gates + c0, g);
        fused_forward_pass(s.rows, lay_, own, s.gates, g, s.c_prev, s.ld_c_prev, s.c, s.ld_c, s.h,
                           s.ld_h);
    }

    // Packs the backward operands of one cell, rows of the own blocks; every thread reads all
    // rows afterwards, so the caller puts a barrier between this and the first backward_step.
    // w_hh null (a projection: the variant forms dh_{t-1} itself and hands backward_step only
    // dh_carry) packs w_ih alone.
    void pack_backward(const T* w_ih, int64_t in, const T* w_hh, BlockRange own) const {
        if (w_hh != nullptr)
            pack_rows_interleaved(w_hh, lay_.hidden, lay_, own, buf_.w_hh_bwd, lay_.hidden_padded);
        pack_rows_interleaved(w_ih, in, lay_, own, buf_.w_ih_bwd, in);
    }

    // One backward segment, own units: dh = dgates_next W_hh (or dh_carry), then the fused pass.
    void backward_step(const BackwardSegment<T>& s, BlockRange own) const {
        if (own.count() == 0 || s.rows == 0) return;
        const int64_t hp = lay_.hidden_padded, u0 = own.begin * kUnitBlock;
        const T* dh = s.dh_carry;
        if (s.dgates_next) {
            gemm(false, false, s.rows, own.count() * kUnitBlock, lay_.gate_cols, T(1),
                 s.dgates_next, lay_.gate_cols, buf_.w_hh_bwd + u0, hp, T(0), buf_.dh + u0, hp);
            dh = buf_.dh;
        }
        fused_backward_pass(s.rows, lay_, own, s.gates, lay_.gate_cols, s.c, hp, s.c_prev, hp, dh,
                            hp, s.dy, s.ld_dy, s.dc, hp, s.bias_grad);
    }

    // dh0 (rows, Hp) own units, overwritten <- dgates (rows, G) W_hh: the gradient reaching the
    // initial state of sequences whose first step produced `dgates`.
    void backward_dh0(int64_t rows, const T* dgates, T* dh0, BlockRange own) const {
        if (own.count() == 0 || rows == 0) return;
        const int64_t hp = lay_.hidden_padded, u0 = own.begin * kUnitBlock;
        gemm(false, false, rows, own.count() * kUnitBlock, lay_.gate_cols, T(1), dgates,
             lay_.gate_cols, buf_.w_hh_bwd + u0, hp, T(0), dh0 + u0, hp);
    }

    // Weight gradients of one cell, rows of the own blocks, ADDED into dw_ih (4H, in) and
    // dw_hh (4H, R): dW_ih += dG^T X and dW_hh += dG^T H_prev over every valid frame, with
    // dgates (S, G) compact and the partners given as runs (x_runs: layer input, in features;
    // h_runs: h_{t-1}, R features).
    void weight_grads(const T* dgates, const RowRun<T>* x_runs, int64_t x_run_count,
                      const RowRun<T>* h_runs, int64_t h_run_count, int64_t in, T* dw_ih, T* dw_hh,
                      BlockRange own) const {
        if (own.count() == 0) return;
        T* scratch_ih = buf_.dw;
        T* scratch_hh = buf_.dw + in * lay_.gate_cols;
        transposed_grad(dgates, x_runs, x_run_count, in, scratch_ih, own);
        transposed_grad(dgates, h_runs, h_run_count, lay_.recurrent, scratch_hh, own);
        add_transposed_interleaved(scratch_ih, in, lay_, own, dw_ih);
        add_transposed_interleaved(scratch_hh, lay_.recurrent, lay_, own, dw_hh);
    }

    // d_in rows [rows.begin, rows.end) of (S, ld_in), in features: overwritten (accumulate false)
    // or ADDED (true) <- dgates (S, G) W_ih.
    void input_grads(const T* dgates, BlockRange rows, int64_t in, T* d_in, int64_t ld_in,
                     bool accumulate) const {
        if (rows.count() == 0) return;
        gemm(false, false, rows.count(), in, lay_.gate_cols, T(1),
             dgates + rows.begin * lay_.gate_cols, lay_.gate_cols, buf_.w_ih_bwd, in,
             accumulate ? T(1) : T(0), d_in + rows.begin * ld_in, ld_in);
    }

private:
    // out (width, G), own columns, overwritten <- sum over runs of partner^T dgates.
    void transposed_grad(const T* dgates, const RowRun<T>* runs, int64_t run_count, int64_t width,
                         T* out, BlockRange own) const {
        const int64_t c0 = own.begin * 4 * kUnitBlock, n = own.count() * 4 * kUnitBlock;
        const int64_t g = lay_.gate_cols;
        bool first = true;
        for (int64_t i = 0; i < run_count; ++i) {
            const RowRun<T>& run = runs[i];
            if (run.count == 0) continue;
            gemm(true, false, width, n, run.count, T(1), run.rows, run.ld, dgates + run.k0 * g + c0,
                 g, first ? T(0) : T(1), out + c0, g);
            first = false;
        }
        if (first)
            for (int64_t k = 0; k < width; ++k)
                std::fill(out + k * g + c0, out + k * g + c0 + n, T(0));
    }

    FusedLayout lay_;
    FusedBuffers<T> buf_;
};

}  // namespace lstm::kernels::cpu
