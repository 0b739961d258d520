// What the registry tests cannot see of the `fused` variant: its instruction-set paths (the
// registry runs whichever one is automatic), shapes large enough for full micro-tiles, inference
// forward, mixing paths between forward and backward, thread-count invariance of the SIMD paths
// (each with and without a projection), projections and bias=False on every path,
// every Highway target of kernels/cpu/fused_simd.hpp (not only the AVX2 one the avx2 path runs),
// the packed weight layouts, the vector gate math against kernels/common/gates.hpp, the
// instruction-set switch itself, and that its denormal flushing stays inside its team.

#include "lstm/variants/fused.hpp"

#include <omp.h>
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fused_paths.hpp"
#include "kernels/common/gates.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/fused_cell.hpp"
#include "kernels/cpu/fused_simd.hpp"
#include "kernels/cpu/team.hpp"
#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/layer.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;
using Catch::Matchers::Contains;
using cpu::FusedIsa;

namespace {

const cpu::FusedVariant& fused_variant() {
    static const cpu::FusedVariant v;
    return v;
}

using IsaScope = test::FusedIsaScope;

// Sets the OpenMP team size for the scope.
struct ThreadScope {
    int saved = omp_get_max_threads();
    explicit ThreadScope(int threads) { omp_set_num_threads(threads); }
    ~ThreadScope() { omp_set_num_threads(saved); }
    ThreadScope(const ThreadScope&) = delete;
    ThreadScope& operator=(const ThreadScope&) = delete;
};

// Those whose own GEMMs sum every output element in a fixed order (same bits for any split).
std::vector<FusedIsa> ordered_isas() {
    std::vector<FusedIsa> out;
    for (FusedIsa isa : test::available_fused_isas())
        if (isa != FusedIsa::eigen) out.push_back(isa);
    return out;
}

// Big enough for full 6-row tiles and 4-block panels, with remainders of both and padded units
// (H = 70: blocks of 16, 10 padded units; N = 14: tiles 6 + 6 + 2). The 30-step case has more
// valid rows per direction (277) than two weight-gradient chunks, and I + H = 90 partner columns:
// two full chunks and a tail, a full and a partial packed partner panel. The last case does the
// same for the longest chunks (kGradChunkMax rows, the AVX2 kernels'): 1113 rows per direction.
std::vector<Shape> tile_shapes() {
    return {
        {"H 40, I 50, bi, 30 steps, mixed lengths",
         {50, 40, 1, true},
         30,
         11,
         {30, 25, 30, 17, 30, 28, 9, 30, 22, 30, 26},
         true},
        {"H 70, I 37, bi, 2 layers, mixed lengths",
         {37, 70, 2, true},
         6,
         14,
         {6, 2, 5, 6, 1, 3, 6, 4, 6, 5, 2, 6, 1, 6},
         true},
        {"H 64, I 16, uni, equal lengths", {16, 64, 1, false}, 5, 12, {}, true},
        {"H 33, I 123, uni, no state", {123, 33, 1, false}, 4, 7, {4, 4, 3, 1, 4, 2, 4}, false},
        {"H 20, I 12, uni, 70 steps, mixed lengths, over two of the longest chunks",
         {12, 20, 1, false},
         70,
         17,
         {70, 70, 70, 70, 70, 40, 70, 70, 70, 70, 70, 23, 70, 70, 70, 70, 70},
         true},
    };
}

// nn.LSTM(proj_size=P) and nn.LSTM(bias=False) on shapes like the above (Config's fields after
// bidirectional: proj_size, bias). P = 23 and 17 are no multiple of any vector width; the
// 30-step one spans more than two weight-gradient chunks, and reverse rows start late in both
// bidirectional ones. Their own list, so the seeds of the cases above stay what they were.
std::vector<Shape> option_shapes() {
    return {
        {"H 70, I 37, proj 23, bi, 2 layers, mixed lengths",
         {37, 70, 2, true, 23},
         6,
         14,
         {6, 2, 5, 6, 1, 3, 6, 4, 6, 5, 2, 6, 1, 6},
         true},
        {"H 40, I 50, proj 17, no biases, bi, 30 steps, mixed lengths",
         {50, 40, 1, true, 17, false},
         30,
         11,
         {30, 25, 30, 17, 30, 28, 9, 30, 22, 30, 26},
         true},
        {"H 33, I 20, proj 1, uni, no state",
         {20, 33, 1, false, 1},
         4,
         7,
         {4, 4, 3, 1, 4, 2, 4},
         false},
        {"H 36, I 19, no biases, bi, 2 layers", {19, 36, 2, true, 0, false}, 5, 9, {}, true},
    };
}

// A projection shape for the tests that check one shape's bits (thread counts, inference).
Shape projection_shape() { return option_shapes()[0]; }

// make_case() for a shape. With a projection h is no longer bounded by tanh, and at weights
// uniform in [-1, 1] the recurrence amplifies rounding past any float tolerance (the double
// results of fused and the reference then part in the 11th digit); such shapes take PyTorch's
// own init scale, 1 / sqrt(H).
LstmCase shape_case(const Shape& s, uint64_t seed) {
    const double scale =
        s.config.proj_size > 0 ? 1.0 / std::sqrt(static_cast<double>(s.config.hidden_size)) : 1.0;
    return make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed, scale);
}

