// The CUDA `basic` and `fused` variants without a GPU: their engine on the stack loop
// (lstm/variants/cuda_common.hpp) runs here on a host backend that executes the very kernel
// bodies of kernels/cuda/lstm_ops.hpp over their grids in plain loops and does the cuBLAS GEMMs
// as naive loops, and is compared with the double reference. Also the host-side pieces: the
// length sort and compact offsets that are uploaded, workspace / reserve sizing against carving,
// call signatures.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda_host_emulation.hpp"
#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "lstm/variants/cuda_common.hpp"
#include "tolerance.hpp"
#include "variant_runner.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/context.hpp"
#include "lstm/registry.hpp"
#endif

using namespace lstm;
using namespace lstm::test;
using cuda::LoopStyle;

namespace {

std::vector<Shape> shape_list() { return small_shapes(); }

template <typename T>
void check_style(LoopStyle style, const Shape& s, uint64_t seed) {
    const reference::LstmCase c =
        make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
    const auto ref = reference::lstm_forward(c.in);
    const auto ref_grads = reference::lstm_backward(c.in, c.out_grads);
    const std::vector<double> before = random_vector(ref_grads.dparams.size(), seed + 99);
    const auto got = emulate<T>(style, c, true, false, before);
    INFO("style " << cuda::to_string(style) << ", " << to_string(dtype_of<T>())
                  << ", case: " << s.name);
    check_close_to_reference(got, ref, ref_grads, accumulated<T>(ref_grads.dparams, before),
                             rtol_for<T>(c));
    // Padded positions are exactly zero (they were NaN before the call).
    const int64_t F = s.config.output_size(), I = s.config.input_size;
    for (int64_t n = 0; n < s.batch; ++n) {
        const int64_t len = s.lengths.empty() ? s.seq_len : s.lengths[n];
        for (int64_t t = len; t < s.seq_len; ++t) {
            for (int64_t k = 0; k < F; ++k) CHECK(got.y[(t * s.batch + n) * F + k] == 0.0);
            for (int64_t k = 0; k < I; ++k) CHECK(got.dx[(t * s.batch + n) * I + k] == 0.0);
        }
    }
}

// Split backward (data + weights) gives the bits of BackwardPart::all, and an inference forward
// those of the training forward, for one case and style.
void check_split_and_inference(LoopStyle style, const reference::LstmCase& c,
                               const std::vector<double>& before) {
    const auto all = emulate<float>(style, c, true, false, before);
    const auto split = emulate<float>(style, c, true, true, before);
    const auto inference = emulate<float>(style, c, false, false);
    CHECK(split.dx == all.dx);
    CHECK(split.dh0 == all.dh0);
    CHECK(split.dc0 == all.dc0);
    CHECK(split.dparams == all.dparams);
    CHECK(inference.y == all.y);
    CHECK(inference.hn == all.hn);
    CHECK(inference.cn == all.cn);
}

}  // namespace

TEST_CASE("cuda loop emulated on the host matches the reference, both styles and precisions",
          "[cuda_host]") {
    uint64_t seed = 7000;
    for (const Shape& s : shape_list()) {
        for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
            check_style<float>(style, s, seed);
            check_style<double>(style, s, seed);
        }
        seed += 10;
    }
}

TEST_CASE("cuda loop: split backward and inference give the same bits as all / training",
          "[cuda_host]") {
    // Plain, with a projection (dW_hr from the reserve's h_raw and dh), and both without biases.
    Config projected{4, 6, 2, true};
    projected.proj_size = 2;
    Config biasless = projected;
    biasless.bias = false;
    for (const Config& config : {Config{4, 6, 2, true}, projected, biasless}) {
        const reference::LstmCase c = make_case(config, 7, 4, {7, 2, 5, 1}, true, 4321);
        const std::vector<double> before = random_vector(param_count(config), 17);
        for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
            INFO("style " << cuda::to_string(style) << ", proj_size " << config.proj_size
                          << ", bias " << config.bias);
            check_split_and_inference(style, c, before);
        }
    }
}

