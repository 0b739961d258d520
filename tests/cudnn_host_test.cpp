// Host-side logic of the `cudnn` (cuda) variant, on the CPU: the weight mapping between our flat
// buffer and cuDNN's linLayerIDs, the checks on what cuDNN reports, the coalescing of the copies
// (on simulated cuDNN layouts, with the copies executed in host memory), workspace and reserve
// carving, lengths and padding. What needs cuDNN itself is in tests/gpu/cudnn_test.cpp.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "lstm/params.hpp"
#include "lstm/variants/cudnn_weights.hpp"
#include "test_util.hpp"

#if LSTM_WITH_CUDA && LSTM_WITH_CUDNN
#include "lstm/cuda/context.hpp"
#include "lstm/registry.hpp"
#include "lstm/variants/cudnn.hpp"
#endif

using namespace lstm;
using cuda::CudnnCopySegment;
using cuda::CudnnPiece;
using cuda::CudnnPieceKind;

namespace {

Config without_bias(Config c) {
    c.bias = false;
    return c;
}

Config projected(Config c, int64_t proj_size) {
    c.proj_size = proj_size;
    return c;
}

const Config kConfigs[] = {
    {3, 5, 1, false},  // I != H, one cell
    {3, 5, 2, true},   // bidirectional stack: layer 1 reads 2H
    {4, 4, 3, false},  // I == H, three layers
    {7, 2, 2, true},
    without_bias({3, 5, 2, true}),  // CUDNN_RNN_NO_BIAS: matrices only
    // Recurrent projection: recurrent matrices (H, P), layer 1 reads 2P, linLayerID 8 = W_hr.
    projected({3, 5, 2, true}, 3),
    projected({4, 6, 3, false}, 1),
    without_bias(projected({3, 5, 2, true}, 2)),
};

std::string config_name(const Config& c) {
    return "I " + std::to_string(c.input_size) + ", H " + std::to_string(c.hidden_size) + ", L " +
           std::to_string(c.num_layers) + (c.bidirectional ? ", bi" : ", uni") +
           (c.bias ? "" : ", no bias") +
           (c.proj_size > 0 ? ", proj " + std::to_string(c.proj_size) : "");
}

// What a piece must be, stated through PyTorch's parameter names (param_entries) rather than
// cell_offsets, so the mapping is checked against a second description of our layout.
CudnnPiece expected_piece(const Config& config, int64_t pseudo_layer, int id, CudnnPieceKind kind) {
    const int64_t dirs = config.num_directions(), hidden = config.hidden_size;
    const std::string suffix =
        "_l" + std::to_string(pseudo_layer / dirs) + (pseudo_layer % dirs == 1 ? "_reverse" : "");
    const bool recurrent = id >= 4;
    const int64_t gate = id % 4;
    CudnnPiece p;
    p.pseudo_layer = pseudo_layer;
    p.lin_layer_id = id;
    p.kind = kind;
    if (id == 8) {  // cuDNN's projection matrix: all of weight_hr (P, H)
        const ParamEntry e = find_param(config, "weight_hr" + suffix);
        p.rows = e.rows;
        p.cols = e.cols;
        p.param_offset = e.offset;
        return p;
    }
    p.rows = hidden;
    if (kind == CudnnPieceKind::matrix) {
        const ParamEntry e = find_param(config, (recurrent ? "weight_hh" : "weight_ih") + suffix);
        p.cols = e.cols;
        p.param_offset = e.offset + gate * hidden * e.cols;
    } else {
        const ParamEntry e = find_param(config, (recurrent ? "bias_hh" : "bias_ih") + suffix);
        p.cols = 1;
        p.param_offset = e.offset + gate * hidden;
    }
    return p;
}

// A cuDNN-like weight space for `config`: per pseudo-layer the 4 input matrices, the 4
// recurrent ones, then the 4 b_W and 4 b_R biases (absent without biases) and the projection
// matrix (with a projection), each group starting at a multiple of `align` elements, groups in
// the order `group_order` (a permutation of 0..4: W, R, bW, bR, projection) and gates within a
// group in the order `gate_order`. Returns the pieces' space offsets in cudnn_pieces() order and
// the space size.
struct SimulatedSpace {
    std::vector<int64_t> offsets;
    int64_t elems = 0;
};

SimulatedSpace simulate_cudnn_space(const Config& config, int64_t align,
                                    const std::vector<int>& group_order,
                                    const std::vector<int>& gate_order) {
    const std::vector<CudnnPiece> pieces = cuda::cudnn_pieces(config);
    SimulatedSpace s;
    s.offsets.assign(pieces.size(), -1);
    int64_t at = 0;
    for (int64_t pl = 0; pl < config.num_cells(); ++pl) {
        for (int group : group_order) {
            at = (at + align - 1) / align * align;
            if (group == 4) {  // the projection: one matrix, linLayerID 8
                for (size_t k = 0; k < pieces.size(); ++k)
                    if (pieces[k].pseudo_layer == pl && pieces[k].lin_layer_id == 8) {
                        s.offsets[k] = at;
                        at += pieces[k].numel();
                    }
                continue;
            }
            const bool bias = group == 2 || group == 3, recurrent = group % 2 == 1;
            for (int gate : gate_order) {
                const int id = gate + (recurrent ? 4 : 0);
                for (size_t k = 0; k < pieces.size(); ++k) {
                    const CudnnPiece& p = pieces[k];
                    if (p.pseudo_layer == pl && p.lin_layer_id == id &&
                        (p.kind == CudnnPieceKind::bias) == bias) {
                        s.offsets[k] = at;
                        at += p.numel();
                    }
                }
            }
        }
    }
    s.elems = (at + align - 1) / align * align;
    return s;
}

std::vector<CudnnCopySegment> segments_of(const Config& config, const SimulatedSpace& s) {
    const std::vector<CudnnPiece> pieces = cuda::cudnn_pieces(config);
    std::vector<CudnnCopySegment> out;
    for (size_t k = 0; k < pieces.size(); ++k)
        out.push_back({pieces[k].param_offset, s.offsets[k], pieces[k].numel()});
    return out;
}

}  // namespace