// Runs the fused variant in precision T on `c` and compares everything with the reference.
template <typename T>
void check_case(const Shape& s, uint64_t seed, const char* isa) {
    const LstmCase c = shape_case(s, seed);
    check_against_reference<T>(fused_variant(), c, seed,
                               std::string("isa ") + isa + ", case: " + s.name);
}

// Inference forward (no reserve) of the fused variant: y, hn, cn in precision T.
template <typename T>
VariantResult run_inference(const LstmCase& c) {
    return reference::run_variant_parts<T>(fused_variant(), c, {});
}

void check_identical(const VariantResult& a, const VariantResult& b) {
    CHECK(a.y == b.y);
    CHECK(a.hn == b.hn);
    CHECK(a.cn == b.cn);
    CHECK(a.dx == b.dx);
    CHECK(a.dh0 == b.dh0);
    CHECK(a.dc0 == b.dc0);
    CHECK(a.dparams == b.dparams);
}

}  // namespace

TEST_CASE("fused: every instruction set matches the reference on full-tile shapes", "[fused]") {
    // The first shape must keep spanning more than two weight-gradient chunks, the last more than
    // two of the longest ones, each with a partial chunk after them.
    for (const auto& [shape, chunk] : {std::pair{tile_shapes().front(), kernels::cpu::kGradChunk},
                                       {tile_shapes().back(), kernels::cpu::kGradChunkMax}}) {
        int64_t rows = 0;
        for (int64_t len : shape.lengths) rows += len;
        REQUIRE(rows > 2 * chunk);
        REQUIRE(rows % chunk != 0);
    }
    uint64_t seed = 7000, option_seed = 7600;
    for (FusedIsa isa : test::available_fused_isas()) {
        const IsaScope scope(isa);
        for (const Shape& s : tile_shapes()) {
            check_case<float>(s, seed, cpu::fused_isa_name(isa));
            if (isa == FusedIsa::eigen) check_case<double>(s, seed, "eigen");
            seed += 10;
        }
        for (const Shape& s : option_shapes()) {
            check_case<float>(s, option_seed, cpu::fused_isa_name(isa));
            if (isa == FusedIsa::eigen) check_case<double>(s, option_seed, "eigen");
            option_seed += 10;
        }
    }
}

namespace {

// One SIMD path against the reference on the tile shapes, or, where this CPU (or the cap) lacks
// it, a skip that names it: the loops over test::available_fused_isas() above leave such a path out
// silently.
void check_simd_path(FusedIsa isa, const char* needs) {
    if (!cpu::fused_isa_available(isa)) {
        LSTM_SKIP("the " << cpu::fused_isa_name(isa) << " path does not run here: no " << needs
                         << " on this CPU" << kernels::cpu::isa_cap_note());
    }
    const IsaScope scope(isa);
    uint64_t seed = 7800;
    for (const Shape& s : tile_shapes()) check_case<float>(s, seed += 10, cpu::fused_isa_name(isa));
}

}  // namespace

TEST_CASE("fused: the avx512 path (Highway AVX3) matches the reference, or reports its skip",
          "[fused]") {
    check_simd_path(FusedIsa::avx512, "AVX-512 F, BW, DQ and VL");
}

TEST_CASE("fused: the avx2 path (Highway AVX2) matches the reference, or reports its skip",
          "[fused]") {
    check_simd_path(FusedIsa::avx2, "AVX2 with FMA");
}

TEST_CASE("fused: the neon path (Highway NEON) matches the reference, or reports its skip",
          "[fused]") {
    check_simd_path(FusedIsa::neon, "ARM NEON (not a 64-bit ARM build)");
}

TEST_CASE("fused: forward on one instruction set, backward on another", "[fused]") {
    const std::vector<FusedIsa> isas = test::available_fused_isas();
    if (isas.size() < 2) {
        LSTM_SKIP("no SIMD path (AVX-512, AVX2, NEON) on this CPU"
                  << kernels::cpu::isa_cap_note()
                  << ": only the eigen path exists, nothing to mix");
    }
    // All paths write the same reserve layout; a backward may follow a forward of another.
    for (const Shape& s : {tile_shapes()[0], projection_shape()}) {
        const LstmCase c = shape_case(s, 31);
        const auto ref_grads = reference::lstm_backward(c.in, c.out_grads);
        const double bwd = lstm_rtol(DType::f32, s.config, s.seq_len, Pass::backward);
        for (FusedIsa forward_isa : isas)
            for (FusedIsa backward_isa : isas) {
                if (backward_isa == forward_isa) continue;
                // run_variant calls forward then backward; a wrapper runs them on plans of
                // two paths.
                struct Switching final : Variant {
                    FusedIsa first, second;
                    const char* name() const override { return "fused"; }
                    Device device() const override { return Device::cpu; }
                    std::optional<std::string> supports(const Config& cfg,
                                                        DType dt) const override {
                        return fused_variant().supports(cfg, dt);
                    }
                    std::unique_ptr<Plan> path_plan(const Config& cfg, int64_t t, int64_t n,
                                                    FusedIsa isa) const {
                        return fused_variant().make_plan(
                            PlanRequest{cfg, DType::f32, t, n, cpu::fused_isa_name(isa)});
                    }
                    size_t run_workspace_bytes(const Config& cfg, DType, int64_t t,
                                               int64_t n) const override {
                        return path_plan(cfg, t, n, first)->workspace_bytes();
                    }
                    size_t run_reserve_bytes(const Config& cfg, DType, int64_t t,
                                             int64_t n) const override {
                        return path_plan(cfg, t, n, first)->reserve_bytes();
                    }
                    void run_forward(const Config& cfg,
                                     const ForwardArgs<float>& a) const override {
                        path_plan(cfg, a.x.size(0), a.x.size(1), first)->forward(a);
                    }
                    void run_backward(const Config& cfg,
                                      const BackwardArgs<float>& a) const override {
                        path_plan(cfg, a.x.size(0), a.x.size(1), second)->backward(a);
                    }
                } mixed;
                mixed.first = forward_isa;
                mixed.second = backward_isa;
                const VariantResult got = run_variant<float>(mixed, c);
                INFO("forward " << cpu::fused_isa_name(forward_isa) << ", backward "
                                << cpu::fused_isa_name(backward_isa) << ", case: " << s.name);
                LSTM_CHECK_CLOSE(compare_scaled("dx", got.dx, ref_grads.dx, bwd));
                LSTM_CHECK_CLOSE(compare_scaled("dh0", got.dh0, ref_grads.dh0, bwd));
                LSTM_CHECK_CLOSE(compare_scaled("dc0", got.dc0, ref_grads.dc0, bwd));
                LSTM_CHECK_CLOSE(compare_scaled("dparams", got.dparams, ref_grads.dparams, bwd));
            }
    }
}

