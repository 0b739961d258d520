#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/environment.hpp"
#include "lstm/cell.hpp"
#include "lstm/config.hpp"
#include "lstm/error.hpp"
#include "lstm/params.hpp"
#include "lstm/tensor.hpp"

namespace lstm {

namespace cuda {
// Owns the stream, the cuBLAS/cuDNN handles and the per-shape plans a CUDA variant uses
// (lstm/cuda/context.hpp). Declared here only, so this header includes no CUDA header.
class Context;
}  // namespace cuda

// Which part of a backward call runs. cuDNN splits backward the same way: `data` walks the time
// loop (dx, dh0, dc0) and leaves in the reserve what `weights` needs; `weights` then adds the
// parameter gradients. DeepBench times the two parts separately.
enum class BackwardPart {
    all,      // data and weights in one call
    data,     // dx, dh0, dc0 only; dparams is not touched (and may be empty)
    weights,  // dparams only; must follow a `data` call with the same arguments and reserve
};

inline const char* to_string(BackwardPart part) {
    switch (part) {
        case BackwardPart::all:
            return "all";
        case BackwardPart::data:
            return "data";
        case BackwardPart::weights:
            return "weights";
    }
    return "?";
}

// Inputs and outputs of one forward call. Shapes use T = x.size(0), N = x.size(1), L layers,
// D directions, H hidden units, S = config.state_size() (proj_size, or H without a projection).
// Every tensor lives in the variant's memory space, except `lengths`, which is always on the host.
template <typename T>
struct ForwardArgs {
    TensorView<const T> x;        // (T, N, I) input, time-major
    Span<const int64_t> lengths;  // host (N), each in 1..T; empty: every sequence has length T
    TensorView<const T> h0;       // (L*D, N, S) initial hidden state; empty: zeros
    TensorView<const T> c0;       // (L*D, N, H) initial cell state; empty: zeros
    TensorView<const T> params;   // (param_count(config)) flat, PyTorch parameters() order
    TensorView<T> y;              // (T, N, D*S) overwritten; zero at padded positions
    TensorView<T> hn;           // (L*D, N, S) overwritten, state at each last valid step; optional
    TensorView<T> cn;           // (L*D, N, H) overwritten; optional
    void* workspace = nullptr;  // scratch of workspace_bytes(), clobbered
    size_t workspace_size = 0;
    void* reserve = nullptr;  // reserve_bytes(): written for backward; null means inference
    size_t reserve_size = 0;
    cuda::Context* context = nullptr;  // CUDA variants: required, orders the call on its stream
};

// Inputs and outputs of one backward call; x, lengths, h0, c0, params, y and reserve must be those
// of the matching training forward. dparams is ACCUMULATED into (the caller zeroes it), like
// PyTorch's .grad and cuDNN's backward-weights; dx, dh0, dc0 are overwritten.
template <typename T>
struct BackwardArgs {
    TensorView<const T> x;        // (T, N, I)
    Span<const int64_t> lengths;  // host (N); empty: all T
    TensorView<const T> h0;       // (L*D, N, S); empty: zeros
    TensorView<const T> c0;       // (L*D, N, H); empty: zeros
    TensorView<const T> params;   // (param_count(config))
    TensorView<const T> y;        // (T, N, D*S) output of the matching forward
    TensorView<const T> dy;       // (T, N, D*S) gradient of the loss w.r.t. y; padded rows ignored
    TensorView<const T> dhn;      // (L*D, N, S); empty: zeros
    TensorView<const T> dcn;      // (L*D, N, H); empty: zeros
    TensorView<T> dx;             // (T, N, I) overwritten (zero at padded positions); optional
    TensorView<T> dh0;            // (L*D, N, S) overwritten; optional
    TensorView<T> dc0;            // (L*D, N, H) overwritten; optional
    TensorView<T> dparams;        // (param_count(config)) ACCUMULATED into
    void* workspace = nullptr;
    size_t workspace_size = 0;
    void* reserve = nullptr;  // of the matching training forward; clobbered: one backward each
    size_t reserve_size = 0;
    cuda::Context* context = nullptr;       // CUDA variants: required
    BackwardPart part = BackwardPart::all;  // data / weights: see BackwardPart
};

// The backward arguments that must be those of the training forward `f` (x, lengths, h0, c0,
// params, y, workspace, reserve, context); gradients and part are left to the caller. Pointer
// copies only (host or device alike): nothing is read.
template <typename T>
BackwardArgs<T> backward_args_from(const ForwardArgs<T>& f) {
    BackwardArgs<T> b;
    b.x = f.x;
    b.lengths = f.lengths;
    b.h0 = f.h0;
    b.c0 = f.c0;
    b.params = f.params;
    b.y = f.y;
    b.workspace = f.workspace;
    b.workspace_size = f.workspace_size;
    b.reserve = f.reserve;
    b.reserve_size = f.reserve_size;
    b.context = f.context;
    return b;
}

class Variant;

// What a plan is made for: one problem of one variant. `path` names the code the plan runs, one
// of Variant::paths(dtype) (an instruction set); empty asks for the variant's choice on this host
// (Variant::default_path). `precision` is what its products compute in (lstm/tensor.hpp's
// Precision; Variant::supports_precision says which a variant has). Short names, so a request
// that is only compared (a plan cache's lookup) does not allocate.
struct PlanRequest {
    PlanRequest() = default;
    PlanRequest(const Config& config_, DType dtype_, int64_t seq_len_, int64_t batch_,
                std::string path_ = {}, cuda::Context* context_ = nullptr,
                Precision precision_ = Precision::full)
        : config(config_),
          dtype(dtype_),
          seq_len(seq_len_),
          batch(batch_),
          path(std::move(path_)),
          context(context_),
          precision(precision_) {}