TEST_CASE("cuda loop: what a projection adds to the queued work", "[cuda_host]") {
    // Counts the queued work of one training forward + backward: with P > 0 each forward step
    // adds the projection GEMM and CarryHidden, each backward step SumOutputGrad and the GEMM
    // back to h_raw (basic drops AddOutputGrad for it), and each weight pass the dW_hr GEMM.
    Config plain{3, 5, 1, false};
    Config projected = plain;
    projected.proj_size = 2;
    const int64_t seq_len = 4;
    for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
        int64_t work[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
            const reference::LstmCase c =
                make_case(k == 0 ? plain : projected, seq_len, 2, {}, true, 5);
            Emulation<float> em(style, c);
            reference::RunBuffers buffers;
            buffers.workspace = em.workspace;
            buffers.workspace_size = em.ws_bytes;
            buffers.reserve = em.reserve;
            buffers.reserve_size = em.rs_bytes;
            reference::run_case_parts<float>(
                c, buffers, {BackwardPart::all},
                [&](const ForwardArgs<float>& f) { em.loop().forward(f); },
                [&](const BackwardArgs<float>& b) { em.loop().backward(b); });
            work[k] = em.backend.work[0];
        }
        INFO("style " << cuda::to_string(style));
        // basic: per step +2 forward, +1 backward (+2 - 1), +1 weight GEMM; fused: +2, +2 per
        // step and one dW_hr GEMM over all frames.
        const int64_t extra =
            style == LoopStyle::basic ? seq_len * (2 + 1 + 1) : seq_len * (2 + 2) + 1;
        CHECK(work[1] - work[0] == extra);
    }
}

TEST_CASE("cuda loop: fused runs the two directions on two lanes, basic on one", "[cuda_host]") {
    const reference::LstmCase bi = make_case({3, 4, 2, true}, 5, 2, {5, 3}, true, 99);
    const reference::LstmCase uni = make_case({3, 4, 2, false}, 5, 2, {5, 3}, true, 99);
    std::vector<std::pair<int, int>> waits;
    int64_t lane1 = 0;
    emulate<float>(LoopStyle::fused, bi, true, false, {}, &waits, &lane1);
    CHECK(lane1 > 0);
    // Per layer, forward and backward: lane 1 forks from lane 0, then lane 0 joins it.
    const std::vector<std::pair<int, int>> per_layer = {{1, 0}, {0, 1}};
    REQUIRE(waits.size() == 2 * 2 * per_layer.size());
    for (size_t k = 0; k < waits.size(); ++k) CHECK(waits[k] == per_layer[k % 2]);
    for (const auto* c : {&bi, &uni}) {
        emulate<float>(LoopStyle::basic, *c, true, false, {}, &waits, &lane1);
        CHECK(waits.empty());
        CHECK(lane1 == 0);
    }
    emulate<float>(LoopStyle::fused, uni, true, false, {}, &waits, &lane1);
    CHECK(waits.empty());
    CHECK(lane1 == 0);
}

TEST_CASE("cuda frame index: length sort, compact offsets and the uploaded block", "[cuda_host]") {
    const int64_t seq_len = 4, batch = 3;
    const std::vector<int64_t> lengths = {2, 4, 1};
    std::vector<int64_t> block(cuda::frame_index_count(seq_len, batch), -1);
    REQUIRE(block.size() == size_t(2 * 3 + 2 * 4 + 1 + 4 * 3));
    const cuda::FrameIndex f = cuda::carve_frame_index(block.data(), seq_len, batch);
    // The fields follow each other in one block, so one copy uploads them all.
    CHECK(f.order == block.data());
    CHECK(f.pos == block.data() + 3);
    CHECK(f.active == block.data() + 6);
    CHECK(f.offset == block.data() + 10);
    CHECK(f.frame == block.data() + 15);
    cuda::make_frame_index(Span<const int64_t>(lengths), seq_len, batch, f);
    const std::vector<int64_t> want = {1, 0, 2,        // order: longest first
                                       1, 0, 2,        // pos: inverse of order
                                       3, 2, 1, 1,     // active
                                       0, 3, 5, 6, 7,  // offset, S = 7
                                       1, 0, 2, 4, 3, 7, 10,
                                       0, 0, 0, 0, 0};  // frame = t * N + order[r]; unused tail 0
    CHECK(block == want);

    // Ties keep their index order; no lengths means all T.
    const std::vector<int64_t> ties = {3, 4, 3};
    cuda::make_frame_index(Span<const int64_t>(ties), seq_len, batch, f);
    CHECK(std::vector<int64_t>(f.order, f.order + 3) == std::vector<int64_t>{1, 0, 2});
    cuda::make_frame_index(Span<const int64_t>(), seq_len, batch, f);
    CHECK(std::vector<int64_t>(f.active, f.active + 4) == std::vector<int64_t>{3, 3, 3, 3});
    CHECK(f.offset[seq_len] == seq_len * batch);
    for (int64_t k = 0; k < seq_len * batch; ++k) CHECK(f.frame[k] == k);
}