TEST_CASE("fused: inference forward equals the training forward", "[fused]") {
    // Inference projects the input one step at a time and keeps c in a running buffer and layer
    // outputs in a ping-pong pair instead of the reserve. On the avx512 and avx2 paths every row's
    // sums are the same either way, so the bits are; Eigen picks its blocking from the GEMM's
    // size, so the eigen path agrees to rounding.
    for (const Shape& s : {tile_shapes()[0], projection_shape()})
        for (FusedIsa isa : test::available_fused_isas()) {
            const LstmCase c = shape_case(s, 57);
            const IsaScope scope(isa);
            INFO("isa " << cpu::fused_isa_name(isa) << ", case: " << s.name);
            const VariantResult train = run_variant<float>(fused_variant(), c);
            const VariantResult infer = run_inference<float>(c);
            if (isa != FusedIsa::eigen) {
                CHECK(infer.y == train.y);
                CHECK(infer.hn == train.hn);
                CHECK(infer.cn == train.cn);
                continue;
            }
            const double rtol = lstm_rtol(DType::f32, s.config, s.seq_len, Pass::forward);
            LSTM_CHECK_CLOSE(compare_scaled("y", infer.y, train.y, rtol));
            LSTM_CHECK_CLOSE(compare_scaled("hn", infer.hn, train.hn, rtol));
            LSTM_CHECK_CLOSE(compare_scaled("cn", infer.cn, train.cn, rtol));
            const VariantResult train64 = run_variant<double>(fused_variant(), c);
            const VariantResult infer64 = run_inference<double>(c);
            LSTM_CHECK_CLOSE(compare_scaled("y (f64)", infer64.y, train64.y, 1e-12));
            LSTM_CHECK_CLOSE(compare_scaled("hn (f64)", infer64.hn, train64.hn, 1e-12));
            LSTM_CHECK_CLOSE(compare_scaled("cn (f64)", infer64.cn, train64.cn, 1e-12));
        }
}

TEST_CASE("fused: weight and bias gradients summed over 32000 frames stay accurate", "[fused]") {
    // Each weight- and bias-gradient element sums one term per frame: T * N = 32000 here. As one
    // running float sum (the SIMD paths' dW, every path's db and dW_hr, until 2026-12-06) the
    // error grew with the term count: dW_ih 3.3e-6, dW_hh 3.6e-6, db 3.8e-6, dW_hr 2.6e-6 of the
    // largest element away from the double result on these cases, where PyTorch's float32
    // (blocked GEMMs, cascaded column sums) stays near 5e-7 on cases like them. Summed in chunks
    // and blocks, every path is within 4.4e-7 here.
    const int64_t seq_len = 500, batch = 64;
    for (const Config& config : {Config{8, 32, 1, false}, Config{8, 32, 1, false, 16}}) {
        // Weights at PyTorch's initial scale (1 / sqrt(H) ~ 0.18), so the recurrence is not
        // chaotic and the forward's rounding does not swamp what is measured.
        const LstmCase c = make_case(config, seq_len, batch, {}, true, 2024, 0.18);
        const VariantResult want = run_variant<double>(fused_variant(), c);
        const CellOffsets o = cell_offsets(config, 0, 0);
        const int64_t gates = 4 * config.hidden_size;
        struct Part {
            const char* name;
            int64_t offset, count;
        };
        std::vector<Part> parts = {
            {"dW_ih", o.weight_ih, gates * config.input_size},
            {"dW_hh", o.weight_hh, gates * config.state_size()},
            {"db_ih", o.bias_ih, gates},
        };
        if (config.proj_size > 0)
            parts.push_back({"dW_hr", o.weight_hr, config.proj_size * config.hidden_size});
        for (FusedIsa isa : test::available_fused_isas()) {
            const IsaScope scope(isa);
            INFO("isa " << cpu::fused_isa_name(isa) << ", proj " << config.proj_size);
            const VariantResult got = run_variant<float>(fused_variant(), c);
            for (const Part& part : parts) {
                auto slice = [&](const std::vector<double>& v) {
                    return std::vector<double>(v.begin() + part.offset,
                                               v.begin() + part.offset + part.count);
                };
                LSTM_CHECK_CLOSE(
                    compare_scaled(part.name, slice(got.dparams), slice(want.dparams), 1.5e-6));
            }
        }
    }
}