    Config config;  // config.core(): time-major, no dropout
    DType dtype = DType::f32;
    int64_t seq_len = 0;               // T
    int64_t batch = 0;                 // N
    std::string path;                  // empty: Variant::default_path(dtype)
    cuda::Context* context = nullptr;  // CUDA variants: the context the plan's calls run on
    Precision precision = Precision::full;
};

// A variant's decisions for one problem, made once and run many times (the way CUTLASS's
// operators and oneDNN's primitives are): the path it takes, the sizes of the workspace and the
// reserve it needs, and whatever it prepared (oneDNN's primitives). Variant::make_plan builds
// one; a PlanCache (lstm/plan_cache.hpp) keeps them. forward() and backward() validate their
// arguments against the plan's problem (lstm::Error naming the argument), then run; they may be
// called from several threads at once when the caller gives each its own buffers.
class Plan {
public:
    virtual ~Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;

    const Variant& variant() const { return *variant_; }
    // The problem, with the path resolved.
    const PlanRequest& request() const { return request_; }
    const Config& config() const { return request_.config; }
    const std::string& path() const { return request_.path; }
    Precision precision() const { return request_.precision; }
    // Bytes of scratch for one forward or backward call, and bytes a training forward leaves
    // for backward.
    size_t workspace_bytes() const { return workspace_bytes_; }
    size_t reserve_bytes() const { return reserve_bytes_; }
    // Host memory the plan holds itself (oneDNN's primitives and memory descriptors, say), for
    // a cache's byte bound; workspace and reserve are the caller's and not counted.
    virtual size_t held_bytes() const { return 0; }

    template <typename T>
    void forward(const ForwardArgs<T>& args) const;
    template <typename T>
    void backward(const BackwardArgs<T>& args) const;

protected:
    // `request` has its path resolved and has passed Variant::make_plan's checks.
    Plan(const Variant& variant, PlanRequest request, size_t workspace_bytes, size_t reserve_bytes)
        : variant_(&variant),
          request_(std::move(request)),
          workspace_bytes_(workspace_bytes),
          reserve_bytes_(reserve_bytes) {}

    // The calls for arguments already checked; a plan implements the dtypes its variant's
    // supports() accepts and must not allocate in them.
    virtual void run_forward(const ForwardArgs<float>&) const { unsupported(); }
    virtual void run_forward(const ForwardArgs<double>&) const { unsupported(); }
    virtual void run_backward(const BackwardArgs<float>&) const { unsupported(); }
    virtual void run_backward(const BackwardArgs<double>&) const { unsupported(); }

private:
    [[noreturn]] void unsupported() const;

    const Variant* variant_;
    PlanRequest request_;
    size_t workspace_bytes_, reserve_bytes_;
};

// THE interface every LSTM implementation follows: what it is and can run, answered before
// anything runs, and plans (make_plan) that do the work. The direct calls below go through the
// default plan cache.
class Variant {
public:
    // Drops this variant's plans from the default plan cache.
    virtual ~Variant();

    // Stable name used by the registry, the bench and the tests: "basic", "fused", "onednn", ...
    virtual const char* name() const = 0;
    virtual Device device() const = 0;