TEST_CASE("cudnn mapping: every linLayerID names the PyTorch rows it holds", "[cudnn_host]") {
    for (const Config& config : kConfigs) {
        INFO(config_name(config));
        const std::vector<CudnnPiece> pieces = cuda::cudnn_pieces(config);
        const int per_cell = (config.bias ? 16 : 8) + (config.proj_size > 0 ? 1 : 0);
        REQUIRE(pieces.size() == size_t(config.num_cells() * per_cell));
        for (const CudnnPiece& p : pieces) {
            const CudnnPiece want = expected_piece(config, p.pseudo_layer, p.lin_layer_id, p.kind);
            INFO(cuda::cudnn_piece_name(config, p));
            CHECK(p.param_offset == want.param_offset);
            CHECK(p.rows == want.rows);
            CHECK(p.cols == want.cols);
        }
        // The pieces tile the flat buffer: every element exactly once.
        std::vector<int> hits(static_cast<size_t>(param_count(config)), 0);
        for (const CudnnPiece& p : pieces)
            for (int64_t k = 0; k < p.numel(); ++k) ++hits[static_cast<size_t>(p.param_offset + k)];
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
}

TEST_CASE("cudnn mapping: literal offsets of a one-cell LSTM", "[cudnn_host]") {
    // I 3, H 5: weight_ih (20, 3) at 0, weight_hh (20, 5) at 60, bias_ih at 160, bias_hh at 180.
    const Config config{3, 5, 1, false};
    REQUIRE(param_count(config) == 200);
    auto piece = [&](int id, CudnnPieceKind kind) {
        return cuda::cudnn_piece(config, 0, id, kind);
    };
    CHECK(piece(0, CudnnPieceKind::matrix).param_offset == 0);
    CHECK(piece(1, CudnnPieceKind::matrix).param_offset == 15);  // gate f: rows 5..9 of (20, 3)
    CHECK(piece(3, CudnnPieceKind::matrix).param_offset == 45);
    CHECK(piece(3, CudnnPieceKind::matrix).cols == 3);
    CHECK(piece(4, CudnnPieceKind::matrix).param_offset == 60);
    CHECK(piece(6, CudnnPieceKind::matrix).param_offset == 110);  // gate g of weight_hh
    CHECK(piece(6, CudnnPieceKind::matrix).cols == 5);
    CHECK(piece(0, CudnnPieceKind::bias).param_offset == 160);
    CHECK(piece(3, CudnnPieceKind::bias).param_offset == 175);
    CHECK(piece(4, CudnnPieceKind::bias).param_offset == 180);
    CHECK(piece(7, CudnnPieceKind::bias).param_offset == 195);
    CHECK(piece(7, CudnnPieceKind::bias).numel() == 5);

    // Bidirectional, 2 layers, I 3, H 5: the reverse cell of layer 1 reads 2H = 10 inputs.
    const Config bi{3, 5, 2, true};
    const CudnnPiece p = cuda::cudnn_piece(bi, 3, 2, CudnnPieceKind::matrix);
    CHECK(p.cols == 10);
    CHECK(p.param_offset == find_param(bi, "weight_ih_l1_reverse").offset + 2 * 5 * 10);
    CHECK(cuda::cudnn_piece_name(bi, p) ==
          "weight_ih_l1_reverse rows of gate g (pseudo-layer 3, linLayerID 2, matrix)");
    CHECK(cuda::cudnn_piece_name(bi, cuda::cudnn_piece(bi, 0, 5, CudnnPieceKind::bias)) ==
          "bias_hh_l0 entries of gate f (pseudo-layer 0, linLayerID 5, bias)");
    CHECK_THROWS_WITH(cuda::cudnn_piece(bi, 4, 0, CudnnPieceKind::matrix),
                      Catch::Contains("pseudo_layer 4 outside 0..3"));
    CHECK_THROWS_WITH(cuda::cudnn_piece(bi, 0, 8, CudnnPieceKind::bias),
                      Catch::Contains("lin_layer_id 8 outside 0..7"));
    CHECK_THROWS_WITH(cuda::cudnn_piece(without_bias(bi), 0, 1, CudnnPieceKind::bias),
                      Catch::Contains("no bias in a config without biases"));
}

TEST_CASE("cudnn mapping: literal offsets with a recurrent projection", "[cudnn_host]") {
    // I 3, H 5, P 2, one cell: weight_ih (20, 3) at 0, weight_hh (20, 2) at 60, bias_ih at 100,
    // bias_hh at 120, weight_hr (2, 5) at 140.
    const Config config = projected({3, 5, 1, false}, 2);
    REQUIRE(param_count(config) == 150);
    auto piece = [&](int id, CudnnPieceKind kind) {
        return cuda::cudnn_piece(config, 0, id, kind);
    };
    CHECK(piece(3, CudnnPieceKind::matrix).param_offset == 45);
    CHECK(piece(3, CudnnPieceKind::matrix).cols == 3);
    // Recurrent matrices read the projected h: (H, P) blocks of weight_hh (4H, P).
    CHECK(piece(4, CudnnPieceKind::matrix).param_offset == 60);
    CHECK(piece(5, CudnnPieceKind::matrix).param_offset == 70);
    CHECK(piece(7, CudnnPieceKind::matrix).rows == 5);
    CHECK(piece(7, CudnnPieceKind::matrix).cols == 2);
    CHECK(piece(0, CudnnPieceKind::bias).param_offset == 100);
    CHECK(piece(4, CudnnPieceKind::bias).param_offset == 120);
    const CudnnPiece hr = piece(8, CudnnPieceKind::matrix);
    CHECK(hr.param_offset == 140);
    CHECK(hr.rows == 2);
    CHECK(hr.cols == 5);
    CHECK(cuda::cudnn_piece_name(config, hr) ==
          "weight_hr_l0 (pseudo-layer 0, linLayerID 8, matrix)");
    CHECK(cuda::cudnn_pieces(config).back().lin_layer_id == 8);
    CHECK_THROWS_WITH(piece(8, CudnnPieceKind::bias), Catch::Contains("has no bias"));
    CHECK_THROWS_WITH(piece(9, CudnnPieceKind::matrix),
                      Catch::Contains("lin_layer_id 9 outside 0..8"));

    // Bidirectional, 2 layers, P 3: layer 1 reads D*P = 6 inputs; the reverse projection of
    // layer 1 is pseudo-layer 3's linLayerID 8.
    const Config bi = projected({3, 5, 2, true}, 3);
    CHECK(cuda::cudnn_piece(bi, 3, 2, CudnnPieceKind::matrix).cols == 6);
    const CudnnPiece hr_bi = cuda::cudnn_piece(bi, 3, 8, CudnnPieceKind::matrix);
    CHECK(hr_bi.param_offset == find_param(bi, "weight_hr_l1_reverse").offset);
    CHECK(cuda::cudnn_piece_name(bi, hr_bi) ==
          "weight_hr_l1_reverse (pseudo-layer 3, linLayerID 8, matrix)");

    // cuDNN's description of W_r is checked like any matrix: (1, P, H) dense.
    {
        const int dims[3] = {1, 2, 5}, strides[3] = {10, 5, 1};
        CHECK_NOTHROW(cuda::check_cudnn_reported_shape(config, hr, 3, dims, strides));
    }
    {  // transposed (H, P): a plain copy would scramble it
        const int dims[3] = {1, 5, 2}, strides[3] = {10, 2, 1};
        CHECK_THROWS_WITH(
            cuda::check_cudnn_reported_shape(config, hr, 3, dims, strides),
            Catch::Contains("weight_hr_l0") && Catch::Contains("expected dims (1, 2, 5)"));
    }
}

TEST_CASE("cudnn mapping: the shapes cuDNN reports are checked", "[cudnn_host]") {
    const Config config{3, 5, 1, false};
    const CudnnPiece w = cuda::cudnn_piece(config, 0, 1, CudnnPieceKind::matrix);
    const CudnnPiece b = cuda::cudnn_piece(config, 0, 6, CudnnPieceKind::bias);
    {
        const int dims[3] = {1, 5, 3}, strides[3] = {15, 3, 1};
        CHECK_NOTHROW(cuda::check_cudnn_reported_shape(config, w, 3, dims, strides));
    }
    {
        const int dims[3] = {1, 5, 1}, strides[3] = {5, 1, 1};
        CHECK_NOTHROW(cuda::check_cudnn_reported_shape(config, b, 3, dims, strides));
    }
    {  // transposed: cuDNN would hold (in, H); a plain copy would scramble it
        const int dims[3] = {1, 3, 5}, strides[3] = {15, 5, 1};
        CHECK_THROWS_WITH(cuda::check_cudnn_reported_shape(config, w, 3, dims, strides),
                          Catch::Contains("weight_ih_l0 rows of gate f") &&
                              Catch::Contains("dims (1, 3, 5)") &&
                              Catch::Contains("expected dims (1, 5, 3)"));
    }
    {  // padded rows
        const int dims[3] = {1, 5, 3}, strides[3] = {20, 4, 1};
        CHECK_THROWS_WITH(cuda::check_cudnn_reported_shape(config, w, 3, dims, strides),
                          Catch::Contains("strides (20, 4, 1)"));
    }
    {  // rank 2
        const int dims[2] = {5, 3}, strides[2] = {3, 1};
        CHECK_THROWS(cuda::check_cudnn_reported_shape(config, w, 2, dims, strides));
    }
    // Offsets: on an element boundary and inside the space.
    CHECK(cuda::cudnn_space_offset(config, w, 64, sizeof(float), 1024) == 16);
    CHECK_THROWS_WITH(cuda::cudnn_space_offset(config, w, 62, sizeof(float), 1024),
                      Catch::Contains("byte offset 62"));
    CHECK_THROWS_WITH(cuda::cudnn_space_offset(config, w, 1000, sizeof(float), 1024),
                      Catch::Contains("inside the space's 1024"));
    CHECK_THROWS(cuda::cudnn_space_offset(config, w, -4, sizeof(float), 1024));
}

TEST_CASE("cudnn copies: coalescing on simulated cuDNN layouts, executed in host memory",
          "[cudnn_host]") {
    struct Layout {
        const char* name;
        int64_t align;
        std::vector<int> groups, gates;
        int64_t max_copies_per_cell;  // what the merge must reach at most
    };
    // Group 4 is the projection matrix, absent (an empty group) without a projection.
    const std::vector<Layout> layouts = {
        {"ours exactly", 1, {0, 1, 2, 3, 4}, {0, 1, 2, 3}, 1},
        {"ours, cells 64-aligned", 64, {0, 1, 2, 3, 4}, {0, 1, 2, 3}, 5},
        {"matrices before biases, 16-aligned groups", 16, {0, 1, 2, 3, 4}, {0, 1, 2, 3}, 5},
        {"biases first", 1, {2, 3, 0, 1, 4}, {0, 1, 2, 3}, 5},
        {"projection first", 1, {4, 0, 1, 2, 3}, {0, 1, 2, 3}, 5},
        {"gates reversed", 1, {0, 1, 2, 3, 4}, {3, 2, 1, 0}, 17},
    };
    for (const Config& config : kConfigs) {
        for (const Layout& layout : layouts) {
            INFO(config_name(config) << ", layout: " << layout.name);
            const SimulatedSpace space =
                simulate_cudnn_space(config, layout.align, layout.groups, layout.gates);
            const std::vector<CudnnCopySegment> copies = cuda::coalesce_copy_segments(
                segments_of(config, space), param_count(config), space.elems);
            CHECK(int64_t(copies.size()) <= layout.max_copies_per_cell * config.num_cells());
            if (layout.align == 1 && layout.groups == std::vector<int>{0, 1, 2, 3, 4} &&
                layout.gates == std::vector<int>{0, 1, 2, 3})
                CHECK(copies.size() == 1);  // the whole buffer in one copy
            CHECK(cuda::covered_elements(copies) == param_count(config));

            // Pack (params -> space) with the merged copies, then read every piece back at the
            // offset "cuDNN reported" and compare with the canonical layout element-wise.
            std::vector<double> params(static_cast<size_t>(param_count(config)));
            for (size_t k = 0; k < params.size(); ++k) params[k] = 1.0 + double(k);
            std::vector<double> weight_space(static_cast<size_t>(space.elems), -1.0);
            for (const CudnnCopySegment& c : copies)
                std::memcpy(&weight_space[size_t(c.space_offset)], &params[size_t(c.param_offset)],
                            size_t(c.count) * sizeof(double));
            const std::vector<CudnnPiece> pieces = cuda::cudnn_pieces(config);
            size_t wrong = 0;
            for (size_t k = 0; k < pieces.size(); ++k) {
                const CudnnPiece want = expected_piece(config, pieces[k].pseudo_layer,
                                                       pieces[k].lin_layer_id, pieces[k].kind);
                for (int64_t e = 0; e < want.numel(); ++e)
                    if (weight_space[size_t(space.offsets[k] + e)] !=
                        params[size_t(want.param_offset + e)])
                        ++wrong;
            }
            CHECK(wrong == 0);
            // Unpack (space -> params) restores every parameter.
            std::vector<double> back(params.size(), 0.0);
            for (const CudnnCopySegment& c : copies)
                std::memcpy(&back[size_t(c.param_offset)], &weight_space[size_t(c.space_offset)],
                            size_t(c.count) * sizeof(double));
            CHECK(back == params);
        }
    }
}

TEST_CASE("cudnn copies: a mapping that misses, repeats or overflows is refused", "[cudnn_host]") {
    // Two pieces of 4 elements each in an 8-element buffer.
    std::vector<CudnnCopySegment> ok = {{0, 8, 4}, {4, 0, 4}};
    CHECK(cuda::coalesce_copy_segments(ok, 8, 16).size() == 2);
    std::vector<CudnnCopySegment> merged = {{4, 4, 4}, {0, 0, 4}};
    const auto one = cuda::coalesce_copy_segments(merged, 8, 8);
    REQUIRE(one.size() == 1);
    CHECK(one[0].count == 8);

    CHECK_THROWS_WITH(cuda::coalesce_copy_segments({{0, 0, 4}, {5, 4, 3}}, 8, 16),
                      Catch::Contains("from 4 to 5 are not copied"));
    CHECK_THROWS_WITH(cuda::coalesce_copy_segments({{0, 0, 4}, {0, 4, 4}, {4, 8, 4}}, 8, 16),
                      Catch::Contains("copied twice"));
    CHECK_THROWS_WITH(cuda::coalesce_copy_segments({{0, 0, 4}, {4, 2, 4}}, 8, 16),
                      Catch::Contains("overlap"));
    CHECK_THROWS_WITH(cuda::coalesce_copy_segments({{0, 0, 4}, {4, 14, 4}}, 8, 16),
                      Catch::Contains("outside cuDNN's weight space of 16"));
    CHECK_THROWS_WITH(cuda::coalesce_copy_segments({{0, 0, 4}}, 8, 16),
                      Catch::Contains("cover 4 parameter elements, expected param_count = 8"));
}

TEST_CASE("cudnn buffers: sizing and carving agree, slots 256-byte aligned", "[cudnn_host]") {
    cuda::CudnnSizes sizes;
    sizes.weight_space = 1000;  // not a multiple of 256: the next slot must still be aligned
    sizes.work_training = 5000;
    sizes.work_inference = 7000;  // the larger of the two is carved
    sizes.reserve_training = 333;
    const int64_t seq_len = 7, batch = 3, input = 5;

    lstm::detail::Carver counter(nullptr);
    cuda::carve_cudnn_workspace(counter, sizes, seq_len, batch, input, sizeof(float));
    const size_t ws_bytes = counter.bytes();
    CHECK(ws_bytes == 1024 + 7168 + 512);  // weights, work, dx of 7*3*5 floats (420 bytes)

    // Carve a real buffer at a 256-aligned base: pointers at the counted offsets.
    std::vector<unsigned char> storage(ws_bytes + 256);
    unsigned char* base = storage.data();
    base += (256 - reinterpret_cast<uintptr_t>(base) % 256) % 256;
    lstm::detail::Carver carver(base);
    const cuda::CudnnWorkspace ws =
        cuda::carve_cudnn_workspace(carver, sizes, seq_len, batch, input, sizeof(float));
    CHECK(carver.bytes() == ws_bytes);
    CHECK(ws.weights == base);
    CHECK(ws.weights_bytes == 1024);
    CHECK(ws.work == base + 1024);
    CHECK(ws.work_bytes == 7168);
    CHECK(ws.dx == base + 1024 + 7168);
    CHECK(ws.dx_bytes >= size_t(seq_len * batch * input) * sizeof(float));
    for (const unsigned char* p : {ws.weights, ws.work, ws.dx})
        CHECK(reinterpret_cast<uintptr_t>(p) % cuda::kCudnnSlotAlignment == 0);

    lstm::detail::Carver rcount(nullptr);
    cuda::carve_cudnn_reserve(rcount, sizes);
    CHECK(rcount.bytes() == 512);
    lstm::detail::Carver rcarver(base);
    const cuda::CudnnReserve rs = cuda::carve_cudnn_reserve(rcarver, sizes);
    CHECK(rs.space == base);
    CHECK(rs.space_bytes == 512);

    // fp64 doubles the dx slot only.
    lstm::detail::Carver counter64(nullptr);
    cuda::carve_cudnn_workspace(counter64, sizes, seq_len, batch, input, sizeof(double));
    CHECK(counter64.bytes() == 1024 + 7168 + 1024);
}

TEST_CASE("cudnn buffers at any address: slots on 256-byte boundaries inside the sized bytes",
          "[cudnn_host]") {
    cuda::CudnnSizes sizes;
    sizes.weight_space = 1000;
    sizes.work_training = 5000;
    sizes.work_inference = 7000;
    sizes.reserve_training = 333;
    const int64_t seq_len = 7, batch = 3, input = 5;
    // What workspace_bytes() / reserve_bytes() report: the slots plus 255 bytes of slack.
    const size_t ws_bytes = cuda::cudnn_workspace_size(sizes, seq_len, batch, input, sizeof(float));
    const size_t rs_bytes = cuda::cudnn_reserve_size(sizes);
    CHECK(ws_bytes == 1024 + 7168 + 512 + 255);
    CHECK(rs_bytes == 512 + 255);
    // Fake device addresses (never dereferenced): every start within one 256-byte span carves
    // to the same slots from the next boundary on.
    const uintptr_t boundary = uintptr_t(1) << 20;
    for (uintptr_t start = boundary - 255; start <= boundary; ++start) {
        INFO("base " << start);
        void* base = reinterpret_cast<void*>(start);
        const cuda::CudnnWorkspace ws =
            cuda::cudnn_workspace_in(base, sizes, seq_len, batch, input, sizeof(float));
        const cuda::CudnnReserve rs = cuda::cudnn_reserve_in(base, sizes);
        CHECK(reinterpret_cast<uintptr_t>(ws.weights) == boundary);
        CHECK(reinterpret_cast<uintptr_t>(ws.work) == boundary + 1024);
        CHECK(reinterpret_cast<uintptr_t>(ws.dx) == boundary + 1024 + 7168);
        CHECK(reinterpret_cast<uintptr_t>(ws.dx) + ws.dx_bytes <= start + ws_bytes);
        CHECK(reinterpret_cast<uintptr_t>(rs.space) == boundary);
        CHECK(reinterpret_cast<uintptr_t>(rs.space) + rs.space_bytes <= start + rs_bytes);
        for (const unsigned char* p : {ws.weights, ws.work, ws.dx, rs.space})
            CHECK(reinterpret_cast<uintptr_t>(p) % cuda::kCudnnSlotAlignment == 0);
    }
    // The worst start (one byte past a boundary) uses every byte of the slack.
    const uintptr_t worst = boundary - 255;
    const cuda::CudnnWorkspace ws = cuda::cudnn_workspace_in(reinterpret_cast<void*>(worst), sizes,
                                                             seq_len, batch, input, sizeof(float));
    CHECK(reinterpret_cast<uintptr_t>(ws.dx) + ws.dx_bytes == worst + ws_bytes);
}

TEST_CASE("cudnn lengths, padded tails and size limits", "[cudnn_host]") {
    const std::vector<int64_t> lengths = {4, 1, 4, 3};
    std::vector<int32_t> out(4, -1);
    cuda::cudnn_sequence_lengths(Span<const int64_t>(lengths), 4, 4, out.data());
    CHECK(out == std::vector<int32_t>{4, 1, 4, 3});
    cuda::cudnn_sequence_lengths(Span<const int64_t>(), 4, 4, out.data());
    CHECK(out == std::vector<int32_t>{4, 4, 4, 4});

    std::vector<cuda::PaddedTail> tails;
    tails.reserve(4);
    const int32_t mixed[4] = {4, 1, 4, 3};
    cuda::padded_tails(mixed, 4, 4, tails);
    REQUIRE(tails.size() == 2);
    CHECK(tails[0].sequence == 1);
    CHECK(tails[0].first_step == 1);
    CHECK(tails[0].steps == 3);
    CHECK(tails[1].sequence == 3);
    CHECK(tails[1].first_step == 3);
    CHECK(tails[1].steps == 1);
    const int32_t full[4] = {4, 4, 4, 4};
    cuda::padded_tails(full, 4, 4, tails);
    CHECK(tails.empty());

    const Config config{3, 5, 1, false};
    CHECK_FALSE(cuda::cudnn_size_problem(config, 1000, 64));
    const int64_t too_big = int64_t(std::numeric_limits<int32_t>::max()) + 1;
    const auto why = cuda::cudnn_size_problem(config, too_big, 1);
    REQUIRE(why);
    CHECK(why->find("T = 2147483648 exceeds 2147483647") != std::string::npos);
    CHECK(cuda::cudnn_size_problem(Config{too_big, 5, 1, false}, 1, 1));

    // The states are (L*D, N, width) tensors whose strides were int products: N * S past
    // INT32_MAX was accepted with every size fitting, and wrapped. c (L*D, N, H) bounds them.
    const int64_t h = (int64_t(1) << 16) + 1;
    const Config two_layers{1, h, 2, false};
    CHECK_FALSE(cuda::cudnn_size_problem(two_layers, 1, 16383));  // 2 * 16383 * h < 2^31
    const auto states = cuda::cudnn_size_problem(two_layers, 1, 16384);
    REQUIRE(states);
    CHECK_THAT(*states, Catch::Contains("the cell state (L*D, N, H) = (2, 16384, 65537) has more "
                                        "than 2147483647 elements"));
    CHECK(cuda::cudnn_size_problem(Config{1, h, 1, true}, 1, 16384));  // L*D = 2 by direction
    CHECK(cuda::cudnn_size_problem(Config{1, h, 2, false}, 1, int64_t(1) << 16));
    // A product past 64 bits is refused, not wrapped into a small one.
    const int64_t max = too_big - 1;
    const Config deep{1, max, 2048, true, 1, true};  // 2^12 cells of H = 2^31 - 1
    REQUIRE_NOTHROW(deep.validate());
    CHECK(cuda::cudnn_size_problem(deep, 1, max));
}

#if LSTM_WITH_CUDA && LSTM_WITH_CUDNN
TEST_CASE("cudnn variant: registered, answers its capabilities without a device", "[cudnn_host]") {
    const Variant& v = find_variant("cudnn", Device::cuda);
    CHECK(std::string(v.name()) == "cudnn");
    CHECK(v.device() == Device::cuda);
    CHECK_FALSE(v.supports(Config{3, 5, 2, true}, DType::f32));
    CHECK_FALSE(v.supports(Config{3, 5, 2, true}, DType::f64));
    CHECK_FALSE(v.supports_variable_lengths());
    CHECK_FALSE(v.supports_split_backward());
    // nn.LSTM(proj_size=P) is cuDNN's recurrent projection; bias=False its CUDNN_RNN_NO_BIAS.
    CHECK_FALSE(v.supports(projected({3, 5, 1, false}, 2), DType::f32));
    CHECK_FALSE(v.supports(projected({3, 5, 2, true}, 4), DType::f64));
    CHECK_FALSE(v.supports(without_bias(projected({3, 5, 2, true}, 1)), DType::f32));
    // The registry lists it after every CPU variant.
    const auto& all = variants();
    CHECK(all.back() == &v);

    // Sizes cuDNN cannot take are Unsupported from every entry, before any device is needed:
    // the sizing queries once threw InvalidArgument where require() threw Unsupported.
    const Config wide{1, int64_t(1) << 31, 1, false, 1, true};
    CHECK(v.supports(wide, DType::f32));
    CHECK_THROWS_AS(v.require(wide, DType::f32, false), Unsupported);
    CHECK_THROWS_AS(v.workspace_bytes(wide, DType::f32, 1, 1), Unsupported);
    CHECK_THROWS_WITH(v.reserve_bytes(wide, DType::f32, 1, 1),
                      Catch::Contains("variant 'cudnn' (cuda) cannot run this config in float32: "
                                      "cuDNN takes 32-bit sizes; hidden_size = 2147483648"));
    const Config two_layers{1, (int64_t(1) << 16) + 1, 2, false};
    CHECK_THROWS_AS(v.workspace_bytes(two_layers, DType::f32, 1, 16384), Unsupported);
    CHECK_THROWS_WITH(v.reserve_bytes(two_layers, DType::f64, 1, 16384),
                      Catch::Contains("variant 'cudnn' (cuda) cannot run T = 1, N = 16384: ") &&
                          Catch::Contains("the cell state (L*D, N, H)"));
    // The public weight helpers describe the RNN with the same int32 sizes, so they check them
    // too, before the context is used: zeroed storage of a Context's size stands in for one.
    alignas(cuda::Context) static unsigned char storage[sizeof(cuda::Context)] = {};
    cuda::Context& stand_in = *reinterpret_cast<cuda::Context*>(storage);
    CHECK_THROWS_AS(cuda::cudnn_weight_layout(stand_in, wide, DType::f32), Unsupported);
    CHECK_THROWS_WITH(cuda::cudnn_pack_weights(stand_in, wide, DType::f32, nullptr, nullptr),
                      Catch::Contains("cudnn_pack_weights: cuDNN takes 32-bit sizes"));
    CHECK_THROWS_AS(cuda::cudnn_unpack_weights(stand_in, wide, DType::f32, nullptr, nullptr),
                    Unsupported);

    const Config config{3, 5, 2, true};
    if (!test::gpu_visible()) {
        // No device: the sizes come from cuDNN, so the queries say why they cannot answer.
        CHECK_THROWS_WITH(v.workspace_bytes(config, DType::f32, 10, 4),
                          Catch::Contains("needs a CUDA device") && Catch::Contains("sees none"));
        CHECK_THROWS_WITH(v.reserve_bytes(config, DType::f32, 10, 4),
                          Catch::Contains("needs a CUDA device"));
    } else {
        // With a device: the sizes are the carving of cuDNN's answers.
        const cuda::CudnnSizes s = cuda::cudnn_sizes(nullptr, config, DType::f32, 10, 4);
        lstm::detail::Carver w(nullptr), r(nullptr);
        cuda::carve_cudnn_workspace(w, s, 10, 4, config.input_size, sizeof(float));
        cuda::carve_cudnn_reserve(r, s);
        CHECK(v.workspace_bytes(config, DType::f32, 10, 4) == w.bytes());
        CHECK(v.reserve_bytes(config, DType::f32, 10, 4) == r.bytes());
        CHECK(s.weight_space >= size_t(param_count(config)) * sizeof(float));
    }
}
#endif
