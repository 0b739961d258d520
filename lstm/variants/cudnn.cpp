// The `cudnn` (cuda) variant: descriptors, sizes, weight copies and the cuDNN calls. What it
// computes from cuDNN's answers lives in cudnn_weights.hpp (tested on the CPU); see cudnn.hpp
// for the design.
#include "lstm/variants/cudnn.hpp"

#if LSTM_WITH_CUDNN

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <utility>

#include "lstm/cuda/internal/check.hpp"
#include "lstm/cuda/internal/context_impl.hpp"
#include "lstm/cuda/internal/cudnn_descriptor.hpp"
#include "lstm/cuda/internal/device_guard.hpp"
#include "lstm/cuda/runtime.hpp"
#include "lstm/registry.hpp"

namespace lstm::cuda {

namespace {

using detail::DropoutDescriptor;
using detail::RnnDataDescriptor;
using detail::RnnDescriptor;
using detail::TensorDescriptor;

cudnnDataType_t cudnn_type(DType dtype) {
    return dtype == DType::f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// fp32: FMA kernels only, so no TF32 tensor-core math (the library's default precision rule);
// fp64: cuDNN's RNN takes only the default math type there.
cudnnMathType_t cudnn_math(DType dtype) {
    return dtype == DType::f32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

size_t elem_size(DType dtype) { return dtype == DType::f32 ? sizeof(float) : sizeof(double); }

// The RNN descriptor and the dropout descriptor it refers to (destroyed after it).
struct RnnDesc {
    DropoutDescriptor dropout;
    RnnDescriptor rnn;
};

// Device memory owned by a plan (cudaMalloc / cudaFree).
struct DeviceBytes {
    void* ptr = nullptr;
    explicit DeviceBytes(size_t bytes) { ptr = malloc_device(bytes); }
    DeviceBytes(const DeviceBytes&) = delete;
    DeviceBytes& operator=(const DeviceBytes&) = delete;
    ~DeviceBytes() { free_device(ptr); }
};

// Pinned host memory (cudaMallocHost), so that an upload from it is truly asynchronous.
struct PinnedBytes {
    void* ptr = nullptr;
    explicit PinnedBytes(size_t bytes) { LSTM_CUDA_CHECK(cudaMallocHost(&ptr, bytes)); }
    PinnedBytes(const PinnedBytes&) = delete;
    PinnedBytes& operator=(const PinnedBytes&) = delete;
    ~PinnedBytes() {
        if (ptr) cudaFreeHost(ptr);
    }
};

// An event for ordering only; destroyed after it has completed, so that memory it guards is not
// freed under a pending copy.
struct OrderingEvent {
    cudaEvent_t event = nullptr;
    OrderingEvent() { LSTM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
    OrderingEvent(const OrderingEvent&) = delete;
    OrderingEvent& operator=(const OrderingEvent&) = delete;
    ~OrderingEvent() {
        if (event) {
            cudaEventSynchronize(event);
            cudaEventDestroy(event);
        }
    }
};

// The LSTM as cuDNN sees it: no dropout (a dropout descriptor of probability 0 needs no RNG
// states; lstm::Lstm applies dropout between its per-layer calls), projection size
// config.state_size() (H: no projection; P < H: cuDNN's recurrent projection, which cuDNN runs
// with CUDNN_RNN_ALGO_STANDARD only, the algorithm used here), both biases or none, padded I/O
// so that lengths may differ per sequence.
void describe_rnn(cudnnHandle_t handle, const Config& config, DType dtype, RnnDesc& d) {
    LSTM_CUDNN_CHECK(cudnnSetDropoutDescriptor(d.dropout.desc, handle, 0.0f, nullptr, 0, 0));
    LSTM_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        d.rnn.desc, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
        config.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
        config.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
        cudnn_type(dtype), cudnn_type(dtype), cudnn_math(dtype),
        static_cast<int32_t>(config.input_size), static_cast<int32_t>(config.hidden_size),
        static_cast<int32_t>(config.state_size()), static_cast<int32_t>(config.num_layers),
        d.dropout.desc, CUDNN_RNN_PADDED_IO_ENABLED));
}

// Describes padded time-major data (T, N, width) with host int32 `lengths` (N); `fill` (host,
// dtype) is what cuDNN writes at padded positions of an output with this descriptor.
void describe_data(cudnnRNNDataDescriptor_t desc, DType dtype, int64_t seq_len, int64_t batch,
                   int64_t width, const int32_t* lengths, void* fill) {
    LSTM_CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc, cudnn_type(dtype),
                                               CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                               static_cast<int>(seq_len), static_cast<int>(batch),
                                               static_cast<int>(width), lengths, fill));
}

// cuDNN's temporary-space answers for the data described by `x_desc`; the weight space comes
// from the RNN descriptor alone.
CudnnSizes query_sizes(cudnnHandle_t handle, cudnnRNNDescriptor_t rnn,
                       cudnnRNNDataDescriptor_t x_desc) {
    CudnnSizes s;
    LSTM_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, rnn, &s.weight_space));
    LSTM_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_TRAINING, x_desc,
                                               &s.work_training, &s.reserve_training));
    size_t unused_reserve = 0;  // inference keeps nothing for backward
    LSTM_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_INFERENCE, x_desc,
                                               &s.work_inference, &unused_reserve));
    return s;
}