    // Why this variant cannot run `config` in `dtype`; std::nullopt when it can.
    virtual std::optional<std::string> supports(const Config& config, DType dtype) const = 0;
    // Why this variant cannot compute `config` on `dtype` data in `precision` (lstm/tensor.hpp);
    // std::nullopt when it can. Only asked for what supports() accepts, and never for
    // Precision::full, which every variant computes. The default has no bf16 path.
    virtual std::optional<std::string> supports_precision(const Config& /*config*/, DType /*dtype*/,
                                                          Precision precision) const {
        return std::string("it has no ") + to_string(precision) + " compute path";
    }
    // Why this variant cannot take per-sequence lengths; std::nullopt when it can.
    virtual std::optional<std::string> supports_variable_lengths() const { return std::nullopt; }
    // Why this variant cannot run backward as separate data and weights calls; nullopt when it can.
    virtual std::optional<std::string> supports_split_backward() const {
        return std::string("backward runs as one call (BackwardPart::all only)");
    }

    // The paths this variant can take for `dtype` on this host (and build), the variant's
    // choice first: "default" for a variant with one. Tests and lstm_bench iterate them, so a
    // path a variant lists is tested and timed.
    virtual std::vector<std::string> paths(DType /*dtype*/) const { return {"default"}; }
    // The path a request without one gets. Throws lstm::Unsupported where an explicit choice
    // from the environment (LSTM_FUSED_ISA) names a path this host cannot take.
    virtual std::string default_path(DType /*dtype*/) const { return "default"; }
    // What `path` runs on this host, for reports (lstm_tool info, the bench's context).
    virtual std::string describe_path(const std::string& path) const { return path; }
    // Whether this variant's `precision` path rounds exactly where docs/precision.md says (the
    // oracle's rounding model, lstm/reference/lstm_reference.hpp), so that it agrees with that
    // model to fp32 tolerance; a vendor's path rounds where its library does and is held to the
    // bf16 bound alone. Only asked where supports_precision() accepts `precision`.
    virtual bool rounds_at_library_points(Precision /*precision*/) const { return true; }
    // What this variant's `precision` path runs on this host (which instructions its bf16
    // products take, and whether that is faster than full precision), for the same reports;
    // only asked where supports_precision() accepts it.
    virtual std::string describe_precision(Precision precision) const {
        return to_string(precision);
    }
    // Why `path` is not among paths() on this host ("this CPU has no AVX-512"), for the error
    // that refuses it; empty where the variant has no such path anywhere.
    virtual std::string why_no_path(const std::string& /*path*/) const { return ""; }
    // The element-wise cell it computes (lstm/cell.hpp): the oracle checks it against this
    // description. PyTorch's for every built-in variant.
    virtual const CellFunctions& cell() const { return pytorch_cell(); }

    // A plan for `request` (see Plan). Throws lstm::Error for a malformed config, T or N below 1,
    // sizes whose byte counts overflow or a path not in paths(), and lstm::Unsupported where
    // supports() or supports_precision() objects. Builds anew on each call; PlanCache keeps plans.
    std::unique_ptr<Plan> make_plan(const PlanRequest& request) const;

    // What a plan of `request` depends on beyond the request (oneDNN's primitives: the OpenMP
    // thread count they were built for), so a cache keeps one plan per value; 0 for most.
    virtual int64_t plan_tag(const PlanRequest& /*request*/) const { return 0; }

    // Bytes of temporary scratch for one forward or backward call on (T, N), on the default
    // path. Throws as make_plan() does.
    size_t workspace_bytes(const Config& config, DType dtype, int64_t seq_len, int64_t batch) const;
    // Bytes a training forward writes for backward to read; throws as make_plan() does.
    size_t reserve_bytes(const Config& config, DType dtype, int64_t seq_len, int64_t batch) const;

    // One call on the default path through the process's default plan cache
    // (lstm::default_plan_cache()): the plan is built on the first call of a problem.
    template <typename T>
    void forward(const Config& config, const ForwardArgs<T>& args) const;
    template <typename T>
    void backward(const Config& config, const BackwardArgs<T>& args) const;