TEST_CASE("cuda workspace and reserve: sizes are what carving takes, arrays disjoint and aligned",
          "[cuda_host]") {
    Config projected{123, 320, 4, true};
    projected.proj_size = 100;
    for (const Config& config : {Config{3, 5, 1, false}, Config{123, 320, 4, true}, projected}) {
        INFO("proj_size " << config.proj_size);
        const int64_t seq_len = 7, batch = 5;
        const size_t ws_bytes = cuda::workspace_size(config, DType::f32, seq_len, batch);
        const size_t rs_bytes = cuda::reserve_size(config, DType::f32, seq_len, batch);
        // Carving from an aligned base takes all but the slack left for an unaligned one.
        constexpr size_t slack = lstm::detail::kDeviceAlignment - 1;
        char* const base = reinterpret_cast<char*>(uintptr_t(1) << 20);
        lstm::detail::Carver wc(base), rc(base);
        cuda::CudaLoop<float, cuda::SizingBackend> loop(config, seq_len, batch);
        loop.carve_workspace(wc);
        loop.carve_reserve(rc);
        const cuda::Workspace<float>& ws = loop.engine().workspace();
        const cuda::Reserve<float>& rs = loop.engine().reserve();
        CHECK(wc.bytes() + slack == ws_bytes);
        CHECK(rc.bytes() + slack == rs_bytes);
        const int64_t frames = seq_len * batch, H = config.hidden_size;
        const int64_t Hs = config.state_size(), P = config.proj_size;
        struct Range {
            const void* p;
            size_t bytes;
        };
        // The engine's arrays (the stack loop's own come before them).
        std::vector<Range> ranges = {
            {ws.index, sizeof(int64_t) * cuda::frame_index_count(seq_len, batch)},
            {ws.ones, sizeof(float) * frames}};
        for (int64_t d = 0; d < config.num_directions(); ++d) {
            ranges.push_back({ws.gates[d], sizeof(float) * frames * 4 * H});
            ranges.push_back({ws.h[d], sizeof(float) * batch * Hs});
            for (const float* p : {ws.c[d], ws.c_init[d]})
                ranges.push_back({p, sizeof(float) * batch * H});
            if (P > 0) ranges.push_back({ws.h_raw[d], sizeof(float) * batch * H});
        }
        if (!config.bidirectional) CHECK(ws.gates[1] == nullptr);
        // Only a projection carves h_raw, and after everything else: without one the workspace
        // is the one the loop had before projections.
        CHECK((ws.h_raw[0] != nullptr) == (P > 0));
        CHECK((ws.h_raw[1] != nullptr) == (P > 0 && config.bidirectional));
        for (size_t i = 0; i < ranges.size(); ++i) {
            const auto a = reinterpret_cast<uintptr_t>(ranges[i].p);
            CHECK(a % lstm::detail::Carver::kAlignment == 0);
            CHECK(a >= uintptr_t(base));
            CHECK(a + ranges[i].bytes <= uintptr_t(base) + ws_bytes);
            for (size_t j = 0; j < i; ++j) {
                const auto b = reinterpret_cast<uintptr_t>(ranges[j].p);
                CHECK((a + ranges[i].bytes <= b || b + ranges[j].bytes <= a));
            }
        }
        const size_t cells = size_t(config.num_cells());
        CHECK(reinterpret_cast<char*>(rs.cell) + sizeof(float) * cells * frames * H <=
              reinterpret_cast<char*>(rs.h_prev));
        if (P == 0) {
            CHECK(rs.h_raw == nullptr);
            CHECK(rs.dh == nullptr);
            CHECK(reinterpret_cast<char*>(rs.h_prev) + sizeof(float) * cells * frames * H ==
                  base + rs_bytes - slack);
        } else {
            CHECK(reinterpret_cast<char*>(rs.h_prev) + sizeof(float) * cells * frames * Hs <=
                  reinterpret_cast<char*>(rs.h_raw));
            CHECK(reinterpret_cast<char*>(rs.h_raw) + sizeof(float) * cells * frames * H <=
                  reinterpret_cast<char*>(rs.dh));
            CHECK(reinterpret_cast<char*>(rs.dh) + sizeof(float) * cells * frames * P ==
                  base + rs_bytes - slack);
        }
        CHECK(cuda::workspace_size(config, DType::f64, seq_len, batch) > ws_bytes);
    }
}