// Per (config, dtype) on one context: the RNN descriptor and where cuDNN keeps each piece.
struct WeightsPlan {
    RnnDesc rnn;
    DType dtype = DType::f32;
    size_t weight_space = 0;
    std::vector<CudnnWeightRegion> regions;
    std::vector<CudnnCopySegment> copies;
    bool covers_space = false;

    WeightsPlan(cudnnHandle_t handle, const Config& config, DType dt) : dtype(dt) {
        describe_rnn(handle, config, dtype, rnn);
        LSTM_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, rnn.rnn.desc, &weight_space));
        // cuDNN reports addresses inside a real weight space; this one lives only while asking.
        DeviceBytes probe(weight_space);
        const auto* base = static_cast<const unsigned char*>(probe.ptr);
        TensorDescriptor m_desc, b_desc;
        const size_t elem = elem_size(dtype);
        std::vector<CudnnCopySegment> segments;
        for (const CudnnPiece& p : cudnn_pieces(config)) {
            void* m_addr = nullptr;
            void* b_addr = nullptr;
            // The projection (linLayerID 8) has no bias: ask for its matrix alone, as PyTorch's
            // binding does (add_projection_weights). Not run on a device here yet: should cuDNN
            // describe it otherwise, check_cudnn_reported_shape below says so by name.
            const bool projection = p.lin_layer_id == kCudnnLstmProjection;
            LSTM_CUDNN_CHECK(cudnnGetRNNWeightParams(
                handle, rnn.rnn.desc, static_cast<int32_t>(p.pseudo_layer), weight_space, probe.ptr,
                p.lin_layer_id, m_desc.desc, &m_addr, projection ? nullptr : b_desc.desc,
                projection ? nullptr : &b_addr));
            const bool matrix = p.kind == CudnnPieceKind::matrix;
            const void* addr = matrix ? m_addr : b_addr;
            check(addr != nullptr, "cuDNN reports no address for ", cudnn_piece_name(config, p),
                  "; an LSTM with linear input has every piece cudnn_pieces() lists");
            // Matrices and biases are described as rank-3 tensors; ask for more to see extras.
            constexpr int kMaxDims = 8;
            cudnnDataType_t type{};
            int nb_dims = 0;
            std::array<int, kMaxDims> dims{}, strides{};
            LSTM_CUDNN_CHECK(cudnnGetTensorNdDescriptor(matrix ? m_desc.desc : b_desc.desc,
                                                        kMaxDims, &type, &nb_dims, dims.data(),
                                                        strides.data()));
            check(type == cudnn_type(dtype), "cuDNN reports ", cudnn_piece_name(config, p),
                  " with data type ", int(type), ", expected ", int(cudnn_type(dtype)));
            check_cudnn_reported_shape(config, p, std::min(nb_dims, kMaxDims), dims.data(),
                                       strides.data());
            const int64_t offset = cudnn_space_offset(
                config, p, static_cast<const unsigned char*>(addr) - base, elem, weight_space);
            regions.push_back({p, offset});
            segments.push_back({p.param_offset, offset, p.numel()});
        }
        const int64_t space_elems = static_cast<int64_t>(weight_space / elem);
        copies = coalesce_copy_segments(std::move(segments), param_count(config), space_elems);
        covers_space = covered_elements(copies) == space_elems && weight_space % elem == 0;
        // cudaFree of the probe synchronizes the device: plan time only.
    }
};

