// The Highway kernel set of the fused variant (kernels/cpu/fused_simd.hpp). This file is included
// once per target by hwy/foreach_target.h: the HWY_NAMESPACE part is the per-target code, the
// HWY_ONCE part (compiled once, for the baseline) packs weights and picks a target's functions.
//
// Packed layouts (kernels/cpu/fused_cell.hpp packs them): forward strip blk * 4 + gate
// is (K, 16) with row k = W[gate * H + 16 blk + u][k]; backward strip q is (G, 16) with row c =
// W[row of gate column c][16 q + u]. A vector of N floats reads lanes [j N, j N + N) of a strip
// row, so a 16-float strip is 16/N vectors on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/fused_simd.cpp"
// Scalable vectors (SVE, RVV) are sizeless types, which cannot form the arrays of accumulators
// the micro-kernels keep; those targets are left out (ARM runs NEON).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
#include "kernels/cpu/fused_simd.hpp"

#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/simd.hpp"

#ifndef LSTM_FUSED_SIMD_OPS_DEFINED
#define LSTM_FUSED_SIMD_OPS_DEFINED
namespace lstm::kernels::cpu {

// One target's kernels; the arguments are those of the SimdFusedKernels members, plus the layout
// and buffers.
struct SimdFusedOps {
    int64_t target;
    int64_t lanes;
    void (*input_projection)(const FusedLayout&, const FusedBuffers<float>&, const float* x,
                             int64_t ldx, int64_t rows, int64_t in, float* gates, BlockRange own,
                             bool stream);
    void (*forward_step)(const FusedLayout&, const FusedBuffers<float>&,
                         const ForwardSegment<float>&, BlockRange own);
    void (*backward_step)(const FusedLayout&, const FusedBuffers<float>&,
                          const BackwardSegment<float>&, BlockRange own);
    void (*backward_dh0)(const FusedLayout&, const FusedBuffers<float>&, int64_t rows,
                         const float* dgates, float* dh0, BlockRange own);
    void (*weight_grads)(const FusedLayout&, const FusedBuffers<float>&, const float* dgates,
                         const RowRun<float>* x_runs, int64_t x_run_count,
                         const RowRun<float>* h_runs, int64_t h_run_count, int64_t in, float* dw_ih,
                         float* dw_hh, BlockRange own);
    void (*input_grads)(const FusedLayout&, const FusedBuffers<float>&, const float* dgates,
                        BlockRange rows, int64_t in, float* d_in, int64_t ld_in, bool accumulate);
    void (*activations)(const float* x, int64_t count, float* sigmoid_out, float* tanh_out);
    void (*cell)(const float* pre, const float* c_prev, const float* dh, const float* dc,
                 float* out);
};

// Rows of dgates per chunk of the input-gradient GEMM and rows of x per chunk of the input
// projection: the chunk of A stays in L2 across the panels of B.
constexpr int64_t kSimdInputGradRows = 96;
constexpr int64_t kSimdProjectionRows = 240;

// Partner rows of one K-chunk of the weight-gradient GEMM: `len` rows from chunk row `k_off`, row
// j at b + j * ld.
struct SimdChunkSegment {
    int64_t k_off, len;
    const float* b;
    int64_t ld;
};

}  // namespace lstm::kernels::cpu
#endif  // LSTM_FUSED_SIMD_OPS_DEFINED

HWY_BEFORE_NAMESPACE();
namespace lstm::kernels::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most one strip (16 floats) per vector: AVX-512 takes a whole strip, AVX2 half of one.
using D = hn::CappedTag<float, kUnitBlock>;
using DI = hn::RebindToSigned<D>;
using V = hn::Vec<D>;
using VI = hn::Vec<DI>;
constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(D()));
static_assert(kUnitBlock % kLanes == 0, "a strip is a whole number of vectors");

// Vector registers of the target: the accumulators of a micro-tile plus its operands must fit.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || (HWY_ARCH_ARM_A64 && HWY_TARGET == HWY_NEON)
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif
// Forward and projection tiles: rows x 4 vectors, the 4 gates of N units (forward) or 4
// consecutive vectors of a block's gate columns (projection) (12 of 16 registers, or 24 of 32).
constexpr int kGateTileRows = kRegisters == 32 ? 6 : 3;
// Other tiles: kTileRows rows x kTileVecs vectors (12 of 16 registers, or 24 of 32); the rows of
// a weight-gradient tile are the kGradTileCols gate columns its packing holds together.
constexpr int kTileRows = 6;
static_assert(kTileRows == kGradTileCols, "weight-gradient tiles are packed at the tile height");
constexpr int kTileVecs = kRegisters == 32 ? 4 : 2;
static_assert(kTileVecs * kLanes <= kGradPanelCols, "a partner panel fits its packing scratch");
// Rows per K-chunk of the weight-gradient GEMM: as many as keep its partner panel at the
// AVX-512 kernel's kGradChunk x 64 floats, up to kGradChunkMax. Narrower panels get longer
// chunks, so a tile loads and stores its rows of dw (from L2 or L3) once per more FMAs: with AVX2
// (512 rows instead of 128) the weight-gradient call took 7.6-9% less time (braun/1x320-CE-short
// and CE-long, 2 threads, EPYC Zen 4, calls alternating between the two sizes in one process).
constexpr int64_t kPanelFloats = kGradChunk * kGradPanelCols;
constexpr int64_t kSimdGradChunk = std::min(kGradChunkMax, kPanelFloats / (kTileVecs * kLanes));
// Floats from one packed dgates tile to the next (see kGradTilePad).
constexpr int64_t kGradTileStride = kSimdGradChunk * kGradTileCols + kGradTilePad;
static_assert(kSimdGradChunk * kTileVecs * kLanes <= kPanelFloats,
              "a partner panel fits its region of the packing scratch");

template <int K>
using Int = std::integral_constant<int, K>;

// ---- vector math: the functions of kernels/common/gates.hpp, N lanes at a time ---------------

// 2^n for integer n in [-126, 127], built in the exponent field; n = -127 gives 0 and n = 128
// gives +inf.
HWY_INLINE V pow2(VI n) {
    const DI di;
    return hn::BitCast(D(), hn::ShiftLeft<23>(hn::Add(n, hn::Set(di, 127))));
}

// x * scale rounded to the nearest integer (ties to even), as a float and as an integer, for
// |x * scale| < 2^22: adding 1.5 * 2^23 leaves the rounded value in the low bits of the sum's
// mantissa, so the integer is the difference of two bit patterns. One fused multiply-add (which
// rounds the exact product, not the float one: the two differ only where the float product is a
// tie) replaces Round and ConvertTo, whose fix-up for out-of-range inputs (three more operations
// on x86) these never need. Sigmoid plus tanh: 1.08-1.10 ns per element before, 0.97-1.0 after
// (AVX2 target, EPYC Zen 4); of 116 million float inputs, 2 sigmoids moved by one ulp.
struct Rounded {
    V f;
    VI i;
};
HWY_INLINE Rounded round_product(V x, float scale) {
    const D d;
    const DI di;
    const V shift = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
    const V sum = hn::MulAdd(x, hn::Set(d, scale), shift);
    return {hn::Sub(sum, shift), hn::Sub(hn::BitCast(di, sum), hn::BitCast(di, shift))};
}

