// The CUDA side of the `basic` and `fused` variants: the backend their engine runs on (cuBLAS and
// the kernels of kernels/cuda/lstm_kernels.cu) and their plans (pinned staging of the frame index,
// captured graphs), kept by a PlanCache like every plan.

#include "lstm/variants/cuda_common.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <type_traits>

#include "kernels/cuda/lstm_kernels.hpp"
#include "lstm/cuda/internal/check.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/device_guard.hpp"

namespace lstm::cuda {

namespace {

// cuBLAS takes int dimensions. loop_size_problem (cuda_common.hpp) refuses every size past
// INT_MAX when the call's buffers are sized, before any device work; this only guards against a
// GEMM that check misses.
int to_int(int64_t v, const char* what) {
    check(v <= INT_MAX, "cuBLAS ", what, " = ", v, " exceeds INT_MAX");
    return static_cast<int>(v);
}

cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const float* alpha, const float* a, int lda, const float* b,
                         int ldb, const float* beta, float* c, int ldc) {
    return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const double* alpha, const double* a, int lda, const double* b,
                         int ldb, const double* beta, double* c, int ldc) {
    return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Per entry point of a plan (a training or an inference forward, each backward part): the pinned
// host staging of the frame index (uploaded with one async copy per call), the host memory of
// the stack loop's row index and, for the fused style, the captured graph and the schedule that
// decides when to capture and replay it. Modes a caller alternates keep a graph each.
struct CallState {
    int64_t* staging = nullptr;  // pinned host, frame_index_count(T, N) int64
    int64_t count = 0;
    cudaEvent_t uploaded = nullptr;  // the last copy out of `staging` has finished
    bool indexed = false;            // staging holds the index of `lengths`
    std::vector<int64_t> lengths;
    cudaGraphExec_t exec = nullptr;
    GraphSchedule schedule;         // eager, capture or replay (fused only)
    std::vector<uint64_t> scratch;  // this call's signature
    std::vector<int64_t> rows;      // the stack loop's row index (stack_row_count(T, N))

    void init(int64_t seq_len, int64_t batch) {
        count = frame_index_count(seq_len, batch);
        rows.assign(static_cast<size_t>(stack_row_count(seq_len, batch)), 0);
        LSTM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging),
                                       static_cast<size_t>(count) * sizeof(int64_t)));
        LSTM_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
        // Room for every later call of this shape, so steady state allocates nothing.
        lengths.reserve(static_cast<size_t>(batch));
        const size_t pointers = 32;
        schedule.reserve(static_cast<size_t>(batch) + pointers);
        scratch.reserve(static_cast<size_t>(batch) + pointers);
    }
    ~CallState() {
        if (uploaded) {
            cudaEventSynchronize(uploaded);
            cudaEventDestroy(uploaded);
        }
        if (staging) cudaFreeHost(staging);
        if (exec) cudaGraphExecDestroy(exec);
    }
};

// Makes the plan's staging hold the index of `lengths` (recomputed only when they changed) and
// queues its upload into `device_index` (device, frame_index_count int64) on the main stream.
void stage_index(Context::Impl& ctx, CallState& plan, Span<const int64_t> lengths, int64_t seq_len,
                 int64_t batch, int64_t* device_index) {
    const FrameIndex host = carve_frame_index(plan.staging, seq_len, batch);
    const bool same = plan.indexed && plan.lengths.size() == static_cast<size_t>(lengths.size) &&
                      std::equal(lengths.begin(), lengths.end(), plan.lengths.begin());
    if (!same) {
        // The previous call's upload may still be reading the staging area.
        LSTM_CUDA_CHECK(cudaEventSynchronize(plan.uploaded));
        make_frame_index(lengths, seq_len, batch, host);
        plan.lengths.assign(lengths.begin(), lengths.end());
        plan.indexed = true;
    }
    LSTM_CUDA_CHECK(cudaMemcpyAsync(device_index, plan.staging,
                                    static_cast<size_t>(plan.count) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx.stream));
    LSTM_CUDA_CHECK(cudaEventRecord(plan.uploaded, ctx.stream));
}