// Copies our flat buffer `params` (device, param_count elements) into cuDNN's weight space
// `space` (device, w.weight_space bytes), overwriting it. Queued on `stream`.
void pack_weights(const WeightsPlan& w, const void* params, void* space, cudaStream_t stream) {
    const size_t elem = elem_size(w.dtype);
    const auto* from = static_cast<const unsigned char*>(params);
    auto* to = static_cast<unsigned char*>(space);
    if (!w.covers_space) LSTM_CUDA_CHECK(cudaMemsetAsync(to, 0, w.weight_space, stream));
    for (const CudnnCopySegment& c : w.copies)
        LSTM_CUDA_CHECK(cudaMemcpyAsync(to + static_cast<size_t>(c.space_offset) * elem,
                                        from + static_cast<size_t>(c.param_offset) * elem,
                                        static_cast<size_t>(c.count) * elem,
                                        cudaMemcpyDeviceToDevice, stream));
}

// The reverse: overwrites every element of `params` (device) from `space` (device).
void unpack_weights(const WeightsPlan& w, const void* space, void* params, cudaStream_t stream) {
    const size_t elem = elem_size(w.dtype);
    const auto* from = static_cast<const unsigned char*>(space);
    auto* to = static_cast<unsigned char*>(params);
    for (const CudnnCopySegment& c : w.copies)
        LSTM_CUDA_CHECK(cudaMemcpyAsync(to + static_cast<size_t>(c.param_offset) * elem,
                                        from + static_cast<size_t>(c.space_offset) * elem,
                                        static_cast<size_t>(c.count) * elem,
                                        cudaMemcpyDeviceToDevice, stream));
}

// Per (config, dtype, T, N) on one context: data and state descriptors and the lengths they
// currently describe (host and device copies).
struct ShapePlan {
    const WeightsPlan* weights = nullptr;  // the plan's, which outlives this
    DType dtype;
    int64_t seq_len, batch, input_size, output_size;
    RnnDataDescriptor x_desc, y_desc;
    TensorDescriptor h_desc;  // (L*D, N, S): hx / hy and their gradients, S = projSize
    TensorDescriptor c_desc;  // (L*D, N, H): cx / cy and their gradients
    float fill_f32 = 0.0f;    // the padding fill, kept alive with the descriptors
    double fill_f64 = 0.0;
    DeviceBytes device_lengths;  // int32 (N): cuDNN's devSeqLengths
    PinnedBytes pinned;          // int32 (N): the source of the uploads
    // Recorded after the last lengths upload; declared after `pinned`, so destroyed (after
    // waiting for that upload) before it.
    OrderingEvent uploaded;
    std::vector<int32_t> lengths, incoming;  // host (N): described / of this call
    bool described = false;
    CudnnSizes need;  // cuDNN's sizes for the described lengths, on this context's device
    std::vector<PaddedTail> tails;

    ShapePlan(const WeightsPlan& w, const Config& config, DType dt, int64_t t, int64_t n)
        : weights(&w),
          dtype(dt),
          seq_len(t),
          batch(n),
          input_size(config.input_size),
          output_size(config.output_size()),
          device_lengths(static_cast<size_t>(n) * sizeof(int32_t)),
          pinned(static_cast<size_t>(n) * sizeof(int32_t)),
          lengths(static_cast<size_t>(n)),
          incoming(static_cast<size_t>(n)) {
        // cuDNN's hx/hy are projSize wide, its cx/cy hiddenSize wide; the same without a
        // projection.
        const std::pair<TensorDescriptor*, int64_t> states[] = {{&h_desc, config.state_size()},
                                                                {&c_desc, config.hidden_size}};
        // cudnn_size_problem, checked when the buffers were sized, bounds L*D * N * H by
        // INT32_MAX: the products are formed in int64 and fit an int.
        for (const auto& [desc, width] : states) {
            const int dims[3] = {static_cast<int>(config.num_cells()), static_cast<int>(n),
                                 static_cast<int>(width)};
            const int strides[3] = {static_cast<int>(n * width), static_cast<int>(width), 1};
            LSTM_CUDNN_CHECK(
                cudnnSetTensorNdDescriptor(desc->desc, cudnn_type(dtype), 3, dims, strides));
        }
        tails.reserve(static_cast<size_t>(n));
    }