    // Throws the message of supports() / supports_variable_lengths() as lstm::Unsupported when
    // they object (after Config::validate's lstm::InvalidArgument for a malformed config). The
    // layer-level options are lstm::Lstm's to apply; a variant call takes config.core().
    void require(const Config& config, DType dtype, bool variable_lengths) const {
        config.validate();
        check(!config.batch_first,
              "config.batch_first: a Variant call is time-major, (T, N, features); lstm::Lstm "
              "applies batch_first around it (pass config.core() here)");
        check(config.dropout == 0.0, "config.dropout = ", config.dropout,
              ": a Variant call runs without dropout; lstm::Lstm applies it between layers "
              "(pass config.core() here)");
        if (auto why = supports(config, dtype))
            fail_as<Unsupported>("variant '", name(), "' (", to_string(device()),
                                 ") cannot run this config in ", to_string(dtype), ": ", *why);
        if (variable_lengths) {
            if (auto why = supports_variable_lengths())
                fail_as<Unsupported>("variant '", name(), "' (", to_string(device()),
                                     ") cannot take per-sequence lengths: ", *why);
        }
    }

    // Throws lstm::Unsupported naming the variant when it cannot compute `config` on `dtype` in
    // `precision`: bf16 products are for float32 data, and supports_precision() must agree.
    void require_precision(const Config& config, DType dtype, Precision precision) const {
        if (precision == Precision::full) return;
        if (dtype != DType::f32)
            fail_as<Unsupported>("precision ", to_string(precision), ": mixed precision is for ",
                                 to_string(DType::f32), " data, got ", to_string(dtype));
        if (auto why = supports_precision(config, dtype, precision))
            fail_as<Unsupported>("variant '", name(), "' (", to_string(device()),
                                 ") cannot compute this config in precision ", to_string(precision),
                                 ": ", *why);
    }

protected:
    // The plan of a request make_plan() has checked, its path resolved. The default serves
    // variants written as calls (the hooks below): its plan sizes through them and runs them.
    virtual std::unique_ptr<Plan> build_plan(const PlanRequest& request) const;

    // Hooks of a variant written as calls rather than plans (the CUDA ones, for now), used by
    // the default build_plan(): sizes and calls for arguments already checked. A variant's
    // buffers are fewer than 64 planes of T * N * num_cells * (4H + input + S) elements of at
    // most 8 bytes, which make_plan bounds, plus copies of the weights and scratch rows of 4H,
    // which Config::validate bounds.
    virtual size_t run_workspace_bytes(const Config&, DType, int64_t, int64_t) const {
        unsupported();
    }
    virtual size_t run_reserve_bytes(const Config&, DType, int64_t, int64_t) const {
        unsupported();
    }
    virtual void run_forward(const Config&, const ForwardArgs<float>&) const { unsupported(); }
    virtual void run_forward(const Config&, const ForwardArgs<double>&) const { unsupported(); }
    virtual void run_backward(const Config&, const BackwardArgs<float>&) const { unsupported(); }
    virtual void run_backward(const Config&, const BackwardArgs<double>&) const { unsupported(); }

private:
    friend class CallPlan;

    // make_plan's own validation of sizes: without it a negative T wraps to a huge size_t, and
    // N = 0 reaches oneDNN's primitive descriptors, which divide by it.
    static void check_sizes(const Config& config, int64_t seq_len, int64_t batch,
                            const char* query) {
        config.validate();
        check(seq_len >= 1, query, ": seq_len (T) must be >= 1, got ", seq_len);
        check(batch >= 1, query, ": batch (N) must be >= 1, got ", batch);
        // 64 covers every buffer a variant sums (see run_workspace_bytes), 8 the widest element.
        const int64_t width = 4 * config.hidden_size + config.input_size + config.state_size();
        int64_t bytes = 64 * 8;
        for (int64_t factor : {seq_len, batch, config.num_cells(), width})
            if (__builtin_mul_overflow(bytes, factor, &bytes))
                fail_as<OutOfMemory>(query, ": T ", seq_len, ", N ", batch, " with this config (",
                                     config.num_cells(), " cells, H ", config.hidden_size,
                                     ", input ", config.input_size,
                                     ") needs buffers whose sizes do not fit in 64 bits");
    }