TEST_CASE("fused: the SIMD paths give the same bits for any thread count", "[fused]") {
    if (ordered_isas().empty()) {
        LSTM_SKIP("no SIMD path (AVX-512, AVX2, NEON) on this CPU"
                  << kernels::cpu::isa_cap_note() << ": the guarantee is the SIMD paths'");
    }
    // Every output element is summed in the same order whatever the split of blocks, rows and
    // steps among threads, so 1, 2, 3, 4, 5 and 6 threads (5 > blocks of a layer here) agree
    // exactly. Even teams run a bidirectional layer's directions side by side, on half the team
    // each (4 and 6: crews of 2 and 3 meeting at their own barriers); odd ones one after the
    // other.
    for (const Shape& s : {tile_shapes()[0], projection_shape()})
        for (FusedIsa isa : ordered_isas()) {
            const LstmCase c = shape_case(s, 91);
            const IsaScope scope(isa);
            VariantResult one;
            {
                const ThreadScope threads(1);
                one = run_variant<float>(fused_variant(), c);
            }
            for (int n : {2, 3, 4, 5, 6}) {
                const ThreadScope threads(n);
                INFO("isa " << cpu::fused_isa_name(isa) << ", " << n
                            << " threads, case: " << s.name);
                check_identical(run_variant<float>(fused_variant(), c), one);
            }
        }
}

TEST_CASE("fused: a team shrunk under load changes no bits, and the eigen path is never shrunk",
          "[fused][team]") {
    // The governor is told that a full 2-thread team lost a whole core, as under one busy process
    // on 2 cores: the next regions of a governed path run 1 thread. Every path must still give
    // the bits of a fixed 2-thread team: the SIMD paths because their sums do not depend on the
    // team size, the eigen path (float and double) because it is not governed at all.
    const Shape s = tile_shapes()[1];
    const LstmCase c = shape_case(s, 95);
    auto& governor = kernels::cpu::time_loop_governor();
    const auto shrink = [&governor] {
        kernels::cpu::TeamUsage lost_a_core;
        lost_a_core.add(100'000'000, 10);
        governor.report(2, 2, lost_a_core, 100'000'000);
        REQUIRE(governor.team_size(2) == 1);
    };
    const ThreadScope threads(2);
    for (FusedIsa isa : test::available_fused_isas()) {
        const IsaScope scope(isa);
        INFO("isa " << cpu::fused_isa_name(isa));
        governor.set_policy(kernels::cpu::TeamPolicy::fixed);
        const VariantResult fixed32 = run_variant<float>(fused_variant(), c);
        const VariantResult fixed64 = run_variant<double>(fused_variant(), c);
        governor.set_policy(kernels::cpu::TeamPolicy::adaptive);
        shrink();
        check_identical(run_variant<float>(fused_variant(), c), fixed32);
        shrink();
        check_identical(run_variant<double>(fused_variant(), c), fixed64);
    }
    governor.set_policy(kernels::cpu::TeamPolicy::automatic);
}

TEST_CASE("fused: workspace and reserve of any alignment give the same bits", "[fused]") {
    // The interface does not fix the alignment of the caller's buffers (malloc gives 16 bytes),
    // while the SIMD kernels use aligned loads and streaming stores on arrays carved from them.
    const Shape s = tile_shapes()[0];
    const LstmCase c = shape_case(s, 93);
    const Config& cfg = s.config;
    const size_t ws_bytes = fused_variant().workspace_bytes(cfg, DType::f32, s.seq_len, s.batch);
    const size_t rs_bytes = fused_variant().reserve_bytes(cfg, DType::f32, s.seq_len, s.batch);
    for (FusedIsa isa : test::available_fused_isas()) {
        const IsaScope scope(isa);
        const VariantResult aligned = run_variant<float>(fused_variant(), c);
        for (size_t offset : {size_t(4), size_t(16), size_t(36)}) {
            INFO("isa " << cpu::fused_isa_name(isa) << ", buffers 64-byte aligned + " << offset);
            lstm::detail::AlignedBuffer workspace, reserve;
            reference::RunBuffers buffers;
            buffers.workspace = static_cast<char*>(workspace.reserve(ws_bytes + offset)) + offset;
            buffers.workspace_size = ws_bytes;
            buffers.reserve = static_cast<char*>(reserve.reserve(rs_bytes + offset)) + offset;
            buffers.reserve_size = rs_bytes;
            const VariantResult shifted = reference::run_case_parts<float>(
                c, buffers, {BackwardPart::all},
                [&](const ForwardArgs<float>& f) { fused_variant().forward(cfg, f); },
                [&](const BackwardArgs<float>& b) { fused_variant().backward(cfg, b); });
            check_identical(shifted, aligned);
        }
    }
}