// e^x for 1 / (1 + e^x): x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is
// exact), e^r by its degree-7 Taylor polynomial (truncation below 1e-8 relative), times 2^n built
// in the exponent field. x is clamped to [-88, 89], so n is in [-127, 128]: 2^-127 comes out as 0
// and 2^128 as +inf, where 1 + e^x is 1 and +inf anyway. Only a sigmoid below 2^-126 (x in
// [-88.7, -88.4]) comes out 0 instead of a denormal, and the fused kernels flush denormals to
// zero. One power of two instead of two (which made every e^x exact down to the denormals):
// sigmoid plus tanh 0.98-1.01 -> 0.85-0.88 ns per element (AVX2 target, EPYC Zen 4).
HWY_INLINE V exp_for_sigmoid(V x) {
    const D d;
    x = hn::Min(hn::Set(d, 89.0f), hn::Max(hn::Set(d, -88.0f), x));
    const Rounded n_both = round_product(x, 1.44269504f);
    const V n = n_both.f;
    V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
    r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
    V p = hn::Set(d, 1.0f / 5040);
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
    p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
    p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
    return hn::Mul(p, pow2(n_both.i));
}

// Whether Min and Max return a NaN operand: x86's min/max return their second operand when
// either is NaN, which the clamps here pass as x. Highway's NEON Min and Max on AArch64 are
// IEEE minNum and maxNum (FMINNM, FMAXNM), which return the other operand, and the emulated
// targets drop it too. Where they keep it, a NaN flows through the arithmetic to the result by
// itself.
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
constexpr bool kClampKeepsNaN = true;
#else
constexpr bool kClampKeepsNaN = false;
#endif

// y, or x where x is NaN on the targets whose clamps drop it (see kClampKeepsNaN). Elsewhere the
// select is waste: without it sigmoid plus tanh take 1.10 instead of 1.27 ns per element (AVX2
// target, EPYC Zen 4), and the forward step's epilogue runs five of them per unit.
HWY_INLINE V nan_from(V x, V y) {
    if constexpr (kClampKeepsNaN) return y;
    return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// 1 / (1 + e^-x): exactly 0 and 1 at the extremes, as gates.hpp's sigmoid; NaN stays NaN.
HWY_INLINE V sigmoid_v(V x) {
    const D d;
    const V one = hn::Set(d, 1.0f);
    return nan_from(x, hn::Div(one, hn::Add(one, exp_for_sigmoid(hn::Neg(x)))));
}

// tanh x = sign(x) e / (e + 2) with e = expm1(2|x|). expm1 keeps its relative accuracy near 0
// (no 1 - 2/(e^2x + 1) cancellation): 2|x| = n ln2 + r, expm1(r) by its degree-8 Taylor
// polynomial, expm1 = 2^n expm1(r) + (2^n - 1). |x| is capped at 9, where tanh is 1 in float, so
// n <= 26 and 2^n is one normal power of two.
HWY_INLINE V tanh_v(V x) {
    const D d;
    const V one = hn::Set(d, 1.0f);
    const V capped = hn::Min(hn::Set(d, 9.0f), hn::Abs(x));
    const V y = hn::Add(capped, capped);
    const Rounded n_both = round_product(y, 1.44269504f);
    const V n = n_both.f;
    V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), y);
    r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
    V q = hn::Set(d, 1.0f / 40320);
    q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 5040));
    q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 720));
    q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 120));
    q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 24));
    q = hn::MulAdd(q, r, hn::Set(d, 1.0f / 6));
    q = hn::MulAdd(q, r, hn::Set(d, 0.5f));
    q = hn::MulAdd(q, r, one);
    q = hn::Mul(q, r);
    const V two_n = pow2(n_both.i);
    // q 2^n is exact (a power of two), so this rounds once, as scalef followed by an add does.
    const V e = hn::MulAdd(q, two_n, hn::Sub(two_n, one));
    const V t = hn::Div(e, hn::Add(e, hn::Set(d, 2.0f)));
    return nan_from(x, hn::CopySignToAbs(t, x));
}

struct VecGates {
    V i, f, g, o;
};

// activate() of gates.hpp.
HWY_INLINE VecGates activate(V pre_i, V pre_f, V pre_g, V pre_o) {
    return {sigmoid_v(pre_i), sigmoid_v(pre_f), tanh_v(pre_g), sigmoid_v(pre_o)};
}

// cell_state(): f c_{t-1} + i g.
HWY_INLINE V cell_state(const VecGates& a, V c_prev) {
    return hn::MulAdd(a.f, c_prev, hn::Mul(a.i, a.g));
}

// hidden_state(): o tanh(c).
HWY_INLINE V hidden_state(V o, V c) { return hn::Mul(o, tanh_v(c)); }

struct VecCellGrads {
    V di, df, dg, d_o, dc_prev;
};

// cell_backward() of gates.hpp, operation for operation, given tanh(c) (the caller computes it, so
// it can run several rows' tanh side by side).
HWY_INLINE VecCellGrads cell_backward(const VecGates& a, V c_prev, V tanh_c, V dh, V dc) {
    const V one = hn::Set(D(), 1.0f);
    const V tanh_grad_c = hn::NegMulAdd(tanh_c, tanh_c, one);
    const V dc_total = hn::Add(dc, hn::Mul(hn::Mul(dh, a.o), tanh_grad_c));
    // Built whole: the implicit default constructor of a struct of vectors gets no target
    // attribute, and GCC then refuses to inline the NEON vectors' constructors into it.
    const V d_o = hn::Mul(hn::Mul(dh, tanh_c), hn::Mul(a.o, hn::Sub(one, a.o)));
    const V di = hn::Mul(hn::Mul(dc_total, a.g), hn::Mul(a.i, hn::Sub(one, a.i)));
    const V df = hn::Mul(hn::Mul(dc_total, c_prev), hn::Mul(a.f, hn::Sub(one, a.f)));
    const V dg = hn::Mul(hn::Mul(dc_total, a.i), hn::NegMulAdd(a.g, a.g, one));
    return {di, df, dg, d_o, hn::Mul(dc_total, a.f)};
}

// ---- memory helpers ---------------------------------------------------------------------------

// The first `count` floats at p (count <= 0: none, >= N: a whole vector), other lanes zero. Reads
// only those floats: the rest may belong to another direction or lie past the array. x86 has
// masked loads that do not fault; elsewhere a tail goes through a small copy.
HWY_INLINE V load_n(const float* p, int64_t count) {
    const D d;
    if (count >= kLanes) return hn::LoadU(d, p);
    if (count <= 0) return hn::Zero(d);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    return hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(count)), d, p);
#else
    HWY_ALIGN float tmp[kLanes] = {};
    std::copy(p, p + count, tmp);
    return hn::Load(d, tmp);
#endif
}

// Writes the first `count` lanes of v to p (count <= 0: none, >= N: all); nothing else is
// touched (another thread may own the floats after them).
HWY_INLINE void store_n(V v, float* p, int64_t count) {
    const D d;
    if (count >= kLanes) {
        hn::StoreU(v, d, p);
        return;
    }
    if (count <= 0) return;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(count)), d, p);