    void* fill() { return dtype == DType::f32 ? static_cast<void*>(&fill_f32) : &fill_f64; }

    // Describes the call's lengths (host, N; empty: all T) unless they are the described ones.
    void prepare(Context::Impl& impl, Span<const int64_t> call_lengths) {
        cudnn_sequence_lengths(call_lengths, seq_len, batch, incoming.data());
        if (described && incoming == lengths) return;
        // The previous upload may still be reading the pinned buffer; the device copy it wrote
        // is read by calls queued before this one, which the stream orders before our upload.
        LSTM_CUDA_CHECK(cudaEventSynchronize(uploaded.event));
        described = false;
        std::copy(incoming.begin(), incoming.end(), lengths.begin());
        std::copy(incoming.begin(), incoming.end(), static_cast<int32_t*>(pinned.ptr));
        LSTM_CUDA_CHECK(cudaMemcpyAsync(device_lengths.ptr, pinned.ptr,
                                        static_cast<size_t>(batch) * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, impl.stream));
        LSTM_CUDA_CHECK(cudaEventRecord(uploaded.event, impl.stream));
        describe_data(x_desc.desc, dtype, seq_len, batch, input_size, lengths.data(), fill());
        describe_data(y_desc.desc, dtype, seq_len, batch, output_size, lengths.data(), fill());
        need = query_sizes(impl.cudnn, weights->rnn.rnn.desc, x_desc.desc);
        padded_tails(lengths.data(), seq_len, batch, tails);
        described = true;
    }

    const int32_t* dev_lengths() const { return static_cast<const int32_t*>(device_lengths.ptr); }
};

// A cuDNN handle for one question (sizes asked without a context), destroyed after it.
struct OwnHandle {
    cudnnHandle_t handle = nullptr;
    OwnHandle() { LSTM_CUDNN_CHECK(cudnnCreate(&handle)); }
    OwnHandle(const OwnHandle&) = delete;
    OwnHandle& operator=(const OwnHandle&) = delete;
    ~OwnHandle() { cudnnDestroy(handle); }
};

// cuDNN's sizes for (config, dtype, T, N) with every sequence of length T, asked with `handle`.
CudnnSizes full_length_sizes(cudnnHandle_t handle, const RnnDesc& rnn, const Config& config,
                             DType dtype, int64_t seq_len, int64_t batch) {
    RnnDataDescriptor x_desc;
    const std::vector<int32_t> full(static_cast<size_t>(batch), static_cast<int32_t>(seq_len));
    double fill = 0.0;  // unused for an input descriptor; large enough for either dtype
    describe_data(x_desc.desc, dtype, seq_len, batch, config.input_size, full.data(), &fill);
    return query_sizes(handle, rnn.rnn.desc, x_desc.desc);
}

// Zeroes `data` (device, (T, N, width), time-major) after each sequence's end: rows (t, n) for t
// in [length, T), `width` elements each, one time step (N * width elements) apart; one
// cudaMemset2DAsync per shorter sequence, none when every sequence runs T steps. cuDNN writes
// the data descriptor's padding fill (0) into y itself, and this repeats it so that the
// padded-output contract does not rest on that alone; for dx cuDNN's documentation leaves the
// padding unspecified.
template <typename T>
void zero_padded_tails(const ShapePlan& plan, T* data, int64_t width, cudaStream_t stream) {
    const size_t row = static_cast<size_t>(width) * sizeof(T);
    for (const PaddedTail& tail : plan.tails)
        LSTM_CUDA_CHECK(
            cudaMemset2DAsync(data + (tail.first_step * plan.batch + tail.sequence) * width,
                              row * static_cast<size_t>(plan.batch), 0, row,
                              static_cast<size_t>(tail.steps), stream));
}