TEST_CASE("fused: with projections and without biases, data + weights equals one call", "[fused]") {
    // The split weights part forms dW_hr from what the data part left in the reserve (h before
    // the projection, each step's dh); it must give the one call's bits on every path, and the
    // data part must leave dparams alone.
    uint64_t seed = 7800;
    for (const Shape& s : option_shapes()) {
        const LstmCase c = shape_case(s, seed);
        const std::vector<double> before = random_vector(param_count(s.config), seed + 99);
        for (FusedIsa isa : test::available_fused_isas()) {
            const IsaScope scope(isa);
            INFO("isa " << cpu::fused_isa_name(isa) << ", case: " << s.name);
            check_identical(
                reference::run_variant_parts<float>(fused_variant(), c,
                                                    {BackwardPart::data, BackwardPart::weights}),
                reference::run_variant_parts<float>(fused_variant(), c, {BackwardPart::all}));
            const VariantResult data = reference::run_variant_parts<float>(
                fused_variant(), c, {BackwardPart::data}, before, /*data_sees_dparams=*/true);
            CHECK(data.dparams == cast_vector<double>(cast_vector<float>(before)));
            if (isa == FusedIsa::eigen)
                check_identical(
                    reference::run_variant_parts<double>(
                        fused_variant(), c, {BackwardPart::data, BackwardPart::weights}),
                    reference::run_variant_parts<double>(fused_variant(), c, {BackwardPart::all}));
        }
        seed += 10;
    }
}

TEST_CASE("fused: the eigen path is bit-identical run to run", "[fused]") {
    // Only for a fixed thread count: Eigen picks its blocking from the sizes each thread sees.
    const Shape s = tile_shapes()[0];
    const LstmCase c = shape_case(s, 92);
    const IsaScope scope(FusedIsa::eigen);
    check_identical(run_variant<float>(fused_variant(), c), run_variant<float>(fused_variant(), c));
}

TEST_CASE("fused: portable packing follows the interleaved layout", "[fused]") {
    using namespace lstm::kernels::cpu;
    const int64_t hidden = 21, k_size = 5;  // 2 blocks, 11 padded units
    const FusedLayout lay(hidden);
    REQUIRE(lay.hidden_padded == 32);
    REQUIRE(lay.gate_cols == 128);
    std::vector<float> w(4 * hidden * k_size);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
    const BlockRange all{0, lay.blocks};
    std::vector<float> wt(k_size * lay.gate_cols, -1.0f), wr(lay.gate_cols * (k_size + 3), -1.0f);
    pack_transposed_interleaved(w.data(), k_size, lay, all, wt.data());
    pack_rows_interleaved(w.data(), k_size, lay, all, wr.data(), k_size + 3);
    for (int64_t gate = 0; gate < 4; ++gate)
        for (int64_t unit = 0; unit < lay.hidden_padded; ++unit) {
            const int64_t col = lay.column(gate, unit);
            for (int64_t k = 0; k < k_size; ++k) {
                const float want = unit < hidden ? w[(gate * hidden + unit) * k_size + k] : 0.0f;
                CHECK(wt[k * lay.gate_cols + col] == want);
                CHECK(wr[col * (k_size + 3) + k] == want);
            }
            for (int64_t k = k_size; k < k_size + 3; ++k) CHECK(wr[col * (k_size + 3) + k] == 0.0f);
        }
    // Each thread's blocks own a contiguous range of columns with all four gates of its units.
    CHECK(lay.column(0, 16) == 64);
    CHECK(lay.column(3, 31) == 127);
    // Back into PyTorch's layout: adding the packed matrix to zeros reproduces w.
    std::vector<float> back(w.size(), 0.0f);
    add_transposed_interleaved(wt.data(), k_size, lay, all, back.data());
    CHECK(back == w);
}