TEST_CASE("carving from a boundary: padding arithmetic on fake addresses", "[cuda_host]") {
    using lstm::detail::kDeviceAlignment;
    using lstm::detail::padding_to_boundary;
    CHECK(padding_to_boundary(0, 256) == 0);
    CHECK(padding_to_boundary(1, 256) == 255);
    CHECK(padding_to_boundary(255, 256) == 1);
    CHECK(padding_to_boundary(256, 256) == 0);
    CHECK(padding_to_boundary(0x10004, 256) == 252);
    CHECK(padding_to_boundary(0x10004, 64) == 60);
    CHECK(padding_to_boundary(0x10040, 64) == 0);
    // Every start within one boundary's span: the carved arrays land at the same absolute
    // addresses (the next boundary), which are aligned, and the last byte stays within the
    // counted size plus the slack (exactly at it for the worst start, one past a boundary).
    auto carve_three = [](lstm::detail::Carver& carve) {
        std::vector<uintptr_t> out;
        out.push_back(reinterpret_cast<uintptr_t>(carve.take<double>(3)));
        out.push_back(reinterpret_cast<uintptr_t>(carve.take<int64_t>(5)));
        out.push_back(reinterpret_cast<uintptr_t>(carve.take<float>(7)));
        return out;
    };
    lstm::detail::Carver counter(nullptr);
    carve_three(counter);
    const size_t counted = counter.bytes();
    const size_t size = counted + kDeviceAlignment - 1;
    const uintptr_t boundary = uintptr_t(1) << 20;
    for (uintptr_t start = boundary - kDeviceAlignment + 1; start <= boundary; ++start) {
        INFO("base " << start);
        lstm::detail::Carver carve =
            lstm::detail::carver_from_boundary<kDeviceAlignment>(reinterpret_cast<void*>(start));
        const std::vector<uintptr_t> got = carve_three(carve);
        CHECK(got[0] == boundary);
        for (uintptr_t a : got) CHECK(a % lstm::detail::Carver::kAlignment == 0);
        CHECK(boundary + counted <= start + size);
        if (start == boundary - kDeviceAlignment + 1) CHECK(boundary + counted == start + size);
    }
    // A null base still only counts.
    lstm::detail::Carver null_carve = lstm::detail::carver_from_boundary<kDeviceAlignment>(nullptr);
    CHECK(null_carve.take<float>(10) == nullptr);
}

