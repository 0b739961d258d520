// The CUDA variants take workspace and reserve at any address (docs/architecture.md): each
// variant runs with both buffers offset by a few bytes from a cudaMalloc pointer and must give
// the bits of the run with aligned buffers, in a training step and in inference, in fp32 and fp64.

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/cuda/context.hpp"
#include "lstm/problem.hpp"
#include "lstm/registry.hpp"
#include "variant_runner.hpp"

using namespace lstm;
using namespace lstm::test;

namespace {

template <typename T>
void check_offsets(const Variant& v, const LstmCase& c, cuda::Context& ctx) {
    const Config& cfg = c.in.config;
    const size_t ws_bytes = v.workspace_bytes(cfg, dtype_of<T>(), c.in.seq_len, c.in.batch);
    const size_t rs_bytes = v.reserve_bytes(cfg, dtype_of<T>(), c.in.seq_len, c.in.batch);
    // cudaMalloc'ed (256-byte aligned) with room for the largest offset below.
    constexpr size_t kMaxOffset = 256;
    Buffer workspace(Device::cuda, ws_bytes + kMaxOffset);
    Buffer reserve(Device::cuda, rs_bytes + kMaxOffset);
    REQUIRE(reinterpret_cast<uintptr_t>(workspace.data()) % 256 == 0);
    REQUIRE(reinterpret_cast<uintptr_t>(reserve.data()) % 256 == 0);
    auto scratch_at = [&](size_t ws_offset, size_t rs_offset) {
        ScratchBuffers s;
        s.workspace = static_cast<char*>(workspace.data()) + ws_offset;
        s.workspace_size = ws_bytes;
        s.reserve = static_cast<char*>(reserve.data()) + rs_offset;
        s.reserve_size = rs_bytes;
        return s;
    };

    LstmProblem<T> p = case_problem<T>(c, Device::cuda, &ctx);
    p.use_scratch(scratch_at(0, 0));
    const reference::VariantResult aligned = train_problem(v, p, false);
    const reference::VariantResult aligned_inference = infer_problem(v, p);
    // Offsets a caller's sub-buffer may have: 4 (float), 8 (double), 16 (malloc), 64 (a cache
    // line), and the workspace and reserve at different ones.
    const std::pair<size_t, size_t> offsets[] = {{4, 4}, {8, 8}, {16, 16}, {64, 64}, {4, 200}};
    for (const auto& [ws_offset, rs_offset] : offsets) {
        INFO("workspace at +" << ws_offset << " bytes, reserve at +" << rs_offset << " bytes");
        p.use_scratch(scratch_at(ws_offset, rs_offset));
        check_same_bits(train_problem(v, p, false), aligned, true);
        check_same_bits(infer_problem(v, p), aligned_inference, false);
    }
}

}  // namespace

TEST_CASE("gpu: CUDA variants take workspace and reserve at any alignment, same bits",
          "[gpu][alignment]") {
    const std::vector<const Variant*> on_gpu = variants_on(Device::cuda);
    REQUIRE_FALSE(on_gpu.empty());
    cuda::Context ctx;
    // Graph capture and replay are checked on their own (graph_test.cpp); eager calls here keep
    // any difference down to where the arrays lie.
    ctx.set_graphs_enabled(false);
    Config projected{4, 6, 2, true};
    projected.proj_size = 3;
    const std::vector<Shape> shapes = {
        {"bi 2 layers, mixed lengths", {3, 5, 2, true}, 6, 3, {4, 6, 3}, true},
        {"uni 1 layer, equal lengths, no state", {5, 7, 1, false}, 5, 4, {}, false},
        {"bi 2 layers, proj 3, mixed lengths", projected, 5, 3, {5, 1, 3}, true},
    };
    uint64_t seed = 7100;
    for (const Shape& s : shapes) {
        const LstmCase c = make_case(s.config, s.seq_len, s.batch, s.lengths, s.with_state, seed);
        seed += 10;
        for (const Variant* v : on_gpu) {
            const bool variable =
                lstm::detail::has_variable_lengths(Span<const int64_t>(c.in.lengths), s.seq_len);
            if (variable && v->supports_variable_lengths()) continue;
            for (DType dt : {DType::f32, DType::f64}) {
                if (v->supports(s.config, dt)) continue;
                INFO("variant " << v->name() << ", case: " << s.name << ", " << to_string(dt));
                if (dt == DType::f32)
                    check_offsets<float>(*v, c, ctx);
                else
                    check_offsets<double>(*v, c, ctx);
            }
        }
    }
}
