#pragma once

// The CUDA `basic` and `fused` engine on the stack loop (lstm/variants/cuda_common.hpp) run on the
// host: a backend that executes the kernel bodies of kernels/cuda/lstm_ops.hpp over their grids in
// plain loops and the cuBLAS GEMMs as naive loops. tests/cuda_lstm_host_test.cpp checks it against
// the reference; tests/bit_baseline_test.cpp records its bits.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "lstm/detail/aligned_buffer.hpp"
#include "lstm/reference/variant_check.hpp"
#include "lstm/variants/cuda_common.hpp"

namespace lstm::test {

using cuda::LoopStyle;

// The CUDA backend's contract on host memory: GEMMs as naive loops (row-major, BLAS meaning,
// beta == 0 never reads C), ops run over their whole grid, lane orderings recorded.
template <typename T>
struct HostBackend {
    std::vector<std::pair<int, int>> waits;  // (lane, on_lane) in issue order
    int64_t work[2] = {0, 0};                // GEMMs and op launches per lane

    void gemm(int lane, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
              const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
        REQUIRE(m > 0);
        REQUIRE(n > 0);
        ++work[lane];
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                T acc = T(0);
                for (int64_t p = 0; p < k; ++p) {
                    const T av = trans_a ? a[p * lda + i] : a[i * lda + p];
                    const T bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                    acc += av * bv;
                }
                T& out = c[i * ldc + j];
                out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
            }
    }

    template <typename Op>
    void run(int lane, const Op& op, int64_t count) {
        ++work[lane];
        for (int64_t i = 0; i < count; ++i) op(i);
    }

    void wait(int lane, int on_lane) { waits.emplace_back(lane, on_lane); }
};

// Fills a buffer with all-ones bytes: NaN in float and double, so any read of memory the loop
// did not write first shows up in the results.
inline void poison(void* data, size_t bytes) { std::memset(data, 0xFF, bytes); }

// Where the workspace and the reserve start, in bytes past a 64-byte aligned allocation: a
// caller may hand the variants any address.
struct Offsets {
    size_t workspace = 0, reserve = 0;
};

// Buffers and the uploaded index of one emulated call sequence.
template <typename T>
struct Emulation {
    LoopStyle style;
    const reference::LstmCase& c;
    lstm::detail::AlignedBuffer workspace_storage, reserve_storage;
    char* workspace = nullptr;  // workspace_storage + offsets.workspace
    char* reserve = nullptr;    // reserve_storage + offsets.reserve
    size_t ws_bytes = 0, rs_bytes = 0;
    std::vector<int64_t> staging;  // the host FrameIndex (the pinned staging area on the GPU)
    std::vector<int64_t> rows;     // the stack loop's row index (the plan's host memory on the GPU)
    cuda::FrameIndex host{};
    HostBackend<T> backend;

    Emulation(LoopStyle s, const reference::LstmCase& cs, Offsets offsets = {}) : style(s), c(cs) {
        const Config& cfg = c.in.config;
        ws_bytes = cuda::workspace_size(cfg, dtype_of<T>(), c.in.seq_len, c.in.batch);
        rs_bytes = cuda::reserve_size(cfg, dtype_of<T>(), c.in.seq_len, c.in.batch);
        workspace = static_cast<char*>(workspace_storage.reserve(ws_bytes + offsets.workspace)) +
                    offsets.workspace;
        reserve = static_cast<char*>(reserve_storage.reserve(rs_bytes + offsets.reserve)) +
                  offsets.reserve;
        poison(workspace, ws_bytes);
        poison(reserve, rs_bytes);
        staging.assign(cuda::frame_index_count(c.in.seq_len, c.in.batch), -1);
        host = cuda::carve_frame_index(staging.data(), c.in.seq_len, c.in.batch);
        cuda::make_frame_index(Span<const int64_t>(c.in.lengths), c.in.seq_len, c.in.batch, host);
        rows.assign(static_cast<size_t>(stack_row_count(c.in.seq_len, c.in.batch)), -1);
        // The upload: the workspace's index block receives the staging area.
        cuda::CudaLoop<T, HostBackend<T>> carved = loop();
        carved.carve_buffers(workspace, nullptr);
        std::memcpy(carved.engine().workspace().index, staging.data(),
                    staging.size() * sizeof(int64_t));
    }

    cuda::CudaLoop<T, HostBackend<T>> loop() {
        return cuda::CudaLoop<T, HostBackend<T>>(c.in.config, c.in.seq_len, c.in.batch, style,
                                                 &backend, rows.data());
    }
};

// Runs the emulated loop: forward (training, or inference when `training` is false: then
// backward is skipped), then backward as one call or as `data` + `weights`. dparams starts from
// `before` (or zeros).
template <typename T>
reference::VariantResult emulate(LoopStyle style, const reference::LstmCase& c, bool training,
                                 bool split, const std::vector<double>& before = {},
                                 std::vector<std::pair<int, int>>* waits = nullptr,
                                 int64_t* lane1_work = nullptr, Offsets offsets = {}) {
    Emulation<T> em(style, c, offsets);
    reference::RunBuffers buffers;
    buffers.workspace = em.workspace;
    buffers.workspace_size = em.ws_bytes;
    buffers.reserve = em.reserve;
    buffers.reserve_size = em.rs_bytes;
    std::vector<BackwardPart> parts;
    if (training)
        parts = split ? std::vector<BackwardPart>{BackwardPart::data, BackwardPart::weights}
                      : std::vector<BackwardPart>{BackwardPart::all};
    const reference::VariantResult r = reference::run_case_parts<T>(
        c, buffers, parts, [&](const ForwardArgs<T>& f) { em.loop().forward(f); },
        [&](const BackwardArgs<T>& b) { em.loop().backward(b); }, before,
        /*data_sees_dparams=*/true);
    if (training && waits) *waits = em.backend.waits;
    if (training && lane1_work) *lane1_work = em.backend.work[1];
    return r;
}

}  // namespace lstm::test