TEST_CASE(
    "cuda workspace and reserve at any address: same layout from the first 256-byte "
    "boundary, inside the sized bytes",
    "[cuda_host]") {
    Config projected{123, 320, 4, true};
    projected.proj_size = 100;
    const int64_t seq_len = 7, batch = 5;
    for (const Config& config : {Config{3, 5, 1, false}, Config{123, 320, 4, true}, projected}) {
        for (DType dtype : {DType::f32, DType::f64}) {
            INFO("proj_size " << config.proj_size << ", " << to_string(dtype));
            const size_t ws_bytes = cuda::workspace_size(config, dtype, seq_len, batch);
            const size_t rs_bytes = cuda::reserve_size(config, dtype, seq_len, batch);
            // Last byte each carving touches, relative to the boundary it starts from.
            const uintptr_t aligned = uintptr_t(1) << 24;
            auto ends = [&](uintptr_t base) {
                void* p = reinterpret_cast<void*>(base);
                const uintptr_t start =
                    base + lstm::detail::padding_to_boundary(base, lstm::detail::kDeviceAlignment);
                auto relative = [&](const auto& engine) {
                    const auto& ws = engine.workspace();
                    const auto& rs = engine.reserve();
                    return std::vector<uintptr_t>{reinterpret_cast<uintptr_t>(ws.index) - start,
                                                  reinterpret_cast<uintptr_t>(ws.ones) - start,
                                                  reinterpret_cast<uintptr_t>(rs.gates) - start,
                                                  reinterpret_cast<uintptr_t>(rs.h_prev) - start};
                };
                if (dtype == DType::f32) {
                    cuda::CudaLoop<float, cuda::SizingBackend> loop(config, seq_len, batch);
                    loop.carve_buffers(p, p);
                    return relative(loop.engine());
                }
                cuda::CudaLoop<double, cuda::SizingBackend> loop(config, seq_len, batch);
                loop.carve_buffers(p, p);
                return relative(loop.engine());
            };
            const std::vector<uintptr_t> want = ends(aligned);
            for (uintptr_t at : want) CHECK(at % lstm::detail::Carver::kAlignment == 0);
            for (uintptr_t offset : {1, 4, 8, 16, 64, 100, 255}) {
                INFO("base offset " << offset);
                const uintptr_t base = aligned + offset;
                CHECK(ends(base) == want);
                // The carving from the next boundary still fits the sized bytes.
                lstm::detail::Carver wc =
                    lstm::detail::carver_from_boundary<lstm::detail::kDeviceAlignment>(
                        reinterpret_cast<void*>(base));
                lstm::detail::Carver rc =
                    lstm::detail::carver_from_boundary<lstm::detail::kDeviceAlignment>(
                        reinterpret_cast<void*>(base));
                if (dtype == DType::f32) {
                    cuda::CudaLoop<float, cuda::SizingBackend> loop(config, seq_len, batch);
                    loop.carve_workspace(wc);
                    loop.carve_reserve(rc);
                } else {
                    cuda::CudaLoop<double, cuda::SizingBackend> loop(config, seq_len, batch);
                    loop.carve_workspace(wc);
                    loop.carve_reserve(rc);
                }
                const uintptr_t start = aligned + lstm::detail::kDeviceAlignment;
                CHECK(start + wc.bytes() <= base + ws_bytes);
                CHECK(start + rc.bytes() <= base + rs_bytes);
            }
        }
    }
}

TEST_CASE("cuda loop: workspace and reserve at unaligned addresses give the aligned bits",
          "[cuda_host]") {
    Config projected{4, 6, 2, true};
    projected.proj_size = 3;
    const Offsets offsets[] = {{4, 4}, {8, 8}, {16, 16}, {1, 200}, {100, 36}};
    for (const Config& config : {Config{3, 5, 2, true}, projected}) {
        const reference::LstmCase c = make_case(config, 6, 3, {4, 6, 3}, true, 555);
        const std::vector<double> start = random_vector(param_count(config), 23);
        for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
            const auto aligned = emulate<double>(style, c, true, false, start);
            const auto aligned_inference = emulate<double>(style, c, false, false);
            for (const Offsets& o : offsets) {
                INFO("style " << cuda::to_string(style) << ", proj_size " << config.proj_size
                              << ", workspace +" << o.workspace << ", reserve +" << o.reserve);
                const auto got = emulate<double>(style, c, true, false, start, nullptr, nullptr, o);
                CHECK(got.y == aligned.y);
                CHECK(got.hn == aligned.hn);
                CHECK(got.cn == aligned.cn);
                CHECK(got.dx == aligned.dx);
                CHECK(got.dh0 == aligned.dh0);
                CHECK(got.dc0 == aligned.dc0);
                CHECK(got.dparams == aligned.dparams);
                const auto inference =
                    emulate<double>(style, c, false, false, {}, nullptr, nullptr, o);
                CHECK(inference.y == aligned_inference.y);
                CHECK(inference.hn == aligned_inference.hn);
                CHECK(inference.cn == aligned_inference.cn);
            }
        }
    }
}