namespace {

// Checks vector gate math against kernels/common/gates.hpp: activations(x, sigmoid, tanh) on 16
// floats, and cell(pre (4, 16), c_prev, dh, dc (16 each), out (11, 16)) writing i, f, g, o, c, h,
// di, df, dg, do, dc_prev.
void check_gate_math(const std::function<void(const float*, float*, float*)>& activations,
                     const std::function<void(const float*, const float*, const float*,
                                              const float*, float*)>& cell) {
    namespace k = lstm::kernels;
    // Relative accuracy of the activations (few ulp, including near 0 where tanh x ~ x), checked
    // against the double functions over a wide range.
    const auto xs = random_vector<float>(16 * 400, 5, -30.0, 30.0);
    double worst_sig = 0, worst_tanh = 0;
    for (size_t base = 0; base < xs.size(); base += 16) {
        float x[16], sig[16], th[16];
        for (int u = 0; u < 16; ++u) x[u] = xs[base + u] * (base % 32 == 0 ? 1e-6f : 1.0f);
        activations(x, sig, th);
        for (int u = 0; u < 16; ++u) {
            const double s = k::sigmoid(static_cast<double>(x[u]));
            const double t = k::tanh_act(static_cast<double>(x[u]));
            worst_sig = std::max(worst_sig, std::abs(sig[u] - s) / s);
            if (t != 0) worst_tanh = std::max(worst_tanh, std::abs(th[u] - t) / std::abs(t));
        }
    }
    CHECK(worst_sig < 4e-7);
    CHECK(worst_tanh < 4e-7);
    // Saturation: exactly 0 and 1 (sigmoid) and +-1 (tanh), no NaN; NaN propagates.
    const float inf = std::numeric_limits<float>::infinity();
    float x[16] = {-1e4f, 1e4f,   -100.0f, 100.0f,  -inf,  inf,    0.0f, -0.0f,
                   20.0f, -20.0f, 1e-30f,  -1e-30f, 88.0f, -88.0f, 9.5f, std::nanf("")};
    float sig[16], th[16];
    activations(x, sig, th);
    CHECK(sig[0] == 0.0f);
    CHECK(sig[1] == 1.0f);
    CHECK(sig[4] == 0.0f);
    CHECK(sig[5] == 1.0f);
    CHECK(th[0] == -1.0f);
    CHECK(th[1] == 1.0f);
    CHECK(th[4] == -1.0f);
    CHECK(th[5] == 1.0f);
    CHECK(th[6] == 0.0f);
    CHECK(std::signbit(th[7]));
    CHECK(th[10] == 1e-30f);
    CHECK(th[11] == -1e-30f);
    for (int u = 0; u < 15; ++u) {
        CHECK(std::isfinite(sig[u]));
        CHECK(std::isfinite(th[u]));
    }
    CHECK(std::isnan(sig[15]));
    CHECK(std::isnan(th[15]));

    // The whole cell, forward and backward, against gates.hpp in float.
    const auto pre = random_vector<float>(64, 11, -6.0, 6.0);
    const auto c_prev = random_vector<float>(16, 12, -3.0, 3.0);
    const auto dh = random_vector<float>(16, 13);
    const auto dc = random_vector<float>(16, 14);
    float out[16 * 11];
    cell(pre.data(), c_prev.data(), dh.data(), dc.data(), out);
    for (int u = 0; u < 16; ++u) {
        const k::Gates<float> a = k::activate(pre[u], pre[16 + u], pre[32 + u], pre[48 + u]);
        const float c = k::cell_state(a, c_prev[u]);
        const k::CellGrads<float> d = k::cell_backward(a, c_prev[u], c, dh[u], dc[u]);
        const float want[11] = {a.i,  a.f,  a.g,  a.o,   c,        k::hidden_state(a, c),
                                d.di, d.df, d.dg, d.d_o, d.dc_prev};
        for (int q = 0; q < 11; ++q) {
            INFO("unit " << u << ", quantity " << q);
            CHECK(out[16 * q + u] == Approx(want[q]).epsilon(2e-6).margin(1e-7));
        }
    }
}

}  // namespace

TEST_CASE("fused: packed strips follow their layout", "[fused]") {
    using namespace lstm::kernels::cpu;
    const int64_t hidden = 21, k_size = 19;  // padded units and a partial column strip
    const FusedLayout lay(hidden);
    std::vector<float> w(4 * hidden * k_size);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
    const BlockRange all{0, lay.blocks};
    // Forward strips: strip blk * 4 + gate, row k, lane u <- w[gate * H + 16 blk + u][k].
    std::vector<float> fwd(lay.gate_cols * k_size, -1.0f);
    pack_gate_strips(w.data(), k_size, lay, all, fwd.data());
    for (int64_t blk = 0; blk < lay.blocks; ++blk)
        for (int64_t gate = 0; gate < 4; ++gate)
            for (int64_t k = 0; k < k_size; ++k)
                for (int64_t u = 0; u < kUnitBlock; ++u) {
                    const int64_t unit = blk * kUnitBlock + u;
                    const float want =
                        unit < hidden ? w[(gate * hidden + unit) * k_size + k] : 0.0f;
                    CHECK(fwd[((blk * 4 + gate) * k_size + k) * kUnitBlock + u] == want);
                }
    // Column strips: strip q, row c (a gate column), lane u <- w[row of c][16 q + u].
    const int64_t strips = (k_size + kUnitBlock - 1) / kUnitBlock;
    std::vector<float> bwd(strips * lay.gate_cols * kUnitBlock, -1.0f);
    pack_column_strips(w.data(), k_size, lay, all, bwd.data());
    for (int64_t gate = 0; gate < 4; ++gate)
        for (int64_t unit = 0; unit < lay.hidden_padded; ++unit)
            for (int64_t col = 0; col < strips * kUnitBlock; ++col) {
                const int64_t c = lay.column(gate, unit);
                const float want =
                    unit < hidden && col < k_size ? w[(gate * hidden + unit) * k_size + col] : 0.0f;
                const int64_t q = col / kUnitBlock;
                CHECK(bwd[(q * lay.gate_cols + c) * kUnitBlock + col % kUnitBlock] == want);
            }
}

TEST_CASE("fused: Highway gate math agrees with kernels/common/gates.hpp on every target",
          "[fused]") {
    // Every target this CPU runs, not only the AVX3 and AVX2 ones the avx512 and avx2 paths take:
    // the narrower ones (SSE4, the emulated 128-bit set) are what other machines get from the
    // same source.
    using namespace lstm::kernels::cpu;
    const int64_t targets = simd_fused_targets();
    REQUIRE(targets != 0);
    for (int bit = 0; bit < 63; ++bit) {
        const int64_t target = int64_t{1} << bit;
        if ((targets & target) == 0) continue;
        INFO("Highway target " << simd_fused_target_name(target));
        CHECK(simd_fused_lanes(target) > 0);
        check_gate_math([&](const float* x, float* sig,
                            float* th) { simd_fused_activations(target, x, 16, sig, th); },
                        [&](const float* pre, const float* c_prev, const float* dh, const float* dc,
                            float* out) { simd_fused_cell(target, pre, c_prev, dh, dc, out); });
    }
}