#else
    HWY_ALIGN float tmp[kLanes];
    hn::Store(v, d, tmp);
    std::copy(tmp, tmp + count, p);
#endif
}

// Asks for `lines` cache lines from each of `rows` rows (row i at p + i * ld) ahead of use: the
// next tile's reserve rows come from L3 or memory, and fetching them while the current tile
// computes hides that latency.
HWY_INLINE void prefetch_rows(const float* p, int64_t ld, int64_t rows, int64_t lines) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t q = 0; q < lines; ++q) hwy::Prefetch(p + i * ld + q * kUnitBlock);
}

// Asks for `lines` cache lines from p into L2 only (see kGradPackAhead); Highway's Prefetch
// fetches into L1.
HWY_INLINE void prefetch_l2(const float* p, int64_t lines) {
    for (int64_t q = 0; q < lines; ++q) __builtin_prefetch(p + q * kUnitBlock, 0, 2);
}

// Cache lines covering `vecs` vectors of one 16-unit-aligned group.
constexpr int64_t lines_of(int vecs) { return (vecs * kLanes + kUnitBlock - 1) / kUnitBlock; }

// ---- operand accessors of the micro-kernel ----------------------------------------------------
// Defined per Highway target on purpose, even where a definition has no vector code: one shared
// inline definition would be emitted with different instruction sets in different targets'
// code, and the linker keeps whichever copy it meets first, so an AVX2-only CPU could end up
// running an AVX-512 one.

// A row-major: element (i, k) at p[i * ld + k].
struct RowsA {
    const float* p;
    int64_t ld;
    float at(int i, int64_t k) const { return p[i * ld + k]; }
};

// A packed as tiles of kGradTileCols rows: element (i, k) at p[k * kGradTileCols + i].
struct PackedA {
    const float* p;
    float at(int i, int64_t k) const { return p[k * kGradTileCols + i]; }
};

// B as vectors inside packed strips: vector v of row k at p[v] + 16 k.
template <int NV>
struct StripsB {
    const float* p[NV];
    V load(int v, int64_t k) const { return hn::LoadU(D(), p[v] + k * kUnitBlock); }
};

// B packed as one panel of NV vectors per row: vector v of row k at p + (k NV + v) N.
template <int NV>
struct PanelB {
    const float* p;
    V load(int v, int64_t k) const { return hn::LoadU(D(), p + (k * NV + v) * kLanes); }
};

// acc (MR x NV vectors) += sum over k < depth of A(i, k) * B(k, v), in k order. The loop order
// needs the fewer live operand registers: with more rows than vectors the B vectors stay and the
// A broadcasts stream (6 x 2: 12 + 2 + 1), otherwise the broadcasts stay (3 x 4: 12 + 3 + 1).
template <int MR, int NV, typename A, typename B>
HWY_INLINE void accumulate(int64_t depth, const A& a, const B& b, V (&acc)[MR][NV]) {
    const D d;
    // Two k per iteration halve the loop's counter updates and branch next to its 12 FMAs: the
    // AVX2 training step took 356 instead of 382 ms (medians of 5 alternated runs, CE-short, 1
    // thread, Xeon with AVX-512 running the AVX2 target); 4 was no better than 2 (372 ms).
    HWY_UNROLL(2)
    for (int64_t k = 0; k < depth; ++k) {
        if constexpr (MR > NV) {
            V bv[NV];
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v) bv[v] = b.load(v, k);
            HWY_UNROLL(8)
            for (int i = 0; i < MR; ++i) {
                const V av = hn::Set(d, a.at(i, k));
                HWY_UNROLL(4)
                for (int v = 0; v < NV; ++v) acc[i][v] = hn::MulAdd(av, bv[v], acc[i][v]);
            }
        } else {
            V av[MR];
            HWY_UNROLL(8)
            for (int i = 0; i < MR; ++i) av[i] = hn::Set(d, a.at(i, k));
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v) {
                const V bv = b.load(v, k);
                HWY_UNROLL(8)
                for (int i = 0; i < MR; ++i) acc[i][v] = hn::MulAdd(av[i], bv, acc[i][v]);
            }
        }
    }
}

template <int M, typename F>
HWY_INLINE void dispatch_rest(int64_t rest, int64_t at, const F& f) {
    if constexpr (M > 0) {
        if (rest == M)
            f(Int<M>(), at);
        else
            dispatch_rest<M - 1>(rest, at, f);
    }
}

// Calls f(Int<S>(), start) over [begin, end) in steps of kMax; the last step gets the remainder
// as its compile-time size.
template <int kMax, typename F>
HWY_INLINE void for_each_step(int64_t begin, int64_t end, const F& f) {
    int64_t at = begin;
    for (; at + kMax <= end; at += kMax) f(Int<kMax>(), at);
    dispatch_rest<kMax - 1>(end - at, at, f);
}

// As for_each_step, but a remainder under half a step joins the step before it, as two steps of
// about equal size: a tile of 1 or 2 rows has too few accumulators to hide the FMA latency. Rows
// 32 in tiles of 6 run as 6, 6, 6, 6, 4, 4 instead of 6 x 5 and 2 (3% off the backward step,
// CE-long, 2 threads).
template <int kMax, typename F>
HWY_INLINE void for_each_step_balanced(int64_t begin, int64_t end, const F& f) {
    const int64_t rest = (end - begin) % kMax;
    if (rest == 0 || 2 * rest >= kMax || end - begin < kMax) {
        for_each_step<kMax>(begin, end, f);
        return;
    }
    const int64_t split = end - rest - kMax;
    for_each_step<kMax>(begin, split, f);
    const int64_t second = (kMax + rest) / 2, first = kMax + rest - second;
    dispatch_rest<kMax>(first, split, f);
    dispatch_rest<kMax>(second, split + first, f);
}

// Pointers to the NV vectors of units (or features) [u0, u0 + NV N) in strips (G, 16) of
// stride `stride` starting at p.
template <int NV>
HWY_INLINE StripsB<NV> column_strips(const float* p, int64_t stride, int64_t u0) {
    StripsB<NV> b;
    for (int v = 0; v < NV; ++v) {
        const int64_t u = u0 + v * kLanes;
        b.p[v] = p + u / kUnitBlock * stride + u % kUnitBlock;
    }
    return b;
}

// Pointers to the 4 gate vectors of lanes [part N, part N + N) of block blk in forward strips
// (K, 16) starting at p, from row k0.
HWY_INLINE StripsB<4> gate_strips(const float* p, int64_t k_size, int64_t blk, int64_t part,
                                  int64_t k0) {
    StripsB<4> b;
    for (int g = 0; g < 4; ++g)
        b.p[g] = p + ((blk * 4 + g) * k_size + k0) * kUnitBlock + part * kLanes;
    return b;
}

// ---- input projection -------------------------------------------------------------------------

// Vectors of N floats in one block's gate columns (4 gates x 16 units), gate-major: vector j is
// lanes [j N mod 16, + N) of gate j N / 16.
constexpr int64_t kBlockVecs = 4 * kUnitBlock / kLanes;