TEST_CASE("cuda graph schedule: eager first, capture on the repeat, replay after", "[cuda_host]") {
    using cuda::GraphAction;
    cuda::GraphSchedule schedule;
    schedule.reserve(8);
    const std::vector<uint64_t> a = {0, 1, 7, 0x1000}, b = {0, 1, 5, 0x1000};
    bool have_graph = false;
    // One call of signature `sig`: what the schedule decides, recorded as execute() does.
    auto call = [&](const std::vector<uint64_t>& sig) {
        std::vector<uint64_t> scratch = sig;
        const GraphAction action = schedule.decide(scratch, have_graph);
        if (action == GraphAction::capture) have_graph = true;
        schedule.record(action, scratch);
        return action;
    };
    CHECK(call(a) == GraphAction::eager);
    CHECK(call(a) == GraphAction::capture);
    CHECK(call(a) == GraphAction::replay);
    CHECK(call(a) == GraphAction::replay);
    // Another signature: eager once; replays of a's graph in between do not forget it, so its
    // next call is captured in place of a's graph.
    CHECK(call(b) == GraphAction::eager);
    CHECK(call(a) == GraphAction::replay);
    CHECK(call(b) == GraphAction::capture);
    CHECK(call(b) == GraphAction::replay);
    CHECK(call(a) == GraphAction::eager);
    CHECK(call(a) == GraphAction::capture);
    // Alternating signatures never repeat back to back: every call runs eagerly.
    schedule = cuda::GraphSchedule();
    have_graph = false;
    for (int k = 0; k < 6; ++k) CHECK(call(k % 2 == 0 ? a : b) == GraphAction::eager);
    // A capture that failed leaves no graph: the repeat is captured again, never replayed.
    schedule = cuda::GraphSchedule();
    CHECK(schedule.decide(a, false) == GraphAction::eager);
    std::vector<uint64_t> scratch = a;
    schedule.record(GraphAction::eager, scratch);
    CHECK(schedule.decide(a, false) == GraphAction::capture);
    CHECK(schedule.decide(a, false) == GraphAction::capture);
}

#if LSTM_WITH_CUDA
TEST_CASE("cuda graphs: LSTM_CUDA_GRAPHS=0 turns them off by default, other values are refused",
          "[cuda_host]") {
    const test::EnvScope env("LSTM_CUDA_GRAPHS", nullptr);  // restores the caller's setting
    CHECK(cuda::graphs_enabled_by_default());
    setenv("LSTM_CUDA_GRAPHS", "0", 1);
    CHECK_FALSE(cuda::graphs_enabled_by_default());
    setenv("LSTM_CUDA_GRAPHS", "1", 1);
    CHECK(cuda::graphs_enabled_by_default());
    // A typo once left graphs on silently.
    setenv("LSTM_CUDA_GRAPHS", "off", 1);
    CHECK_THROWS_WITH(cuda::graphs_enabled_by_default(), "LSTM_CUDA_GRAPHS = 'off' is not 0 or 1");
}
#endif