// cuDNN's needs for the call's lengths on the context's device against what was carved from
// the sizes workspace_bytes() / reserve_bytes() reported.
void check_fits(const ShapePlan& plan, const CudnnWorkspace& ws, const CudnnReserve* rs,
                bool training) {
    auto fits = [](size_t need, size_t have, const char* what) {
        check(need <= have, "cudnn variant: cuDNN asks for ", need, " bytes of ", what,
              " for this call's lengths on this device, but workspace_bytes()/reserve_bytes() "
              "carved ",
              have, " (sized on another device or cuDNN's needs grew with shorter lengths)");
    };
    fits(plan.weights->weight_space, ws.weights_bytes, "weight space");
    fits(training ? plan.need.work_training : plan.need.work_inference, ws.work_bytes, "workspace");
    if (rs) fits(plan.need.reserve_training, rs->space_bytes, "reserve space");
}

template <typename T>
void forward_impl(const Config& config, const CudnnSizes& sizes, ShapePlan& plan,
                  const ForwardArgs<T>& a) {
    Context::Impl& impl = a.context->impl();
    const detail::DeviceGuard on_device(impl.device);
    const int64_t seq_len = a.x.size(0), batch = a.x.size(1);
    const CudnnWorkspace ws =
        cudnn_workspace_in(a.workspace, sizes, seq_len, batch, config.input_size, sizeof(T));
    const bool training = a.reserve != nullptr;
    const CudnnReserve rs = cudnn_reserve_in(a.reserve, sizes);

    plan.prepare(impl, a.lengths);
    check_fits(plan, ws, training ? &rs : nullptr, training);
    pack_weights(*plan.weights, a.params.data(), ws.weights, impl.stream);
    LSTM_CUDNN_CHECK(cudnnRNNForward(impl.cudnn, plan.weights->rnn.rnn.desc,
                                     training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                     plan.dev_lengths(), plan.x_desc.desc, a.x.data(),
                                     plan.y_desc.desc, a.y.data(), plan.h_desc.desc, a.h0.data(),
                                     a.hn.data(), plan.c_desc.desc, a.c0.data(), a.cn.data(),
                                     plan.weights->weight_space, ws.weights, ws.work_bytes, ws.work,
                                     training ? rs.space_bytes : 0, training ? rs.space : nullptr));
    zero_padded_tails(plan, a.y.data(), config.output_size(), impl.stream);
}

template <typename T>
void backward_impl(const Config& config, const CudnnSizes& sizes, ShapePlan& plan,
                   const BackwardArgs<T>& a) {
    Context::Impl& impl = a.context->impl();
    const detail::DeviceGuard on_device(impl.device);
    const int64_t seq_len = a.x.size(0), batch = a.x.size(1);
    const CudnnWorkspace ws =
        cudnn_workspace_in(a.workspace, sizes, seq_len, batch, config.input_size, sizeof(T));
    const CudnnReserve rs = cudnn_reserve_in(a.reserve, sizes);

    plan.prepare(impl, a.lengths);
    check_fits(plan, ws, &rs, true);
    const WeightsPlan& w = *plan.weights;

    if (a.part != BackwardPart::weights) {
        pack_weights(w, a.params.data(), ws.weights, impl.stream);
        T* dx = a.dx.empty() ? reinterpret_cast<T*>(ws.dx) : a.dx.data();
        LSTM_CUDNN_CHECK(cudnnRNNBackwardData_v8(
            impl.cudnn, w.rnn.rnn.desc, plan.dev_lengths(), plan.y_desc.desc, a.y.data(),
            a.dy.data(), plan.x_desc.desc, dx, plan.h_desc.desc, a.h0.data(), a.dhn.data(),
            a.dh0.data(), plan.c_desc.desc, a.c0.data(), a.dcn.data(), a.dc0.data(), w.weight_space,
            ws.weights, ws.work_bytes, ws.work, rs.space_bytes, rs.space));
        if (!a.dx.empty()) zero_padded_tails(plan, a.dx.data(), config.input_size, impl.stream);
    }
    if (a.part != BackwardPart::data) {
        // dweight space = dparams; cuDNN adds this call's gradient; the sum goes back.
        pack_weights(w, a.dparams.data(), ws.weights, impl.stream);
        LSTM_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
            impl.cudnn, w.rnn.rnn.desc, CUDNN_WGRAD_MODE_ADD, plan.dev_lengths(), plan.x_desc.desc,
            a.x.data(), plan.h_desc.desc, a.h0.data(), plan.y_desc.desc, a.y.data(), w.weight_space,
            ws.weights, ws.work_bytes, ws.work, rs.space_bytes, rs.space));
        unpack_weights(w, ws.weights, a.dparams.data(), impl.stream);
    }
}