// Pointers to vectors [j0, j0 + 4) of block blk (see kBlockVecs) in forward strips (K, 16)
// starting at p. On AVX-512 these are the 4 gates; with N = 8 two gates, each as two halves of
// its strip, so the tile reads whole cache lines.
HWY_INLINE StripsB<4> block_vecs(const float* p, int64_t k_size, int64_t blk, int64_t j0) {
    StripsB<4> b;
    for (int v = 0; v < 4; ++v) {
        const int64_t lane = (j0 + v) * kLanes;
        b.p[v] = p + ((blk * 4 + lane / kUnitBlock) * k_size) * kUnitBlock + lane % kUnitBlock;
    }
    return b;
}

// gates rows [r0, r0 + MR), columns [col, col + 4 N) with col = block blk's column j0 N,
// overwritten <- x (rows, ldx) W_ih^T + bias. A plain GEMM: its tiles need not hold the 4 gates
// of a unit, so they cover 4 consecutive vectors, whole lines of the strips and of the gates
// rows. With N = 8 the earlier tile (4 gates x half a strip) read every weight line twice from
// L2 and wrote each streamed line as two halves far apart, which the write-combining buffers
// cannot merge: on braun/1x320-CE-short (1 thread, Xeon with AVX-512 running the AVX2 target)
// its perf samples fell from 0.49 to 0.25 of the weight-gradient tile's, about 6% of the step.
template <int MR>
HWY_NOINLINE void projection_tile(const FusedLayout& lay, const FusedBuffers<float>& buf,
                                  const float* x, int64_t ldx, int64_t in, int64_t blk, int64_t j0,
                                  float* gates, bool stream, int64_t r0) {
    const D d;
    const int64_t gc = lay.gate_cols, col = blk * 4 * kUnitBlock + j0 * kLanes;
    V acc[MR][4];
    HWY_UNROLL(4)
    for (int v = 0; v < 4; ++v) {
        const V b = hn::LoadU(d, buf.bias + col + v * kLanes);
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) acc[i][v] = b;
    }
    accumulate<MR, 4>(in, RowsA{x + r0 * ldx, ldx}, block_vecs(buf.w_ih_fwd, in, blk, j0), acc);
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int v = 0; v < 4; ++v) {
            float* dst = gates + (r0 + i) * gc + col + v * kLanes;
            if (stream)
                hn::Stream(acc[i][v], d, dst);  // rows of G floats from a 64-byte boundary: aligned
            else
                hn::StoreU(acc[i][v], d, dst);
        }
    }
}

// For a whole sequence the rows go out with streaming stores: they are read back long after the
// cache has turned over. The flush orders those stores before the caller's barrier.
void input_projection(const FusedLayout& lay, const FusedBuffers<float>& buf, const float* x,
                      int64_t ldx, int64_t rows, int64_t in, float* gates, BlockRange own,
                      bool stream) {
    static_assert(kBlockVecs % 4 == 0, "a block is a whole number of projection tiles");
    for (int64_t r0 = 0; r0 < rows; r0 += kSimdProjectionRows) {
        const int64_t chunk = std::min(kSimdProjectionRows, rows - r0);
        for (int64_t blk = own.begin; blk < own.end; ++blk)
            for (int64_t j0 = 0; j0 < kBlockVecs; j0 += 4)
                for_each_step<kGateTileRows>(0, chunk, [&](auto mr, int64_t r) HWY_ATTR {
                    projection_tile<decltype(mr)::value>(lay, buf, x + r0 * ldx, ldx, in, blk, j0,
                                                         gates + r0 * lay.gate_cols, stream, r);
                });
    }
    if (stream) hwy::FlushStream();
}

// ---- forward step -----------------------------------------------------------------------------

// Depth of one pass of the recurrent GEMM over a block. Across a pass, every part and row tile
// of the block reuses the same kForwardDepth rows of its 4 gate strips: 64 x 4 lines = 16 KiB,
// which stay in a 32 KiB L1d beside the gates rows. In one pass over the whole depth (R = 320:
// 80 KiB of strips) each row tile fetched the strips from L2 again, and with N = 8 each part used
// half of every line it fetched. Measured on a 2-vCPU EPYC Zen 4 running the AVX2 target, 1
// thread, alternating builds: deepbench H 512 / 1024, N 64, T 25 forward 78.7-83.5 / 313-325 ms
// against 81.1-92.2 / 324-335 in one pass; 32 and 128 rows were no better than 64.
constexpr int64_t kForwardDepth = 64;

// Rows [r0, r0 + MR) of a forward segment, lanes [part N, part N + N) of block blk, recurrent
// features [k0, k0 + depth): acc = s.gates (the input projection, or the sums of the passes
// before) + h_{t-1} W_hh^T over those features. On the last pass (`last`) the activations,
// c_t = f c_{t-1} + i g and h_t = o tanh(c_t) follow from the registers; on the others the sums
// go back to s.gates. A float stored and reloaded is the same float, so the result is that of one
// pass over the whole depth.
template <int MR>
HWY_NOINLINE void forward_tile(const FusedLayout& lay, const FusedBuffers<float>& buf,
                               const ForwardSegment<float>& s, int64_t blk, int64_t part,
                               int64_t k0, int64_t depth, bool last, int64_t r0) {
    const D d;
    const int64_t gc = lay.gate_cols, hidden = lay.hidden;
    const int64_t col = blk * 4 * kUnitBlock + part * kLanes,
                  unit = blk * kUnitBlock + part * kLanes;
    V acc[MR][4];
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int g = 0; g < 4; ++g)
            acc[i][g] = hn::LoadU(d, s.gates + (r0 + i) * gc + col + g * kUnitBlock);
    }
    // The next tile's gates rows in the first pass (the input projection streamed them out to
    // memory) and its epilogue rows in the last; the lines of a block serve all its parts. The
    // first-pass fetch took 2.5-3.7% off the forward step (CE-short, one thread, AVX2 target).
    const int64_t next = std::min<int64_t>(kGateTileRows, s.rows - r0 - MR);
    if ((k0 == 0 || last) && next > 0 && part == 0)
        prefetch_rows(s.gates + (r0 + MR) * gc + col, gc, next, 4);
    if (last && next > 0 && part == 0)
        prefetch_rows(s.c_prev + (r0 + MR) * s.ld_c_prev + unit, s.ld_c_prev, next, 1);
    accumulate<MR, 4>(depth, RowsA{s.h_prev + r0 * s.ld_h_prev + k0, s.ld_h_prev},
                      gate_strips(buf.w_hh_fwd, lay.recurrent, blk, part, k0), acc);
    if (!last) {
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) {
            HWY_UNROLL(4)
            for (int g = 0; g < 4; ++g)
                hn::StoreU(acc[i][g], d, s.gates + (r0 + i) * gc + col + g * kUnitBlock);
        }
        return;
    }
    if (hidden - unit < kLanes) {  // padded units: see the layout notes
        const auto real = hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(hidden - unit, 0)));
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) {
            HWY_UNROLL(4)
            for (int g = 0; g < 4; ++g) acc[i][g] = hn::IfThenElseZero(real, acc[i][g]);
        }
    }
    // c of every row first, then h = o tanh(c): the rows' tanh chains run side by side instead of
    // each waiting behind the next row's gates (2% off the forward step, as above). acc[i][0] and
    // acc[i][1] hold row i's c and o in between.
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        const int64_t r = r0 + i;
        const VecGates a = activate(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        float* g = s.gates + r * gc + col;
        hn::StoreU(a.i, d, g);
        hn::StoreU(a.f, d, g + kUnitBlock);
        hn::StoreU(a.g, d, g + 2 * kUnitBlock);
        hn::StoreU(a.o, d, g + 3 * kUnitBlock);
        const V c = cell_state(a, hn::LoadU(d, s.c_prev + r * s.ld_c_prev + unit));
        hn::StoreU(c, d, s.c + r * s.ld_c + unit);
        acc[i][0] = c;
        acc[i][1] = a.o;
    }
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i)
        store_n(hidden_state(acc[i][1], acc[i][0]), s.h + (r0 + i) * s.ld_h + unit, hidden - unit);
}

