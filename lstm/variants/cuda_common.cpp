// The CUDA side of the `basic` and `fused` variants: the backend the shared Loop runs on (cuBLAS
// and the kernels of kernels/cuda/lstm_kernels.cu), the per-shape plans (pinned staging of the
// frame index, captured graphs) and the entry points.

#include "lstm/variants/cuda_common.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <memory>

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

// A cuBLAS handle of its own for the side lane. The context's handle stays bound to the main
// stream: cublasSetStream resets a handle's workspace to cuBLAS's pool, which may allocate during
// graph capture, and two streams sharing one workspace would race. One per context.
struct LanePlan : Plan {
    cublasHandle_t handle = nullptr;
    void* workspace = nullptr;

    void init(Context::Impl& ctx) {
        LSTM_CUBLAS_CHECK(cublasCreate(&handle));
        LSTM_CUBLAS_CHECK(cublasSetStream(handle, ctx.side_stream(0)));
        // FP32 math, no TF32, as on the main handle.
        LSTM_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        LSTM_CUDA_CHECK(cudaMalloc(&workspace, Context::Impl::kCublasWorkspaceBytes));
        LSTM_CUBLAS_CHECK(
            cublasSetWorkspace(handle, workspace, Context::Impl::kCublasWorkspaceBytes));
    }
    ~LanePlan() override {
        if (handle) cublasDestroy(handle);
        if (workspace) cudaFree(workspace);
    }
};

// Per shape and entry point: the pinned host staging of the frame index (uploaded with one async
// copy per call) and, for the fused style, the captured graph and the schedule that decides
// when to capture and replay it.
struct CallPlan : Plan {
    int64_t* staging = nullptr;  // pinned host, frame_index_count(T, N) int64
    int64_t count = 0;
    cudaEvent_t uploaded = nullptr;  // the last copy out of `staging` has finished
    bool indexed = false;            // staging holds the index of `lengths`
    std::vector<int64_t> lengths;
    cudaGraphExec_t exec = nullptr;
    GraphSchedule schedule;         // eager, capture or replay (fused only)
    std::vector<uint64_t> scratch;  // this call's signature

    void init(int64_t seq_len, int64_t batch) {
        count = frame_index_count(seq_len, batch);
        LSTM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging),
                                       static_cast<size_t>(count) * sizeof(int64_t)));
        LSTM_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
        // Room for every later call of this shape, so steady state allocates nothing.
        lengths.reserve(static_cast<size_t>(batch));
        const size_t pointers = 32;
        schedule.reserve(static_cast<size_t>(batch) + pointers);
        scratch.reserve(static_cast<size_t>(batch) + pointers);
    }
    ~CallPlan() override {
        if (uploaded) {
            cudaEventSynchronize(uploaded);
            cudaEventDestroy(uploaded);
        }
        if (staging) cudaFreeHost(staging);
        if (exec) cudaGraphExecDestroy(exec);
    }
};

// The plan of (style, entry, config, dtype, T, N) in the context.
CallPlan& call_plan(Context::Impl& ctx, LoopStyle style, const char* entry, const Config& config,
                    DType dtype, int64_t seq_len, int64_t batch) {
    // Reused across calls so that building the key allocates nothing in steady state; keys are
    // transient (built, looked up, dropped), so sharing the buffer within a thread is harmless.
    thread_local std::string key;
    write_plan_key(key, style, entry, config, dtype, seq_len, batch);
    return ctx.plan<CallPlan>(key, [&] {
        auto p = std::make_unique<CallPlan>();
        p->init(seq_len, batch);
        return p;
    });
}

// Makes the plan's staging hold the index of `lengths` (recomputed only when they changed) and
// queues its upload into `device_index` (device, frame_index_count int64) on the main stream.
// Returns the host copy, which the loop reads for step sizes.
FrameIndex stage_index(Context::Impl& ctx, CallPlan& plan, Span<const int64_t> lengths,
                       int64_t seq_len, int64_t batch, int64_t* device_index) {
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
    return host;
}

// The Loop's backend on a context: lane 0 is the context's stream and cuBLAS handle, lane 1 a
// side stream with its own handle (LanePlan).
template <typename T>
class CudaBackend {
public:
    CudaBackend(Context::Impl& ctx, int lanes) {
        streams_[0] = ctx.stream;
        handles_[0] = ctx.cublas;
        events_[0] = ctx.event(0);
        if (lanes > 1) {
            // A short key: SSO, so the lookup allocates nothing.
            LanePlan& lane = ctx.plan<LanePlan>("cuda/lane1", [&] {
                auto p = std::make_unique<LanePlan>();
                p->init(ctx);
                return p;
            });
            streams_[1] = ctx.side_stream(0);
            handles_[1] = lane.handle;
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
void capture(Context::Impl& ctx, CallPlan& plan, Body&& body) {
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
void execute(Context::Impl& ctx, CallPlan& plan, LoopStyle style, const Args& args, Body&& body) {
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

}  // namespace

template <typename T>
void run_cuda_forward(LoopStyle style, const Config& config, const ForwardArgs<T>& args) {
    Context::Impl& ctx = args.context->impl();
    const detail::DeviceGuard on_device(ctx.device);
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    const char* entry = args.reserve ? "forward_training" : "forward_inference";
    CallPlan& plan = call_plan(ctx, style, entry, config, dtype_of<T>(), seq_len, batch);
    const Workspace<T> ws = workspace_in<T>(args.workspace, config, seq_len, batch);
    const FrameIndex host = stage_index(ctx, plan, args.lengths, seq_len, batch, ws.index);
    CudaBackend<T> backend(ctx, lanes_of(style, config));
    const Loop<T, CudaBackend<T>> loop(style, config, seq_len, batch, host, backend);
    execute(ctx, plan, style, args, [&] { loop.forward(args); });
}

template <typename T>
void run_cuda_backward(LoopStyle style, const Config& config, const BackwardArgs<T>& args) {
    Context::Impl& ctx = args.context->impl();
    const detail::DeviceGuard on_device(ctx.device);
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    const char* entry = args.part == BackwardPart::all    ? "backward_all"
                        : args.part == BackwardPart::data ? "backward_data"
                                                          : "backward_weights";
    CallPlan& plan = call_plan(ctx, style, entry, config, dtype_of<T>(), seq_len, batch);
    const Workspace<T> ws = workspace_in<T>(args.workspace, config, seq_len, batch);
    const FrameIndex host = stage_index(ctx, plan, args.lengths, seq_len, batch, ws.index);
    CudaBackend<T> backend(ctx, lanes_of(style, config));
    const Loop<T, CudaBackend<T>> loop(style, config, seq_len, batch, host, backend);
    execute(ctx, plan, style, args, [&] { loop.backward(args); });
}

template void run_cuda_forward<float>(LoopStyle, const Config&, const ForwardArgs<float>&);
template void run_cuda_forward<double>(LoopStyle, const Config&, const ForwardArgs<double>&);
template void run_cuda_backward<float>(LoopStyle, const Config&, const BackwardArgs<float>&);
template void run_cuda_backward<double>(LoopStyle, const Config&, const BackwardArgs<double>&);

}  // namespace lstm::cuda