// The plan of `cudnn` for one (config, dtype, T, N, context): cuDNN's sizes for full-length
// sequences and, with a context, the weight mapping and the shape's descriptors on its device.
// A plan made without a context (a sizing query) asks cuDNN through a handle made for the
// question and destroyed after it, and runs nothing.
class CudnnPlan final : public lstm::Plan {
public:
    CudnnPlan(const Variant& variant, const PlanRequest& r, const CudnnSizes& sizes,
              std::unique_ptr<WeightsPlan> weights)
        : lstm::Plan(variant, r,
                     cudnn_workspace_size(sizes, r.seq_len, r.batch, r.config.input_size,
                                          elem_size(r.dtype)),
                     cudnn_reserve_size(sizes)),
          sizes_(sizes),
          weights_(std::move(weights)) {
        if (weights_)
            shape_ = std::make_unique<ShapePlan>(*weights_, r.config, r.dtype, r.seq_len, r.batch);
    }

    const CudnnSizes& sizes() const { return sizes_; }
    // The weight mapping on the plan's context; only a plan made with one has it.
    const WeightsPlan& weights() const {
        check(weights_ != nullptr,
              "variant 'cudnn' (cuda): this plan was made without an "
              "lstm::cuda::Context (a sizing query); a call needs a plan "
              "made with its context");
        return *weights_;
    }

protected:
    void run_forward(const ForwardArgs<float>& a) const override {
        forward_impl(config(), sizes_, shape(), a);
    }
    void run_forward(const ForwardArgs<double>& a) const override {
        forward_impl(config(), sizes_, shape(), a);
    }
    void run_backward(const BackwardArgs<float>& a) const override {
        backward_impl(config(), sizes_, shape(), a);
    }
    void run_backward(const BackwardArgs<double>& a) const override {
        backward_impl(config(), sizes_, shape(), a);
    }

private:
    ShapePlan& shape() const {
        weights();
        return *shape_;
    }

    CudnnSizes sizes_;
    std::unique_ptr<WeightsPlan> weights_;
    // The descriptors of the lengths last described; calls update them (the plan is used by one
    // host thread at a time, as its context is).
    std::unique_ptr<ShapePlan> shape_;
};

}  // namespace

std::optional<std::string> CudnnVariant::supports(const Config& config, DType dtype) const {
    // cuDNN's RNN runs fp32 (FMA math) and fp64 (default math). The recurrent projection needs
    // projSize <= hiddenSize (Config::validate already demands proj_size < hidden_size, as
    // PyTorch does) and the standard algorithm, which describe_rnn always picks. A projection in
    // fp64 and with padded I/O has not been run on a device here; should cuDNN refuse either,
    // its status comes back through LSTM_CUDNN_CHECK as an error rather than a wrong result.
    (void)dtype;
    if (config.proj_size > config.hidden_size)
        return std::string("cuDNN's recurrent projection needs proj_size <= hidden_size");
    return cudnn_size_problem(config, 1, 1);
}