// Block by block, pass by pass over the depth (kForwardDepth), row tile by row tile, and the parts
// of the block (N = 8: its two halves) one after the other on the same rows. Parts outermost ran
// each part over all rows, so a pass's gates and h rows (16 KiB each beside 16 KiB of strips) left
// L1 before the second part read them again; this order took 3-5% off the forward step
// (braun/1x320-CE-short at 1 and 2 threads, CE-long at 2, calls alternating in one process, EPYC
// Zen 4 running the AVX2 target).
void forward_step(const FusedLayout& lay, const FusedBuffers<float>& buf,
                  const ForwardSegment<float>& s, BlockRange own) {
    const int64_t gc = lay.gate_cols, first = std::min<int64_t>(kGateTileRows, s.rows);
    const int64_t depth = lay.recurrent;
    for (int64_t blk = own.begin; blk < own.end; ++blk) {
        // The first tile of the next block is fetched while this block runs.
        if (blk + 1 < own.end) {
            prefetch_rows(s.gates + (blk + 1) * 4 * kUnitBlock, gc, first, 4);
            prefetch_rows(s.c_prev + (blk + 1) * kUnitBlock, s.ld_c_prev, first, 1);
        }
        // At least one pass, so a layer without recurrent features (R = 0) still activates.
        int64_t k0 = 0;
        do {
            const int64_t len = std::min(kForwardDepth, depth - k0);
            const bool last = k0 + len >= depth;
            for_each_step<kGateTileRows>(0, s.rows, [&](auto mr, int64_t r) HWY_ATTR {
                for (int64_t part = 0; part < kUnitBlock / kLanes; ++part)
                    forward_tile<decltype(mr)::value>(lay, buf, s, blk, part, k0, len, last, r);
            });
            k0 += len;
        } while (k0 < depth);
    }
}

// ---- backward step and dh0 --------------------------------------------------------------------

// Gate gradients of row r, the N units from `unit` (gate columns from `col`), from the recurrent
// part of dh; adds them to bias (the 4 gate vectors of those units).
HWY_INLINE void cell_grads(const FusedLayout& lay, const BackwardSegment<float>& seg, int64_t r,
                           int64_t unit, int64_t col, V dh_carry, V tanh_c, V (&bias)[4]) {
    const D d;
    const int64_t gc = lay.gate_cols, hp = lay.hidden_padded;
    const V dy = load_n(seg.dy + r * seg.ld_dy + unit, lay.hidden - unit);
    float* g = seg.gates + r * gc + col;
    const VecGates a{hn::LoadU(d, g), hn::LoadU(d, g + kUnitBlock),
                     hn::LoadU(d, g + 2 * kUnitBlock), hn::LoadU(d, g + 3 * kUnitBlock)};
    float* dc = seg.dc + r * hp + unit;
    const VecCellGrads gr = cell_backward(a, hn::LoadU(d, seg.c_prev + r * hp + unit), tanh_c,
                                          hn::Add(dh_carry, dy), hn::LoadU(d, dc));
    hn::StoreU(gr.di, d, g);
    hn::StoreU(gr.df, d, g + kUnitBlock);
    hn::StoreU(gr.dg, d, g + 2 * kUnitBlock);
    hn::StoreU(gr.d_o, d, g + 3 * kUnitBlock);
    hn::StoreU(gr.dc_prev, d, dc);
    bias[0] = hn::Add(bias[0], gr.di);
    bias[1] = hn::Add(bias[1], gr.df);
    bias[2] = hn::Add(bias[2], gr.dg);
    bias[3] = hn::Add(bias[3], gr.d_o);
}

// Rows [r0, r0 + MR) x units [u0, u0 + NV N): dh = dgates_next W_hh (or seg->dh_carry), then
// either the fused gate gradients (seg set) or a plain store into dh0 (seg null; dgates (rows, G)
// and dh0 (rows, Hp) given).
template <int MR, int NV>
HWY_NOINLINE void backward_tile(const FusedLayout& lay, const FusedBuffers<float>& buf,
                                const BackwardSegment<float>* seg, const float* dgates, float* dh0,
                                int64_t u0, int64_t r0) {
    const D d;
    const int64_t gc = lay.gate_cols, hp = lay.hidden_padded;
    const float* dg = seg ? seg->dgates_next : dgates;
    V acc[MR][NV];
    if (seg) {
        // This tile's epilogue operands, fetched while its GEMM runs.
        const int64_t lines = lines_of(NV), col = u0 / kUnitBlock * 4 * kUnitBlock;
        prefetch_rows(seg->gates + r0 * gc + col, gc, MR, 4 * lines);
        prefetch_rows(seg->c + r0 * hp + u0, hp, MR, lines);
        prefetch_rows(seg->c_prev + r0 * hp + u0, hp, MR, lines);
        prefetch_rows(seg->dy + r0 * seg->ld_dy + u0, seg->ld_dy, MR, lines);
    }
    if (dg) {
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) {
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v) acc[i][v] = hn::Zero(d);
        }
        accumulate<MR, NV>(gc, RowsA{dg + r0 * gc, gc},
                           column_strips<NV>(buf.w_hh_bwd, gc * kUnitBlock, u0), acc);
    } else {
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) {
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v)
                acc[i][v] = hn::LoadU(d, seg->dh_carry + (r0 + i) * hp + u0 + v * kLanes);
        }
    }
    if (!seg) {
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i) {
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v)
                hn::StoreU(acc[i][v], d, dh0 + (r0 + i) * hp + u0 + v * kLanes);
        }
        return;
    }
    // Vector by vector, so its bias gradient stays in registers across the rows (added in row
    // order, as a row-at-a-time update would).
    HWY_UNROLL(4)
    for (int v = 0; v < NV; ++v) {
        const int64_t unit = u0 + v * kLanes;
        const int64_t col = unit / kUnitBlock * 4 * kUnitBlock + unit % kUnitBlock;
        float* bg = seg->bias_grad + col;
        V bias[4];
        HWY_UNROLL(4)
        for (int q = 0; q < 4; ++q) bias[q] = hn::LoadU(d, bg + q * kUnitBlock);
        // tanh(c) of every row first: the rows' polynomial chains then overlap instead of each
        // row's gradients waiting on its own (3% off the backward step, CE-long, 2 threads).
        V tanh_c[MR];
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i)
            tanh_c[i] = tanh_v(hn::LoadU(d, seg->c + (r0 + i) * hp + unit));
        HWY_UNROLL(8)
        for (int i = 0; i < MR; ++i)
            cell_grads(lay, *seg, r0 + i, unit, col, acc[i][v], tanh_c[i], bias);
        HWY_UNROLL(4)
        for (int q = 0; q < 4; ++q) hn::StoreU(bias[q], d, bg + q * kUnitBlock);
    }
}

