#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/cpu/environment.hpp"
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

// THE interface every LSTM implementation follows. Public entry points validate their arguments
// (throwing lstm::Error that names the argument) and then call the variant's run_* hooks, which
// may assume valid input and must not allocate.
class Variant {
public:
    virtual ~Variant() = default;

    // Stable name used by the registry, the bench and the tests: "basic", "fused", "onednn", ...
    virtual const char* name() const = 0;
    virtual Device device() const = 0;

    // Why this variant cannot run `config` in `dtype`; std::nullopt when it can.
    virtual std::optional<std::string> supports(const Config& config, DType dtype) const = 0;
    // Why this variant cannot take per-sequence lengths; std::nullopt when it can.
    virtual std::optional<std::string> supports_variable_lengths() const { return std::nullopt; }
    // Why this variant cannot run backward as separate data and weights calls; nullopt when it can.
    virtual std::optional<std::string> supports_split_backward() const {
        return std::string("backward runs as one call (BackwardPart::all only)");
    }

    // Bytes of temporary scratch for one forward or backward call on (T, N). Throws lstm::Error
    // for a malformed config, T or N below 1, or sizes whose byte counts overflow.
    size_t workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                           int64_t batch) const {
        check_sizes(config, seq_len, batch, "workspace_bytes");
        return run_workspace_bytes(config, dtype, seq_len, batch);
    }
    // Bytes a training forward writes for backward to read; throws as workspace_bytes() does.
    size_t reserve_bytes(const Config& config, DType dtype, int64_t seq_len, int64_t batch) const {
        check_sizes(config, seq_len, batch, "reserve_bytes");
        return run_reserve_bytes(config, dtype, seq_len, batch);
    }

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

protected:
    // The sizes above for arguments already checked. A variant's buffers are fewer than 64
    // planes of T * N * num_cells * (4H + input + S) elements of at most 8 bytes, which
    // check_sizes bounds, plus copies of the weights and scratch rows of 4H, which
    // Config::validate bounds.
    virtual size_t run_workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                                       int64_t batch) const = 0;
    virtual size_t run_reserve_bytes(const Config& config, DType dtype, int64_t seq_len,
                                     int64_t batch) const = 0;
    virtual void run_forward(const Config&, const ForwardArgs<float>&) const { unsupported(); }
    virtual void run_forward(const Config&, const ForwardArgs<double>&) const { unsupported(); }
    virtual void run_backward(const Config&, const BackwardArgs<float>&) const { unsupported(); }
    virtual void run_backward(const Config&, const BackwardArgs<double>&) const { unsupported(); }

private:
    // The sizing queries' own validation (the forward and backward calls check the same through
    // their tensors): without it a negative T wraps to a huge size_t, and N = 0 reaches oneDNN's
    // primitive descriptors, which divide by it.
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

template <typename A>
void check_common(const Variant& variant, const Config& config, const A& args, DType dtype) {
    if (variant.device() == Device::cpu) kernels::cpu::check_cpu_environment();
    check(!args.x.empty(), "x must be given, got an empty view");
    check(args.x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", args.x.shape_string());
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    check(seq_len >= 1, "x.size(0) (T) must be >= 1, got ", seq_len);
    check(batch >= 1, "x.size(1) (N) must be >= 1, got ", batch);
    check(args.x.size(2) == config.input_size, "x.size(2) = ", args.x.size(2),
          " does not match config.input_size = ", config.input_size);
    check_lengths(args.lengths, seq_len, batch);
    variant.require(config, dtype, has_variable_lengths(args.lengths, seq_len));
    check_optional_h(args.h0, "h0", config, batch);
    check_optional_c(args.c0, "c0", config, batch);
    check(args.params.numel() == param_count(config), "params has ", args.params.numel(),
          " elements, expected param_count(config) = ", param_count(config));
    const Device dev = variant.device();
    check(dev != Device::cuda || args.context != nullptr,
          "context must be an lstm::cuda::Context "
          "for the CUDA variant '",
          variant.name(), "', got null");
    check_device(args.x, "x", dev);
    check_device(args.h0, "h0", dev);
    check_device(args.c0, "c0", dev);
    check_device(args.params, "params", dev);
    check_buffer(args.workspace, args.workspace_size,
                 variant.workspace_bytes(config, dtype, seq_len, batch), "workspace");
}

}  // namespace detail

template <typename T>
void Variant::forward(const Config& config, const ForwardArgs<T>& args) const {
    constexpr DType dtype = dtype_of<T>();
    detail::check_common(*this, config, args, dtype);
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    check_shape(args.y, "y", {seq_len, batch, config.output_size()});
    detail::check_optional_h(args.hn, "hn", config, batch);
    detail::check_optional_c(args.cn, "cn", config, batch);
    detail::check_device(args.y, "y", device());
    detail::check_device(args.hn, "hn", device());
    detail::check_device(args.cn, "cn", device());
    if (args.reserve != nullptr)
        detail::check_buffer(args.reserve, args.reserve_size,
                             reserve_bytes(config, dtype, seq_len, batch), "reserve");
    run_forward(config, args);
}

template <typename T>
void Variant::backward(const Config& config, const BackwardArgs<T>& args) const {
    constexpr DType dtype = dtype_of<T>();
    detail::check_common(*this, config, args, dtype);
    const int64_t seq_len = args.x.size(0), batch = args.x.size(1);
    check_shape(args.y, "y", {seq_len, batch, config.output_size()});
    check_shape(args.dy, "dy", {seq_len, batch, config.output_size()});
    detail::check_optional_h(args.dhn, "dhn", config, batch);
    detail::check_optional_c(args.dcn, "dcn", config, batch);
    if (!args.dx.empty()) check_shape(args.dx, "dx", {seq_len, batch, config.input_size});
    detail::check_optional_h(args.dh0, "dh0", config, batch);
    detail::check_optional_c(args.dc0, "dc0", config, batch);
    if (args.part != BackwardPart::all) {
        if (auto why = supports_split_backward())
            fail_as<Unsupported>("variant '", name(), "' (", to_string(device()),
                                 ") cannot run backward part ", to_string(args.part), ": ", *why);
    }
    // The data part leaves dparams alone, so it may be omitted there.
    if (args.part != BackwardPart::data || !args.dparams.empty())
        check(args.dparams.numel() == param_count(config), "dparams has ", args.dparams.numel(),
              " elements, expected param_count(config) = ", param_count(config));
    check(args.reserve != nullptr,
          "reserve must be the buffer written by a training forward, got null");
    detail::check_buffer(args.reserve, args.reserve_size,
                         reserve_bytes(config, dtype, seq_len, batch), "reserve");
    detail::check_device(args.y, "y", device());
    detail::check_device(args.dy, "dy", device());
    detail::check_device(args.dhn, "dhn", device());
    detail::check_device(args.dcn, "dcn", device());
    detail::check_device(args.dh0, "dh0", device());
    detail::check_device(args.dc0, "dc0", device());
    detail::check_device(args.dx, "dx", device());
    detail::check_device(args.dparams, "dparams", device());
    run_backward(config, args);
}

}  // namespace lstm