// The engine's backend on a context: lane 0 is the context's stream and cuBLAS handle, lane 1 a
// side stream with its own handle (Context::Impl::side_cublas).
template <typename T>
class CudaBackend {
public:
    CudaBackend(Context::Impl& ctx, int lanes) {
        streams_[0] = ctx.stream;
        handles_[0] = ctx.cublas;
        events_[0] = ctx.event(0);
        if (lanes > 1) {
            streams_[1] = ctx.side_stream(0);
            handles_[1] = ctx.side_cublas();
            events_[1] = ctx.event(1);
        }
    }

    // Row-major C (m, n) = alpha op(A) op(B) + beta C, all device: cuBLAS is column-major, so
    // it computes C^T = op(B)^T op(A)^T, which reads the row-major buffers as they are.
    void gemm(int lane, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
              const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
        if (m == 0 || n == 0) return;
        LSTM_CUBLAS_CHECK(gemm_call(handles_[lane], trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(n, "n"),
                                    to_int(m, "m"), to_int(k, "k"), &alpha, b, to_int(ldb, "ldb"),
                                    a, to_int(lda, "lda"), &beta, c, to_int(ldc, "ldc")));
    }

    // Queues op(i), i < count, on the lane's stream; op's pointers are device memory.
    template <typename Op>
    void run(int lane, const Op& op, int64_t count) {
        detail::check_launch(kernels::cuda::launch(op, count, streams_[lane]),
                             "launch of an LSTM element-wise kernel", __FILE__, __LINE__);
    }

    // Later work of `lane` waits for what `on_lane` has queued so far (an event; under capture it
    // becomes a graph edge, which is how the side stream joins and leaves the capture).
    void wait(int lane, int on_lane) {
        LSTM_CUDA_CHECK(cudaEventRecord(events_[on_lane], streams_[on_lane]));
        LSTM_CUDA_CHECK(cudaStreamWaitEvent(streams_[lane], events_[on_lane], 0));
    }

private:
    cudaStream_t streams_[2] = {nullptr, nullptr};
    cublasHandle_t handles_[2] = {nullptr, nullptr};
    cudaEvent_t events_[2] = {nullptr, nullptr};
};

// Runs `body` (which queues work on the main stream and, forked from it, the side lane) under
// stream capture and leaves the plan with an executable graph of it: updated in place when the
// topology allows, re-instantiated otherwise.
template <typename Body>
void capture(Context::Impl& ctx, CallState& plan, Body&& body) {
    // Thread-local: another thread's unrelated CUDA calls do not invalidate this capture.
    LSTM_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (...) {
        // Leave the stream usable; the error that stopped the body is the one reported.
        cudaStreamEndCapture(ctx.stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
    }
    LSTM_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
    struct GraphGuard {
        cudaGraph_t g;
        ~GraphGuard() { cudaGraphDestroy(g); }
    } guard{graph};
    if (plan.exec) {
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(plan.exec, graph, &info) == cudaSuccess) return;
        // A different topology (other lengths change the steps): not an error, rebuild.
        cudaGetLastError();
        cudaGraphExecDestroy(plan.exec);
        plan.exec = nullptr;
    }
    LSTM_CUDA_CHECK(cudaGraphInstantiate(&plan.exec, graph, 0));
}

int lanes_of(LoopStyle style, const Config& config) {
    return style == LoopStyle::fused ? static_cast<int>(config.num_directions()) : 1;
}