// Over the own units in groups of kTileVecs vectors, each group over the rows in tiles.
void backward_units(const FusedLayout& lay, const FusedBuffers<float>& buf,
                    const BackwardSegment<float>* seg, const float* dgates, int64_t rows,
                    float* dh0, BlockRange own) {
    for_each_step<kTileVecs>(own.begin * kUnitBlock / kLanes, own.end * kUnitBlock / kLanes,
                             [&](auto nv, int64_t vec0) HWY_ATTR {
                                 for_each_step_balanced<kTileRows>(
                                     0, rows, [&](auto mr, int64_t r) HWY_ATTR {
                                         backward_tile<decltype(mr)::value, decltype(nv)::value>(
                                             lay, buf, seg, dgates, dh0, vec0 * kLanes, r);
                                     });
                             });
}

void backward_step(const FusedLayout& lay, const FusedBuffers<float>& buf,
                   const BackwardSegment<float>& s, BlockRange own) {
    backward_units(lay, buf, &s, nullptr, s.rows, nullptr, own);
}

void backward_dh0(const FusedLayout& lay, const FusedBuffers<float>& buf, int64_t rows,
                  const float* dgates, float* dh0, BlockRange own) {
    backward_units(lay, buf, nullptr, dgates, rows, dh0, own);
}

// ---- input gradients --------------------------------------------------------------------------

// d_in rows [r0, r0 + MR) x features [f0, f0 + NV N) (+)= dgates (rows, G) W_ih; features >= in
// are neither read nor written.
template <int MR, int NV>
HWY_NOINLINE void input_grad_tile(const FusedLayout& lay, const FusedBuffers<float>& buf,
                                  const float* dgates, int64_t in, float* d_in, int64_t ld,
                                  bool add, int64_t f0, int64_t r0) {
    const D d;
    const int64_t gc = lay.gate_cols;
    V acc[MR][NV];
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int v = 0; v < NV; ++v) {
            const int64_t f = f0 + v * kLanes;
            acc[i][v] = add ? load_n(d_in + (r0 + i) * ld + f, in - f) : hn::Zero(d);
        }
    }
    accumulate<MR, NV>(gc, RowsA{dgates + r0 * gc, gc},
                       column_strips<NV>(buf.w_ih_bwd, gc * kUnitBlock, f0), acc);
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int v = 0; v < NV; ++v) {
            const int64_t f = f0 + v * kLanes;
            store_n(acc[i][v], d_in + (r0 + i) * ld + f, in - f);
        }
    }
}

void input_grads(const FusedLayout& lay, const FusedBuffers<float>& buf, const float* dgates,
                 BlockRange rows, int64_t in, float* d_in, int64_t ld_in, bool accumulate_into) {
    const int64_t vecs = (in + kLanes - 1) / kLanes;
    for (int64_t r0 = rows.begin; r0 < rows.end; r0 += kSimdInputGradRows) {
        const int64_t chunk = std::min(kSimdInputGradRows, rows.end - r0);
        const float* dg = dgates + r0 * lay.gate_cols;
        float* out = d_in + r0 * ld_in;
        for_each_step<kTileVecs>(0, vecs, [&](auto nv, int64_t vec0) HWY_ATTR {
            for_each_step<kTileRows>(0, chunk, [&](auto mr, int64_t r) HWY_ATTR {
                input_grad_tile<decltype(mr)::value, decltype(nv)::value>(
                    lay, buf, dg, in, out, ld_in, accumulate_into, vec0 * kLanes, r);
            });
        });
    }
}

// ---- weight gradients -------------------------------------------------------------------------

// One K-chunk of dw (4H, width) += dG^T B, the gate rows of the own blocks. C rows are gate
// columns (a packed tile of kGradTileCols at a time), C columns the partner's features (a panel
// of NV vectors at a time, packed first: read in place, its rows ld apart fall into a few L1 sets
// and are evicted between tiles; packed, the panel stays in L1 across all of them).
struct GradChunk {
    const FusedLayout* lay;
    const float* a_pack;  // the chunk's dgates, own columns, packed in tiles
    const SimdChunkSegment* segs;
    int64_t seg_count, len, width, c_begin, c_count;
    float* dw;
    float* b_pack;  // (len, NV N) scratch
};

// dw rows of gate columns [c_begin + r, + MR) x features [col0, col0 + NV N) += the chunk's
// products; rows of padded units and features >= width are neither read nor written.
template <int MR, int NV>
HWY_NOINLINE void grad_tile(const GradChunk& g, int64_t col0, int64_t r) {
    const int64_t hidden = g.lay->hidden;
    float* rows[MR];
    bool valid[MR];
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        const int64_t c = g.c_begin + r + i, blk = c / (4 * kUnitBlock);
        const int64_t gate = c / kUnitBlock % 4, unit = blk * kUnitBlock + c % kUnitBlock;
        valid[i] = unit < hidden;
        rows[i] = valid[i] ? g.dw + (gate * hidden + unit) * g.width + col0 : g.dw;
    }
    // Summed from zero, then added to dw (as the AVX-512 kernel does, and for the same reason:
    // accumulating onto dw made each element one sequential sum over all T * N frames).
    const D d;
    V acc[MR][NV];
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int v = 0; v < NV; ++v) acc[i][v] = hn::Zero(d);
    }
    // The next tile's rows of C: consecutive gate columns are consecutive rows of dw within a
    // gate, and a tile straddling a gate boundary just prefetches less usefully.
    if (r + 2 * MR <= g.c_count) {
        const int64_t c = g.c_begin + r + MR, blk = c / (4 * kUnitBlock);
        const int64_t gate = c / kUnitBlock % 4, unit = blk * kUnitBlock + c % kUnitBlock;
        if (unit + MR <= hidden)
            prefetch_rows(g.dw + (gate * hidden + unit) * g.width + col0, g.width, MR,
                          lines_of(NV));
    }
    accumulate<MR, NV>(g.len, PackedA{g.a_pack + r / kGradTileCols * kGradTileStride},
                       PanelB<NV>{g.b_pack}, acc);
    HWY_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
        HWY_UNROLL(4)
        for (int v = 0; v < NV; ++v) {
            const int64_t n = valid[i] ? g.width - col0 - v * kLanes : 0;
            float* out = rows[i] + v * kLanes;
            store_n(hn::Add(load_n(out, n), acc[i][v]), out, n);
        }
    }
}