    // Reached only if supports() accepted a dtype the variant does not implement: a bug.
    [[noreturn]] void unsupported() const {
        fail("variant '", name(), "' accepted a dtype in supports() that it does not implement");
    }
};

namespace detail {

// True when some sequence is shorter than T.
inline bool has_variable_lengths(Span<const int64_t> lengths, int64_t seq_len) {
    for (int64_t v : lengths)
        if (v != seq_len) return true;
    return false;
}

inline void check_lengths(Span<const int64_t> lengths, int64_t seq_len, int64_t batch) {
    if (lengths.empty()) return;
    check(lengths.size == batch, "lengths has ", lengths.size, " entries, expected N = ", batch,
          " (x.size(1))");
    for (int64_t n = 0; n < batch; ++n) {
        check(lengths[n] >= 1, "lengths[", n, "] = ", lengths[n], " must be >= 1");
        check(lengths[n] <= seq_len, "lengths[", n, "] = ", lengths[n], " exceeds T = ", seq_len);
    }
}

template <typename V>
void check_device(const V& view, const char* name, Device device) {
    if (view.empty()) return;
    check(view.device() == device, name, " lives on ", to_string(view.device()),
          " but the variant runs on ", to_string(device));
}

// h-like states (h0, hn, dhn, dh0) are (L*D, N, S); c-like ones (c0, cn, dcn, dc0) (L*D, N, H).
template <typename V>
void check_optional_h(const V& view, const char* name, const Config& config, int64_t batch) {
    if (!view.empty()) check_shape(view, name, {config.num_cells(), batch, config.state_size()});
}
template <typename V>
void check_optional_c(const V& view, const char* name, const Config& config, int64_t batch) {
    if (!view.empty()) check_shape(view, name, {config.num_cells(), batch, config.hidden_size});
}

inline void check_buffer(const void* data, size_t have, size_t need, const char* name) {
    check(need == 0 || (data != nullptr && have >= need), name, " needs ", need, " bytes, got ",
          data == nullptr ? 0 : have, data == nullptr ? " (null)" : "");
}

// The checks forward and backward share, against the plan's problem.
template <typename A>
void check_common(const Plan& plan, const A& args) {
    const Variant& variant = plan.variant();
    const Config& config = plan.config();
    const PlanRequest& request = plan.request();
    if (variant.device() == Device::cpu) kernels::cpu::check_cpu_environment();
    check(!args.x.empty(), "x must be given, got an empty view");
    check(args.x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", args.x.shape_string());
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    check(seq_len >= 1, "x.size(0) (T) must be >= 1, got ", seq_len);
    check(batch >= 1, "x.size(1) (N) must be >= 1, got ", batch);
    check(args.x.size(2) == config.input_size, "x.size(2) = ", args.x.size(2),
          " does not match config.input_size = ", config.input_size);
    check(seq_len == request.seq_len && batch == request.batch, "x is (T ", seq_len, ", N ", batch,
          ") but the plan was made for T ", request.seq_len, ", N ", request.batch);
    check_lengths(args.lengths, seq_len, batch);
    if (has_variable_lengths(args.lengths, seq_len)) {
        if (auto why = variant.supports_variable_lengths())
            fail_as<Unsupported>("variant '", variant.name(), "' (", to_string(variant.device()),
                                 ") cannot take per-sequence lengths: ", *why);
    }
    check_optional_h(args.h0, "h0", config, batch);
    check_optional_c(args.c0, "c0", config, batch);
    check(args.params.numel() == param_count(config), "params has ", args.params.numel(),
          " elements, expected param_count(config) = ", param_count(config));
    const Device dev = variant.device();
    check(dev != Device::cuda || args.context != nullptr,
          "context must be an lstm::cuda::Context "
          "for the CUDA variant '",
          variant.name(), "', got null");
    check(request.context == nullptr || args.context == request.context,
          "context: the plan was made for another lstm::cuda::Context than the call's");
    check_device(args.x, "x", dev);
    check_device(args.h0, "h0", dev);
    check_device(args.c0, "c0", dev);
    check_device(args.params, "params", dev);
    check_buffer(args.workspace, args.workspace_size, plan.workspace_bytes(), "workspace");
}

}  // namespace detail

template <typename T>
void Plan::forward(const ForwardArgs<T>& args) const {
    constexpr DType dtype = dtype_of<T>();
    check(dtype == request_.dtype, "forward in ", to_string(dtype), " on a plan made for ",
          to_string(request_.dtype));
    detail::check_common(*this, args);
    const Config& config = request_.config;
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    const Device device = variant_->device();
    check_shape(args.y, "y", {seq_len, batch, config.output_size()});
    detail::check_optional_h(args.hn, "hn", config, batch);
    detail::check_optional_c(args.cn, "cn", config, batch);
    detail::check_device(args.y, "y", device);
    detail::check_device(args.hn, "hn", device);
    detail::check_device(args.cn, "cn", device);
    if (args.reserve != nullptr)
        detail::check_buffer(args.reserve, args.reserve_size, reserve_bytes_, "reserve");
    run_forward(args);
}

template <typename T>
void Plan::backward(const BackwardArgs<T>& args) const {
    constexpr DType dtype = dtype_of<T>();
    check(dtype == request_.dtype, "backward in ", to_string(dtype), " on a plan made for ",
          to_string(request_.dtype));
    detail::check_common(*this, args);
    const Config& config = request_.config;
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    const Variant& v = *variant_;
    const Device device = v.device();
    check_shape(args.y, "y", {seq_len, batch, config.output_size()});
    check_shape(args.dy, "dy", {seq_len, batch, config.output_size()});
    detail::check_optional_h(args.dhn, "dhn", config, batch);
    detail::check_optional_c(args.dcn, "dcn", config, batch);
    if (!args.dx.empty()) check_shape(args.dx, "dx", {seq_len, batch, config.input_size});
    detail::check_optional_h(args.dh0, "dh0", config, batch);
    detail::check_optional_c(args.dc0, "dc0", config, batch);
    if (args.part != BackwardPart::all) {
        if (auto why = v.supports_split_backward())
            fail_as<Unsupported>("variant '", v.name(), "' (", to_string(device),
                                 ") cannot run backward part ", to_string(args.part), ": ", *why);
    }
    // The data part leaves dparams alone, so it may be omitted there.
    if (args.part != BackwardPart::data || !args.dparams.empty())
        check(args.dparams.numel() == param_count(config), "dparams has ", args.dparams.numel(),
              " elements, expected param_count(config) = ", param_count(config));
    check(args.reserve != nullptr,
          "reserve must be the buffer written by a training forward, got null");
    detail::check_buffer(args.reserve, args.reserve_size, reserve_bytes_, "reserve");
    detail::check_device(args.y, "y", device);
    detail::check_device(args.dy, "dy", device);
    detail::check_device(args.dhn, "dhn", device);
    detail::check_device(args.dcn, "dcn", device);
    detail::check_device(args.dh0, "dh0", device);
    detail::check_device(args.dc0, "dc0", device);
    detail::check_device(args.dx, "dx", device);
    detail::check_device(args.dparams, "dparams", device);
    run_backward(args);
}

inline void Plan::unsupported() const {
    fail("variant '", variant_->name(), "' accepted ", to_string(request_.dtype),
         " in supports() but its plan does not implement it");
}

// The plan of a variant written as calls (Variant's run_* hooks): it sizes and runs through them.
class CallPlan final : public Plan {
public:
    CallPlan(const Variant& variant, const PlanRequest& request)
        : Plan(variant, request,
               variant.run_workspace_bytes(request.config, request.dtype, request.seq_len,
                                           request.batch),
               variant.run_reserve_bytes(request.config, request.dtype, request.seq_len,
                                         request.batch)) {}

protected:
    void run_forward(const ForwardArgs<float>& a) const override { call_forward(a); }
    void run_forward(const ForwardArgs<double>& a) const override { call_forward(a); }
    void run_backward(const BackwardArgs<float>& a) const override { call_backward(a); }
    void run_backward(const BackwardArgs<double>& a) const override { call_backward(a); }

private:
    template <typename T>
    void call_forward(const ForwardArgs<T>& a) const {
        variant().run_forward(config(), a);
    }
    template <typename T>
    void call_backward(const BackwardArgs<T>& a) const {
        variant().run_backward(config(), a);
    }
};

inline std::unique_ptr<Plan> Variant::build_plan(const PlanRequest& request) const {
    return std::make_unique<CallPlan>(*this, request);
}

inline std::unique_ptr<Plan> Variant::make_plan(const PlanRequest& request) const {
    check_sizes(request.config, request.seq_len, request.batch, "make_plan");
    require(request.config, request.dtype, false);
    require_precision(request.config, request.dtype, request.precision);
    PlanRequest resolved = request;
    if (resolved.path.empty()) resolved.path = default_path(request.dtype);
    const std::vector<std::string> known = paths(request.dtype);
    bool found = false;
    std::string list;
    for (const std::string& p : known) {
        found = found || p == resolved.path;
        list += (list.empty() ? "" : ", ") + p;
    }
    if (!found) {
        const std::string why = why_no_path(resolved.path);
        fail_as<Unsupported>("variant '", name(), "' (", to_string(device()), ") has no path '",
                             resolved.path, "' for ", to_string(request.dtype), " on this host",
                             why.empty() ? "" : " (", why, why.empty() ? "" : ")",
                             "; it has: ", list);
    }
    return build_plan(resolved);
}

}  // namespace lstm

// PlanCache, and the Variant members that go through the default plan cache.
#include "lstm/plan_cache.hpp"