TEST_CASE("cuda call signatures", "[cuda_host]") {
    // Signatures: lengths and every pointer matter.
    std::vector<float> x(10), y(10), p(10);
    std::vector<int64_t> lengths = {7, 3, 5};
    ForwardArgs<float> f;
    f.x = TensorView<const float>(x.data(), {1});
    f.params = TensorView<const float>(p.data(), {1});
    f.y = TensorView<float>(y.data(), {1});
    f.lengths = Span<const int64_t>(lengths);
    std::vector<uint64_t> s0, s1;
    cuda::call_signature(f, s0);
    cuda::call_signature(f, s1);
    CHECK(s0 == s1);
    lengths[1] = 4;
    cuda::call_signature(f, s1);
    CHECK(s0 != s1);
    lengths[1] = 3;
    f.y = TensorView<float>(y.data() + 1, {1});
    cuda::call_signature(f, s1);
    CHECK(s0 != s1);
    f.y = TensorView<float>(y.data(), {1});
    f.reserve = p.data();
    cuda::call_signature(f, s1);
    CHECK(s0 != s1);

    BackwardArgs<float> b;
    b.x = f.x;
    b.lengths = f.lengths;
    std::vector<uint64_t> b0, b1;
    cuda::call_signature(b, b0);
    b.dx = TensorView<float>(y.data(), {1});
    cuda::call_signature(b, b1);
    CHECK(b0 != b1);
    b.dx = TensorView<float>();
    b.part = BackwardPart::data;
    cuda::call_signature(b, b1);
    CHECK(b0 != b1);
}

TEST_CASE("cuda loop: sizes past cuBLAS's 32-bit dimensions are named", "[cuda_host]") {
    const int64_t max = std::numeric_limits<int>::max();
    for (LoopStyle style : {LoopStyle::basic, LoopStyle::fused}) {
        INFO("style " << cuda::to_string(style));
        CHECK_FALSE(cuda::loop_size_problem(Config{3, 5, 2, true}, style, 100, 64));
        // 4H past INT_MAX though H fits, with a projection keeping everything else small.
        const Config wide_gates{1, int64_t(1) << 29, 1, false, 1, true};
        CHECK_THAT(cuda::loop_size_problem(wide_gates, style, 1, 1).value_or(""),
                   Catch::Contains("gate columns (4 * hidden_size) = 2147483648 exceeds"));
        CHECK_FALSE(cuda::loop_size_problem(Config{1, max / 4, 1, false, 1, true}, style, 1, 1));
        CHECK_THAT(cuda::loop_size_problem(Config{max + 1, 1, 1, false}, style, 1, 1).value_or(""),
                   Catch::Contains("input_size (I) = 2147483648 exceeds"));
        // Per-step GEMMs have up to N rows.
        CHECK_THAT(cuda::loop_size_problem(Config{1, 1, 1, false}, style, 1, max + 1).value_or(""),
                   Catch::Contains("N (GEMM rows per step) = 2147483648 exceeds"));
    }
    // fused's GEMMs over all steps have up to T * N rows; basic's never more than N.
    const Config small{1, 1, 1, false};
    CHECK_FALSE(
        cuda::loop_size_problem(small, LoopStyle::basic, int64_t(1) << 16, int64_t(1) << 15));
    CHECK_THAT(cuda::loop_size_problem(small, LoopStyle::fused, int64_t(1) << 16, int64_t(1) << 15)
                   .value_or(""),
               Catch::Contains("T * N = 65536 * 32768 exceeds 2147483647"));
    CHECK_FALSE(cuda::loop_size_problem(small, LoopStyle::fused, 1, max));
    // A product past 64 bits is refused, not wrapped into a small one.
    CHECK(cuda::loop_size_problem(small, LoopStyle::fused, int64_t(1) << 40, int64_t(1) << 30));
}