std::unique_ptr<lstm::Plan> CudnnVariant::build_plan(const PlanRequest& request) const {
    const Config& config = request.config;
    if (auto why = cudnn_size_problem(config, request.seq_len, request.batch))
        fail_as<Unsupported>("variant 'cudnn' (cuda) cannot run T = ", request.seq_len,
                             ", N = ", request.batch, ": ", *why);
    if (request.context == nullptr) {
        return std::make_unique<CudnnPlan>(
            *this, request,
            cudnn_sizes(nullptr, config, request.dtype, request.seq_len, request.batch), nullptr);
    }
    Context::Impl& impl = request.context->impl();
    const detail::DeviceGuard on_device(impl.device);
    auto weights = std::make_unique<WeightsPlan>(impl.cudnn, config, request.dtype);
    const CudnnSizes sizes = full_length_sizes(impl.cudnn, weights->rnn, config, request.dtype,
                                               request.seq_len, request.batch);
    return std::make_unique<CudnnPlan>(*this, request, sizes, std::move(weights));
}

CudnnSizes cudnn_sizes(Context* context, const Config& config, DType dtype, int64_t seq_len,
                       int64_t batch) {
    config.validate();
    if (auto why = cudnn_size_problem(config, seq_len, batch))
        fail_as<Unsupported>("cudnn_sizes: ", *why);
    check(seq_len >= 1 && batch >= 1, "cudnn_sizes: T and N must be >= 1, got T = ", seq_len,
          ", N = ", batch);
    if (context != nullptr) {
        Context::Impl& impl = context->impl();
        const detail::DeviceGuard on_device(impl.device);
        RnnDesc rnn;
        describe_rnn(impl.cudnn, config, dtype, rnn);
        return full_length_sizes(impl.cudnn, rnn, config, dtype, seq_len, batch);
    }
    check(device_count() > 0,
          "variant 'cudnn' (cuda): workspace_bytes() and reserve_bytes() ask cuDNN, which needs "
          "a CUDA device, and this process sees none (the variant is compiled in but cannot run "
          "here)");
    const OwnHandle own;
    RnnDesc rnn;
    describe_rnn(own.handle, config, dtype, rnn);
    return full_length_sizes(own.handle, rnn, config, dtype, seq_len, batch);
}

namespace {

// The helpers below describe the RNN with cuDNN's int32 sizes, as the variant does after its
// supports() has checked them.
void require_cudnn_config(const Config& config, const char* fn) {
    config.validate();
    if (auto why = cudnn_size_problem(config, 1, 1)) fail_as<Unsupported>(fn, ": ", *why);
}

// The context's plan of `cudnn` for (config, dtype) with T = N = 1: its weight mapping is every
// shape's.
std::shared_ptr<const lstm::Plan> weights_of(Context& context, const Config& config, DType dtype) {
    PlanRequest request{config, dtype, 1, 1};
    request.context = &context;
    return context.plans().get(find_variant("cudnn", Device::cuda), request);
}

}  // namespace

CudnnWeightLayout cudnn_weight_layout(Context& context, const Config& config, DType dtype) {
    require_cudnn_config(config, "cudnn_weight_layout");
    const detail::DeviceGuard on_device(context);
    const std::shared_ptr<const lstm::Plan> plan = weights_of(context, config, dtype);
    const WeightsPlan& w = static_cast<const CudnnPlan&>(*plan).weights();
    CudnnWeightLayout out;
    out.weight_space_bytes = w.weight_space;
    out.regions = w.regions;
    out.copies = w.copies;
    out.copies_cover_space = w.covers_space;
    return out;
}

void cudnn_pack_weights(Context& context, const Config& config, DType dtype, const void* params,
                        void* weight_space) {
    require_cudnn_config(config, "cudnn_pack_weights");
    const detail::DeviceGuard on_device(context);
    const std::shared_ptr<const lstm::Plan> plan = weights_of(context, config, dtype);
    pack_weights(static_cast<const CudnnPlan&>(*plan).weights(), params, weight_space,
                 context.impl().stream);
}

void cudnn_unpack_weights(Context& context, const Config& config, DType dtype,
                          const void* weight_space, void* params) {
    require_cudnn_config(config, "cudnn_unpack_weights");
    const detail::DeviceGuard on_device(context);
    const std::shared_ptr<const lstm::Plan> plan = weights_of(context, config, dtype);
    unpack_weights(static_cast<const CudnnPlan&>(*plan).weights(), weight_space, params,
                   context.impl().stream);
}

}  // namespace lstm::cuda

#endif  // LSTM_WITH_CUDNN