namespace {

// The Highway kernel set on one target under the variant's own stack loop and engine: what the avx2
// path runs, with any target in place of AVX2.
struct TargetKernels : kernels::cpu::SimdFusedKernels {
    static inline int64_t target = 0;
    TargetKernels(const kernels::cpu::FusedLayout& lay,
                  const kernels::cpu::FusedBuffers<float>& buf)
        : SimdFusedKernels(lay, buf, target) {}
};

struct TargetVariant final : Variant {
    const char* name() const override { return "fused"; }
    Device device() const override { return Device::cpu; }
    std::optional<std::string> supports(const Config& cfg, DType dt) const override {
        return dt == DType::f32 ? fused_variant().supports(cfg, dt)
                                : std::optional<std::string>("float only");
    }
    size_t run_workspace_bytes(const Config& cfg, DType dt, int64_t t, int64_t n) const override {
        return fused_variant().workspace_bytes(cfg, dt, t, n);
    }
    size_t run_reserve_bytes(const Config& cfg, DType dt, int64_t t, int64_t n) const override {
        return fused_variant().reserve_bytes(cfg, dt, t, n);
    }
    void run_forward(const Config& cfg, const ForwardArgs<float>& a) const override {
        StackLoop<float, cpu::fused_detail::FusedEngine<float, TargetKernels>>(cfg, a.x.size(0),
                                                                               a.x.size(1))
            .forward(a);
    }
    void run_backward(const Config& cfg, const BackwardArgs<float>& a) const override {
        StackLoop<float, cpu::fused_detail::FusedEngine<float, TargetKernels>>(cfg, a.x.size(0),
                                                                               a.x.size(1))
            .backward(a);
    }
};

}  // namespace

TEST_CASE("fused: every Highway target matches the reference on full-tile shapes", "[fused]") {
    // Each target has its own vector width (4, 8 or 16 floats) and tile sizes, so its remainders
    // and tails differ; all of them must give the oracle's results.
    using namespace lstm::kernels::cpu;
    const int64_t targets = simd_fused_targets();
    const TargetVariant variant;
    for (int bit = 0; bit < 63; ++bit) {
        const int64_t target = int64_t{1} << bit;
        if ((targets & target) == 0) continue;
        uint64_t seed = 7300;  // the same cases for every target
        TargetKernels::target = target;
        const std::string name = simd_fused_target_name(target);
        for (const Shape& s : tile_shapes()) {
            const LstmCase c = shape_case(s, seed);
            check_against_reference<float>(variant, c, seed,
                                           "Highway " + name + ", case: " + s.name);
            seed += 10;
        }
        uint64_t option_seed = 7700;
        for (const Shape& s : option_shapes()) {
            const LstmCase c = shape_case(s, option_seed);
            check_against_reference<float>(variant, c, option_seed,
                                           "Highway " + name + ", case: " + s.name);
            option_seed += 10;
        }
    }
}