#if LSTM_WITH_CUDA
TEST_CASE("cuda basic and fused refuse sizes cuBLAS cannot take before any device work",
          "[cuda_host]") {
    for (const char* name : {"basic", "fused"}) {
        const Variant& v = find_variant(name, Device::cuda);
        INFO("variant " << name);
        // supports() names the config's part, so require() and every entry point refuse it as
        // Unsupported before the context is looked at (no context is given here).
        const Config wide_gates{1, int64_t(1) << 29, 1, false, 1, true};
        CHECK_THAT(v.supports(wide_gates, DType::f32).value_or(""),
                   Catch::Contains("gate columns (4 * hidden_size) = 2147483648"));
        float* fake = reinterpret_cast<float*>(uintptr_t(1) << 20);
        ForwardArgs<float> f;
        f.x = TensorView<const float>(fake, {1, 1, 1}, Device::cuda);
        f.params = TensorView<const float>(fake, {param_count(wide_gates)}, Device::cuda);
        f.y = TensorView<float>(fake, {1, 1, 1}, Device::cuda);
        CHECK_THROWS_AS(v.forward(wide_gates, f), Unsupported);
        CHECK_THROWS_WITH(v.forward(wide_gates, f), Catch::Contains("4 * hidden_size"));
        // (T, N) parts come with the sizing queries, which forward and backward call before
        // run_forward / run_backward: fused at T * N = 2^31 once failed mid-call, after basic's
        // N = 2^31 had already queued work.
        const Config small{1, 1, 1, false};
        const int64_t T = int64_t(1) << 16, N = int64_t(1) << 15;
        if (std::string(name) == "fused") {
            CHECK_THROWS_AS(v.workspace_bytes(small, DType::f32, T, N), Unsupported);
            CHECK_THROWS_WITH(v.reserve_bytes(small, DType::f64, T, N),
                              Catch::Contains("variant 'fused' (cuda) cannot run T = 65536, N = "
                                              "32768: cuBLAS takes 32-bit sizes"));
        } else {
            CHECK(v.workspace_bytes(small, DType::f32, T, N) ==
                  cuda::workspace_size(small, DType::f32, T, N));
        }
        CHECK_THROWS_AS(v.workspace_bytes(small, DType::f32, 1, int64_t(1) << 31), Unsupported);
        CHECK_THROWS_WITH(v.reserve_bytes(small, DType::f32, 1, int64_t(1) << 31),
                          Catch::Contains("N (GEMM rows per step) = 2147483648"));
    }
}

TEST_CASE("cuda basic and fused are registered, sized by the shared carving, need a context",
          "[cuda_host]") {
    const std::vector<const Variant*> on_cuda = variants_on(Device::cuda);
    REQUIRE(on_cuda.size() >= 2);
    CHECK(std::string(on_cuda[0]->name()) == "basic");
    CHECK(std::string(on_cuda[1]->name()) == "fused");
    const Config config{3, 5, 2, true};
    for (const char* name : {"basic", "fused"}) {
        const Variant& v = find_variant(name, Device::cuda);
        INFO("variant " << name);
        CHECK_FALSE(v.supports(config, DType::f32).has_value());
        CHECK_FALSE(v.supports(config, DType::f64).has_value());
        // nn.LSTM(proj_size=2, bias=False) as well.
        CHECK_FALSE(v.supports(Config{3, 5, 2, true, 2, false}, DType::f32).has_value());
        CHECK_FALSE(v.supports(Config{3, 5, 2, true, 2, false}, DType::f64).has_value());
        CHECK_FALSE(v.supports_split_backward().has_value());
        CHECK(v.workspace_bytes(config, DType::f32, 7, 3) ==
              cuda::workspace_size(config, DType::f32, 7, 3));
        CHECK(v.reserve_bytes(config, DType::f32, 7, 3) ==
              cuda::reserve_size(config, DType::f32, 7, 3));
        // Rejected before any pointer is touched, so fake device pointers are fine here.
        float* fake = reinterpret_cast<float*>(uintptr_t(1) << 20);
        ForwardArgs<float> f;
        f.x = TensorView<const float>(fake, {7, 3, 3}, Device::cuda);
        f.params = TensorView<const float>(fake, {param_count(config)}, Device::cuda);
        f.y = TensorView<float>(fake, {7, 3, 10}, Device::cuda);
        f.workspace = fake;
        f.workspace_size = v.workspace_bytes(config, DType::f32, 7, 3);
        REQUIRE_THROWS_WITH(v.forward(config, f), Catch::Contains("context must be"));
    }
}
#endif