// Packs the chunk's partner rows for features [col0, col0 + NV N) (zeros past width; they only
// feed lanes never stored), then runs every tile of gate columns over them.
template <int NV>
void grad_panel(const GradChunk& g, int64_t col0) {
    const D d;
    for (int64_t s = 0; s < g.seg_count; ++s)
        for (int64_t j = 0; j < g.segs[s].len; ++j) {
            const float* src = g.segs[s].b + j * g.segs[s].ld + col0;
            float* dst = g.b_pack + (g.segs[s].k_off + j) * NV * kLanes;
            HWY_UNROLL(4)
            for (int v = 0; v < NV; ++v)
                hn::StoreU(load_n(src + v * kLanes, g.width - col0 - v * kLanes), d,
                           dst + v * kLanes);
        }
    for_each_step<kTileRows>(0, g.c_count, [&](auto mr, int64_t r) HWY_ATTR {
        grad_tile<decltype(mr)::value, NV>(g, col0, r);
    });
}

// The parts of `runs` (sorted, covering every compact row) inside [k0, k0 + len).
int64_t chunk_segments(const RowRun<float>* runs, int64_t run_count, int64_t& cursor, int64_t k0,
                       int64_t len, SimdChunkSegment* out) {
    int64_t count = 0;
    while (cursor < run_count && runs[cursor].k0 + runs[cursor].count <= k0) ++cursor;
    for (int64_t i = cursor; i < run_count && runs[i].k0 < k0 + len; ++i) {
        const int64_t begin = std::max(runs[i].k0, k0);
        const int64_t end = std::min(runs[i].k0 + runs[i].count, k0 + len);
        if (end <= begin) continue;
        out[count++] = SimdChunkSegment{
            begin - k0, end - begin, runs[i].rows + (begin - runs[i].k0) * runs[i].ld, runs[i].ld};
    }
    return count;
}

// a_pack <- dgates (S, G) rows [k0, k0 + len), columns [c_begin, c_begin + c_count), as tiles of
// kGradTileCols columns (tile t, row k at a_pack + t * kGradTileStride + k * kGradTileCols; the
// last tile holds the remainder). Overwrites.
void pack_grad_chunk(const FusedLayout& lay, const float* dgates, int64_t k0, int64_t len,
                     int64_t c_begin, int64_t c_count, float* a_pack) {
    const int64_t gc = lay.gate_cols, row_lines = (c_count + kUnitBlock - 1) / kUnitBlock;
    // Row by row, so each source line is read once; the tiles are written in parallel streams.
    for (int64_t k = 0; k < len; ++k) {
        const float* src = dgates + (k0 + k) * gc + c_begin;
        float* dst = a_pack + k * kGradTileCols;
        if (k + kGradPackAhead < len) prefetch_l2(src + kGradPackAhead * gc, row_lines);
        // A whole tile row is a fixed-size copy (two moves) rather than a loop of scalar copies:
        // perf's share of this function in braun/1x320-CE-short (AVX2 target, 2 threads, EPYC
        // Zen 4) fell from 3.3% to 2.2-2.6% (one profile before, two after).
        int64_t c0 = 0;
        float* tile = dst;
        for (; c0 + kGradTileCols <= c_count; c0 += kGradTileCols, tile += kGradTileStride)
            std::memcpy(tile, src + c0, kGradTileCols * sizeof(float));
        if (c0 < c_count) std::memcpy(tile, src + c0, (c_count - c0) * sizeof(float));
    }
}

void weight_grads(const FusedLayout& lay, const FusedBuffers<float>& buf, const float* dgates,
                  const RowRun<float>* x_runs, int64_t x_run_count, const RowRun<float>* h_runs,
                  int64_t h_run_count, int64_t in, float* dw_ih, float* dw_hh, BlockRange own) {
    if (own.count() == 0) return;
    const int64_t c_begin = own.begin * 4 * kUnitBlock, c_count = own.count() * 4 * kUnitBlock;
    float* a_pack = buf.a_pack + (c_begin + kGradTileCols * own.begin) * kSimdGradChunk +
                    kGradTilePad * kGradTilesPerBlock * own.begin;
    float* b_pack = buf.b_pack + own.begin * kGradChunk * kGradPanelCols;
    int64_t total = 0;
    for (int64_t i = 0; i < x_run_count; ++i) total += x_runs[i].count;
    SimdChunkSegment segs[kSimdGradChunk];
    int64_t x_cursor = 0, h_cursor = 0;
    for (int64_t k0 = 0; k0 < total; k0 += kSimdGradChunk) {
        const int64_t len = std::min(kSimdGradChunk, total - k0);
        pack_grad_chunk(lay, dgates, k0, len, c_begin, c_count, a_pack);
        GradChunk g{&lay, a_pack, segs, 0, len, in, c_begin, c_count, dw_ih, b_pack};
        auto panels = [&](int64_t width) {
            for_each_step<kTileVecs>(0, (width + kLanes - 1) / kLanes,
                                     [&](auto nv, int64_t vec0) HWY_ATTR {
                                         grad_panel<decltype(nv)::value>(g, vec0 * kLanes);
                                     });
        };
        g.seg_count = chunk_segments(x_runs, x_run_count, x_cursor, k0, len, segs);
        panels(in);
        g.seg_count = chunk_segments(h_runs, h_run_count, h_cursor, k0, len, segs);
        g.width = lay.recurrent;
        g.dw = dw_hh;
        panels(lay.recurrent);
    }
}

// ---- the gate math alone (tests) ---------------------------------------------------------------

void activations(const float* x, int64_t count, float* sigmoid_out, float* tanh_out) {
    for (int64_t i = 0; i < count; i += kLanes) {
        const V v = load_n(x + i, count - i);
        store_n(sigmoid_v(v), sigmoid_out + i, count - i);
        store_n(tanh_v(v), tanh_out + i, count - i);
    }
}

void cell(const float* pre, const float* c_prev, const float* dh, const float* dc, float* out) {
    const D d;
    for (int64_t u = 0; u < kUnitBlock; u += kLanes) {
        const VecGates a = activate(hn::LoadU(d, pre + u), hn::LoadU(d, pre + kUnitBlock + u),
                                    hn::LoadU(d, pre + 2 * kUnitBlock + u),
                                    hn::LoadU(d, pre + 3 * kUnitBlock + u));
        const V cp = hn::LoadU(d, c_prev + u);
        const V c = cell_state(a, cp);
        const VecCellGrads g =
            cell_backward(a, cp, tanh_v(c), hn::LoadU(d, dh + u), hn::LoadU(d, dc + u));
        const V all[11] = {a.i,  a.f,  a.g,  a.o,   c,        hidden_state(a.o, c),
                           g.di, g.df, g.dg, g.d_o, g.dc_prev};
        for (int q = 0; q < 11; ++q) hn::StoreU(all[q], d, out + q * kUnitBlock + u);
    }
}