TEST_CASE("fused: its paths, chosen when a plan is made", "[fused]") {
    const FusedIsa automatic = cpu::fused_isa_available(FusedIsa::avx512) ? FusedIsa::avx512
                               : cpu::fused_isa_available(FusedIsa::avx2) ? FusedIsa::avx2
                               : cpu::fused_isa_available(FusedIsa::neon) ? FusedIsa::neon
                                                                          : FusedIsa::eigen;
    // Every 64-bit ARM processor runs NEON; nothing else does.
#if defined(__aarch64__)
    CHECK(cpu::fused_isa_available(FusedIsa::neon));
#else
    CHECK_FALSE(cpu::fused_isa_available(FusedIsa::neon));
#endif
    // avx2 needs AVX2 with FMA, where the CPU's own check agrees with Highway's, and a build
    // that has AVX2 kernels (lstm_cpu compiled for AVX-512 as its baseline has none).
    const bool avx2_built = kernels::cpu::narrowest_simd_cap() != kernels::cpu::SimdCap::all;
    CHECK(cpu::fused_isa_available(FusedIsa::avx2) ==
          (kernels::cpu::cpu_has_avx2_fma() && avx2_built));
    // Paths are chosen when a plan is made: from its request, else LSTM_FUSED_ISA (read at
    // each request), else the widest SIMD path. The suite may run under LSTM_FUSED_ISA (e.g.
    // =eigen to put the registry tests on the portable path); it is put back at the end.
    const Variant& fused = fused_variant();
    const test::EnvScope env("LSTM_FUSED_ISA", nullptr);
    CHECK(cpu::default_fused_isa() == automatic);
    CHECK(fused.default_path(DType::f32) == cpu::fused_isa_name(automatic));
    CHECK(fused.default_path(DType::f64) == "eigen");
    CHECK(fused.paths(DType::f64) == std::vector<std::string>{"eigen"});
    std::vector<std::string> want_paths;
    for (FusedIsa isa : cpu::kSimdFusedIsas)
        if (cpu::fused_isa_available(isa)) want_paths.emplace_back(cpu::fused_isa_name(isa));
    want_paths.emplace_back("eigen");
    CHECK(fused.paths(DType::f32) == want_paths);
    const auto plan_path = [&](const char* path) {
        return fused.make_plan(PlanRequest{Config{3, 5, 1, false}, DType::f32, 2, 2, path})->path();
    };
    ::setenv("LSTM_FUSED_ISA", "eigen", 1);
    CHECK(cpu::default_fused_isa() == FusedIsa::eigen);
    CHECK(plan_path("") == "eigen");
    ::setenv("LSTM_FUSED_ISA", "auto", 1);
    CHECK(cpu::default_fused_isa() == automatic);
    for (const auto& [isa, name] :
         {std::pair{FusedIsa::avx512, "avx512"}, std::pair{FusedIsa::avx2, "avx2"},
          std::pair{FusedIsa::neon, "neon"}}) {
        if (!cpu::fused_isa_available(isa)) continue;
        INFO(name);
        ::setenv("LSTM_FUSED_ISA", name, 1);
        CHECK(cpu::default_fused_isa() == isa);
        CHECK(plan_path("") == name);
        CHECK(plan_path("eigen") == "eigen");  // the request's path wins over the environment
    }
    ::setenv("LSTM_FUSED_ISA", "sse9", 1);
    CHECK_THROWS_WITH(cpu::default_fused_isa(), Contains("LSTM_FUSED_ISA = 'sse9' is not one of"));
    CHECK(plan_path("eigen") == "eigen");
    ::unsetenv("LSTM_FUSED_ISA");
    CHECK_THROWS_WITH(plan_path("sse9"), Contains("has no path 'sse9' for float32"));
    if (!cpu::fused_isa_available(FusedIsa::avx512))
        CHECK_THROWS_WITH(plan_path("avx512"), Contains("no AVX-512 (F, BW, DQ and VL)"));
    if (!cpu::fused_isa_available(FusedIsa::avx2))
        CHECK_THROWS_WITH(plan_path("avx2"), Contains("no AVX2 with FMA"));
    if (!cpu::fused_isa_available(FusedIsa::neon)) {
        CHECK_THROWS_AS(plan_path("neon"), Unsupported);
        CHECK_THROWS_WITH(plan_path("neon"), Contains("has no path 'neon'") &&
                                                 Contains("this CPU (or build) has no ARM NEON"));
        ::setenv("LSTM_FUSED_ISA", "neon", 1);
        CHECK_THROWS_AS(cpu::default_fused_isa(), Unsupported);
        CHECK_THROWS_WITH(cpu::default_fused_isa(),
                          Contains("LSTM_FUSED_ISA = neon, but this CPU"));
    }
}

#if LSTM_HAVE_FP_CONTROL
TEST_CASE("fused: denormals flush inside its team only, every thread's FP control as it was",
          "[fused]") {
    // fused sets flush-to-zero and denormals-are-zero on its team (long sequences' decaying
    // gradients made every instruction touching a denormal take a microcode assist) and must
    // restore them: a leaked FTZ would change the caller's own arithmetic, on its thread or on
    // the OpenMP pool's threads its next parallel region runs on.
    // The mode bits (flushing, rounding, exception masks), not the sticky status flags that any
    // arithmetic on denormals raises, basic's included.
    auto mode = [] { return kernels::cpu::read_fp_control() & kernels::cpu::fp_control_mode_mask; };
    auto pool_modes = [&mode] {
        std::vector<kernels::cpu::FpControl> csr(static_cast<size_t>(omp_get_max_threads()), 0);
#pragma omp parallel
        csr[static_cast<size_t>(omp_get_thread_num())] = mode();
        return csr;
    };
    const kernels::cpu::FpControl caller = mode();
    const std::vector<kernels::cpu::FpControl> pool = pool_modes();
    Config config{3, 8, 1, false};
    config.bias = false;  // with h0 = c0 = 0 and a denormal x, every gate input is denormal
    const int64_t steps = 4, batch = 2;
    const std::vector<float> x(static_cast<size_t>(steps * batch * 3), 1e-40f);
    const TensorView<const float> xv(x.data(), {steps, batch, 3});
    const std::vector<float> dy(static_cast<size_t>(steps * batch * 8), 1.0f);
    Lstm basic(config, "basic");
    basic.reset_parameters(5);
    const TensorView<const float> reference = basic.forward(xv);
    float largest = 0;
    for (int64_t k = 0; k < reference.numel(); ++k)
        largest = std::max(largest, std::abs(reference.data()[k]));
    // basic keeps them, as PyTorch does.
    REQUIRE(largest > 0);
    REQUIRE(largest < std::numeric_limits<float>::min());
    for (FusedIsa isa : test::available_fused_isas()) {
        INFO(cpu::fused_isa_name(isa));
        const IsaScope scope(isa);
        Lstm fused(config, "fused");
        fused.reset_parameters(5);
        const TensorView<const float> y = fused.forward(xv);
        for (int64_t k = 0; k < y.numel(); ++k) CHECK(y.data()[k] == 0.0f);
        fused.backward(TensorView<const float>(dy.data(), {steps, batch, 8}));
        CHECK(mode() == caller);
        CHECK(pool_modes() == pool);
    }
}
#endif