// Runs one call of the loop: `basic`, and `fused` with the context's graphs turned off,
// directly; otherwise eagerly, captured or replayed as the plan's GraphSchedule decides.
template <typename Args, typename Body>
void execute(Context::Impl& ctx, CallState& plan, LoopStyle style, const Args& args, Body&& body) {
    if (style == LoopStyle::basic || !ctx.graphs) {
        body();
        return;
    }
    call_signature(args, plan.scratch);
    const GraphAction action = plan.schedule.decide(plan.scratch, plan.exec != nullptr);
    if (action == GraphAction::eager) {
        body();
        plan.schedule.record(action, plan.scratch);
        return;
    }
    if (action == GraphAction::capture) {
        capture(ctx, plan, body);
        // Before the launch: should it fail, the schedule already names what `exec` holds.
        plan.schedule.record(action, plan.scratch);
    }
    LSTM_CUDA_CHECK(cudaGraphLaunch(plan.exec, ctx.stream));
}

// The plan of a CUDA `basic` or `fused` variant for one (config, dtype, T, N, context): the
// stack loop's sizes and, per entry point, the call state its first call builds.
class LoopPlan final : public lstm::Plan {
public:
    LoopPlan(const Variant& variant, const PlanRequest& r, LoopStyle style)
        : lstm::Plan(variant, r, workspace_size(r.config, r.dtype, r.seq_len, r.batch),
                     reserve_size(r.config, r.dtype, r.seq_len, r.batch)),
          style_(style) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override { forward_on(a); }
    void run_forward(const ForwardArgs<double>& a) const override { forward_on(a); }
    void run_backward(const BackwardArgs<float>& a) const override { backward_on(a); }
    void run_backward(const BackwardArgs<double>& a) const override { backward_on(a); }

private:
    enum Entry { kTraining, kInference, kAll, kData, kWeights, kEntries };

    // The call state of `entry`, built on its first call (pinned memory, an event); a plan made
    // without a context is for sizing only, since its graphs would belong to whichever context
    // called first.
    CallState& state(Entry entry) const {
        check(request().context != nullptr, "variant '", variant().name(),
              "' (cuda): this plan was made without an lstm::cuda::Context (a sizing query); "
              "a call needs a plan made with its context");
        if (!states_[entry]) {
            auto fresh = std::make_unique<CallState>();
            fresh->init(request().seq_len, request().batch);
            states_[entry] = std::move(fresh);
        }
        return *states_[entry];
    }

    template <typename T>
    void forward_on(const ForwardArgs<T>& args) const {
        on_call(args, args.reserve ? kTraining : kInference,
                [&](CudaLoop<T, CudaBackend<T>>& loop) { loop.forward(args); });
    }

    template <typename T>
    void backward_on(const BackwardArgs<T>& args) const {
        const Entry entry = args.part == BackwardPart::all    ? kAll
                            : args.part == BackwardPart::data ? kData
                                                              : kWeights;
        on_call(args, entry, [&](CudaLoop<T, CudaBackend<T>>& loop) { loop.backward(args); });
    }

    // One call of `entry`: the loop on the CUDA backend, its index uploaded, then run(loop)
    // eagerly, captured or replayed.
    template <typename Args, typename Run>
    void on_call(const Args& args, Entry entry, Run&& run) const {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(args.x.data())>>;
        Context::Impl& ctx = args.context->impl();
        const detail::DeviceGuard on_device(ctx.device);
        const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
        CallState& call = state(entry);
        CudaBackend<T> backend(ctx, lanes_of(style_, config()));
        CudaLoop<T, CudaBackend<T>> loop(config(), seq_len, batch, style_, &backend,
                                         call.rows.data());
        // Outside any capture: the upload goes before the work, as its own copy.
        loop.carve_buffers(args.workspace, args.reserve);
        stage_index(ctx, call, args.lengths, seq_len, batch, loop.engine().workspace().index);
        execute(ctx, call, style_, args, [&] { run(loop); });
    }

    LoopStyle style_;
    mutable std::unique_ptr<CallState> states_[kEntries];
};

}  // namespace

std::unique_ptr<lstm::Plan> make_loop_plan(LoopStyle style, const Variant& variant,
                                           const PlanRequest& request) {
    return std::make_unique<LoopPlan>(variant, request, style);
}

}  // namespace lstm::cuda