const SimdFusedOps kFusedOps = {HWY_TARGET,    kLanes,       input_projection, forward_step,
                                backward_step, backward_dh0, weight_grads,     input_grads,
                                activations,   cell};

}  // namespace HWY_NAMESPACE
}  // namespace lstm::kernels::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lstm::kernels::cpu {
namespace {

// The table of `target`, null where it is not compiled into this file.
const SimdFusedOps* ops_for(int64_t target) {
#define LSTM_FUSED_TARGET(TARGET, NS) \
    if (target == (TARGET)) return &NS::kFusedOps;
#if HWY_TARGETS & HWY_AVX3_DL
    LSTM_FUSED_TARGET(HWY_AVX3_DL, N_AVX3_DL)
#endif
#if HWY_TARGETS & HWY_AVX3
    LSTM_FUSED_TARGET(HWY_AVX3, N_AVX3)
#endif
#if HWY_TARGETS & HWY_AVX2
    LSTM_FUSED_TARGET(HWY_AVX2, N_AVX2)
#endif
#if HWY_TARGETS & HWY_SSE4
    LSTM_FUSED_TARGET(HWY_SSE4, N_SSE4)
#endif
#if HWY_TARGETS & HWY_SSSE3
    LSTM_FUSED_TARGET(HWY_SSSE3, N_SSSE3)
#endif
#if HWY_TARGETS & HWY_NEON
    LSTM_FUSED_TARGET(HWY_NEON, N_NEON)
#endif
#if HWY_TARGETS & HWY_PPC8
    LSTM_FUSED_TARGET(HWY_PPC8, N_PPC8)
#endif
#if HWY_TARGETS & HWY_WASM
    LSTM_FUSED_TARGET(HWY_WASM, N_WASM)
#endif
#if HWY_TARGETS & HWY_EMU128
    LSTM_FUSED_TARGET(HWY_EMU128, N_EMU128)
#endif
#if HWY_TARGETS & HWY_SCALAR
    LSTM_FUSED_TARGET(HWY_SCALAR, N_SCALAR)
#endif
#undef LSTM_FUSED_TARGET
    return nullptr;
}

// The targets ops_for knows, as a bit set.
int64_t compiled_targets() {
    int64_t bits = 0;
    for (int bit = 0; bit < 63; ++bit)
        if (ops_for(int64_t{1} << bit)) bits |= int64_t{1} << bit;
    return bits;
}

// The best (lowest) bit of `bits`; the emulated fallback when empty.
int64_t best_of(int64_t bits) {
    if (bits == 0) return HWY_STATIC_TARGET;
    return bits & -bits;
}

// The table of `target`, or of the best one this CPU runs when it is not compiled.
const SimdFusedOps* ops_or_best(int64_t target) {
    const SimdFusedOps* ops = ops_for(target);
    return ops ? ops : ops_for(best_of(simd_fused_targets()));
}

}  // namespace

int64_t simd_fused_targets() { return compiled_targets() & supported_targets(); }

int64_t simd_fused_avx2_target() { return ops_for(HWY_AVX2) ? HWY_AVX2 : 0; }

int64_t simd_fused_neon_target() { return ops_for(HWY_NEON) ? HWY_NEON : 0; }

int64_t simd_fused_avx512_target() {
    // AVX3 first: it is the target that was measured, and it runs on every AVX-512 CPU with BW,
    // DQ and VL. AVX3_DL is compiled only as a baseline, where the CPU is known to have it.
    if (ops_for(HWY_AVX3)) return HWY_AVX3;
    return ops_for(HWY_AVX3_DL) ? HWY_AVX3_DL : 0;
}

bool simd_fused_runs_avx2() {
    // Checked once: supported_targets() runs CPUID (slow in a virtual machine). What takes AVX2
    // away for good, LSTM_MAX_CPU_ISA, is in force before this first check; restrict_simd_to_avx2()
    // never does, and the tests' SSE4 scopes run no fused kernels.
    static const bool runs = [] {
        const int64_t avx2 = simd_fused_avx2_target();
        return avx2 != 0 && (simd_fused_targets() & avx2) != 0;
    }();
    return runs;
}

const char* simd_fused_target_name(int64_t target) { return hwy::TargetName(target); }

int64_t simd_fused_lanes(int64_t target) {
    const SimdFusedOps* ops = ops_for(target);
    return ops ? ops->lanes : 0;
}

void simd_fused_activations(int64_t target, const float* x, int64_t count, float* sigmoid_out,
                            float* tanh_out) {
    ops_or_best(target)->activations(x, count, sigmoid_out, tanh_out);
}

void simd_fused_cell(int64_t target, const float* pre, const float* c_prev, const float* dh,
                     const float* dc, float* out) {
    ops_or_best(target)->cell(pre, c_prev, dh, dc, out);
}

SimdFusedKernels::SimdFusedKernels(const FusedLayout& lay, const FusedBuffers<float>& buf)
    : SimdFusedKernels(lay, buf, best_of(simd_fused_targets())) {}

SimdFusedKernels::SimdFusedKernels(const FusedLayout& lay, const FusedBuffers<float>& buf,
                                   int64_t target)
    : lay_(lay), buf_(buf), ops_(ops_or_best(target)) {}

int64_t SimdFusedKernels::target() const { return ops_->target; }

void SimdFusedKernels::pack_forward(const float* w_ih, int64_t in, const float* w_hh,
                                    const float* b_ih, const float* b_hh, BlockRange own) const {
    pack_gate_strips(w_ih, in, lay_, own, buf_.w_ih_fwd);
    pack_gate_strips(w_hh, lay_.recurrent, lay_, own, buf_.w_hh_fwd);
    pack_bias_interleaved(b_ih, b_hh, lay_, own, buf_.bias);
}

void SimdFusedKernels::input_projection(const float* x, int64_t ldx, int64_t rows, int64_t in,
                                        float* gates, BlockRange own,
                                        ProjectionTarget target) const {
    ops_->input_projection(lay_, buf_, x, ldx, rows, in, gates, own,
                           target == ProjectionTarget::whole_sequence);
}

void SimdFusedKernels::forward_step(const ForwardSegment<float>& s, BlockRange own) const {
    ops_->forward_step(lay_, buf_, s, own);
}

void SimdFusedKernels::pack_backward(const float* w_ih, int64_t in, const float* w_hh,
                                     BlockRange own) const {
    if (w_hh != nullptr) pack_column_strips(w_hh, lay_.hidden, lay_, own, buf_.w_hh_bwd);
    pack_column_strips(w_ih, in, lay_, own, buf_.w_ih_bwd);
}

void SimdFusedKernels::backward_step(const BackwardSegment<float>& s, BlockRange own) const {
    ops_->backward_step(lay_, buf_, s, own);
}

void SimdFusedKernels::backward_dh0(int64_t rows, const float* dgates, float* dh0,
                                    BlockRange own) const {
    ops_->backward_dh0(lay_, buf_, rows, dgates, dh0, own);
}

void SimdFusedKernels::weight_grads(const float* dgates, const RowRun<float>* x_runs,
                                    int64_t x_run_count, const RowRun<float>* h_runs,
                                    int64_t h_run_count, int64_t in, float* dw_ih, float* dw_hh,
                                    BlockRange own) const {
    ops_->weight_grads(lay_, buf_, dgates, x_runs, x_run_count, h_runs, h_run_count, in, dw_ih,
                       dw_hh, own);
}

void SimdFusedKernels::input_grads(const float* dgates, BlockRange rows, int64_t in, float* d_in,
                                   int64_t ld_in, bool accumulate) const {
    ops_->input_grads(lay_, buf_, dgates, rows, in, d_in, ld_in, accumulate);
}

}  // namespace lstm::kernels::cpu
#endif  // HWY_ONCE
