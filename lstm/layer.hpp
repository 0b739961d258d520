#pragma once

// lstm::Lstm: the owning layer training code uses. It holds parameters, gradients, outputs and
// buffers, and runs whichever registered variant was named, so the same training code runs on
// every variant. On Device::cuda every buffer is device memory (lstm::Buffer) and every call is
// queued on one cuda::Context's stream, owned by the layer or borrowed from the caller; nothing of
// it is global.
//
// The layer applies nn.LSTM's options that are not the variant's business (Config::core()):
// batch_first by transposing x and y (and dy, dx) around time-major variant calls, and
// inter-layer dropout by running a training forward one layer at a time with a dropout between
// layers (the masks are kept for backward); without dropout, or in infer(), the whole stack runs
// as one call. A layer-gradients hook (set_layer_gradients_ready) also makes a training forward
// run one call per layer, without dropout's masks, so that backward finishes the layers one at a
// time, top first, and can hand each layer's finished gradient to data-parallel training.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lstm/buffer.hpp"
#include "lstm/detail/fingerprint.hpp"
#include "lstm/detail/layer_ops.hpp"
#include "lstm/detail/random.hpp"
#include "lstm/memory.hpp"
#include "lstm/plan_cache.hpp"
#include "lstm/registry.hpp"

#if LSTM_WITH_CUDA
#include <memory>

#include "lstm/cuda/context.hpp"
#endif

namespace lstm {

// A flat buffer of a layer (parameters or gradients, in parameters() order), tagged with the
// memory space it lives in. On the host it reads like Span<T> (iteration, indexing, conversion to
// Span); device memory cannot be read on the host, so those accessors throw for cuda: hand view()
// to device-aware code, or copy with Lstm::store_parameters() / store_gradients().
template <typename T>
struct FlatSpan {
    T* data = nullptr;
    int64_t size = 0;
    Device device = Device::cpu;

    bool empty() const { return size == 0; }
    T* begin() const { return host_data("begin()"); }
    T* end() const { return host_data("end()") + size; }
    T& operator[](int64_t i) const { return host_data("operator[]")[i]; }
    // The buffer as a rank-1 view (size) tagged with its device.
    TensorView<T> view() const { return TensorView<T>(data, {size}, device); }

    template <typename U,
              typename = std::enable_if_t<std::is_same_v<U, T> || std::is_same_v<U, const T>>>
    operator Span<U>() const {  // NOLINT: host buffers stay usable where a Span was expected
        return {host_data("conversion to Span"), size};
    }
    template <typename U = T, typename = std::enable_if_t<!std::is_const_v<U>>>
    operator FlatSpan<const U>() const {  // NOLINT: read-only views convert freely
        return {data, size, device};
    }

private:
    T* host_data(const char* what) const {
        check(device == Device::cpu, "FlatSpan::", what, ": the buffer lives on ",
              to_string(device),
              " and cannot be read on the host; use view() with device code "
              "or copy it with Lstm::store_parameters() / store_gradients()");
        return data;
    }
};

template <typename T>
class LstmT {
public:
    // A layer on `device`. A cuda layer creates and owns its cuda::Context (device 0).
    LstmT(const Config& config, std::string_view variant = "basic", Device device = Device::cpu)
        : LstmT(config, find_variant(variant, device), nullptr) {}

    // A cuda layer whose calls are queued on the caller's context (which must outlive the
    // layer), so that several layers and the rest of a model share one stream and its handles.
    LstmT(const Config& config, std::string_view variant, cuda::Context& context)
        : LstmT(config, find_variant(variant, Device::cuda), &context) {}

    const Config& config() const { return config_; }
    const Variant& variant() const { return *variant_; }
    Device device() const { return device_; }
    // The context every call is queued on; null on the host.
    cuda::Context* context() const { return context_; }

    // Flat buffers in PyTorch parameters() order (see param_entries()), on device().
    FlatSpan<T> parameters() { return {params_.template as<T>(), count(), device_}; }
    FlatSpan<T> gradients() { return {grads_.template as<T>(), count(), device_}; }
    FlatSpan<const T> parameters() const { return {params_.template as<T>(), count(), device_}; }
    FlatSpan<const T> gradients() const { return {grads_.template as<T>(), count(), device_}; }

    // Copies between the flat buffers and host memory (param_count(config) elements), whatever
    // device() is; they wait for the context's queued work. A load ends the forward a backward
    // could follow: its activations came from the weights replaced.
    void load_parameters(Span<const T> host) {
        check_host_count("load_parameters", host.size);
        params_.copy_from(host.data, Device::cpu, bytes_of(count()), context_);
        trained_ = false;
    }
    // The same for elements [offset, offset + host.size) of the parameters only (host.size
    // values from host memory; overwrites), so that a checkpoint is loaded a piece at a time
    // without a host copy of the whole buffer.
    void load_parameters(Span<const T> host, int64_t offset) {
        check(offset >= 0 && host.size >= 0 && host.size <= count() - offset,
              "Lstm::load_parameters: elements [", offset, ", ", offset + host.size,
              ") are not within the ", count(), " parameters");
        Buffer::copy(params_.template as<T>() + offset, device_, host.data, Device::cpu,
                     bytes_of(host.size), context_);
        trained_ = false;
    }
    void store_parameters(Span<T> host) const {
        check_host_count("store_parameters", host.size);
        params_.copy_to(host.data, Device::cpu, bytes_of(count()), context_);
    }
    void store_gradients(Span<T> host) const {
        check_host_count("store_gradients", host.size);
        grads_.copy_to(host.data, Device::cpu, bytes_of(count()), context_);
    }

    // PyTorch's nn.LSTM initialisation: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)),
    // drawn on the host in parameters() order, so a seed gives the same layer on every device.
    void reset_parameters(uint64_t seed) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
        std::mt19937_64 rng(seed);
        trained_ = false;  // as load_parameters
        if (device_ == Device::cpu) {
            for (T& p : parameters()) p = static_cast<T>(detail::uniform(rng, -bound, bound));
            return;
        }
        std::vector<T> host(static_cast<size_t>(count()));
        for (T& p : host) p = static_cast<T>(detail::uniform(rng, -bound, bound));
        load_parameters(Span<const T>(host));
    }

    // Backward adds into the gradients (PyTorch's .grad semantics); call this between steps. On
    // cuda it is queued on the context's stream.
    void zero_grad() { grads_.zero(bytes_of(count()), context_); }

    // Training forward. x (T, N, I), or (N, T, I) with config.batch_first, on device(); lengths
    // host (N) or empty; h0 (L*D, N, S) and c0 (L*D, N, H) on device() or empty, S =
    // config.state_size(). x (unless batch_first, which copies it), h0 and c0 must stay alive
    // and unchanged until backward() (they are not copied). Returns y (T, N, D*S), or (N, T, D*S)
    // with batch_first, on device(), owned by the layer and valid until the next forward. With
    // config.dropout > 0 and more than one layer, each layer's output but the last's goes
    // through dropout (masks drawn from dropout_seed() and a count of such forwards). On cuda the
    // work is queued on context() and not waited for. N may be 0, as in PyTorch: every output
    // then has its shape and no elements. One sequence may also come unbatched, as PyTorch takes
    // it: x (T, I), h0 (L*D, S), c0 (L*D, H), lengths empty or of one entry; y, hn, cn, and
    // backward's dy, dhn, dcn, dx, dh0, dc0 then drop the batch dimension too, and batch_first
    // does not apply (PyTorch's rule).
    TensorView<const T> forward(TensorView<const T> x, Span<const int64_t> lengths = {},
                                TensorView<const T> h0 = {}, TensorView<const T> c0 = {}) {
        return run(x, lengths, h0, c0, true);
    }

    // Inference forward: no reserve is written, so backward() is not allowed after it, and no
    // dropout (PyTorch's eval mode).
    TensorView<const T> infer(TensorView<const T> x, Span<const int64_t> lengths = {},
                              TensorView<const T> h0 = {}, TensorView<const T> c0 = {}) {
        return run(x, lengths, h0, c0, false);
    }

    TensorView<const T> y() const { return y_out_; }
    TensorView<const T> hn() const { return h_state_view(hn_); }  // (L*D, N, S); unbatched (L*D, S)
    TensorView<const T> cn() const { return c_state_view(cn_); }  // (L*D, N, H); unbatched (L*D, H)

    // dy (T, N, D*S), or (N, T, D*S) with batch_first, on device(); dhn (L*D, N, S) / dcn
    // (L*D, N, H) on device() or empty; after an unbatched forward the same without N. ADDS into
    // gradients(); returns dx (T, N, I) (or (N, T, I); unbatched (T, I)) on device(), or an empty
    // view when compute_dx is false (x is data, as in the first layer of a model: skipping it
    // saves a GEMM over all steps); dh0()/dc0() hold the initial-state gradients afterwards.
    TensorView<const T> backward(TensorView<const T> dy, TensorView<const T> dhn = {},
                                 TensorView<const T> dcn = {}, bool compute_dx = true) {
        check(trained_,
              "Lstm::backward needs a training forward() since the last backward() (got none, "
              "infer(), a backward() that already used this forward, or a forward followed by "
              "load_parameters() or reset_parameters())");
        check_inputs_unchanged();
        const int64_t seq_len = x_.size(0), batch = x_.size(1);
        const int64_t in = config_.input_size, out = config_.output_size();
        if (unbatched_) {
            check_unbatched(dy, "dy", seq_len, out);
            check_unbatched(dhn, "dhn", config_.num_cells(), config_.state_size());
            check_unbatched(dcn, "dcn", config_.num_cells(), config_.hidden_size);
            dy = with_batch_of_one(dy);
            dhn = with_batch_of_one(dhn);
            dcn = with_batch_of_one(dcn);
        }
        const bool bf = batch_major();
        check_layer_tensor(dy, "dy", seq_len, batch, out, bf);
        check_states(dhn, dcn, "dhn", "dcn", batch);
        if (batch == 0) {  // after run_without_sequences: nothing to add, dx without elements
            trained_ = false;
            if (!compute_dx) return TensorView<const T>();
            return bf ? TensorView<const T>(dx_.template as<T>(), {0, seq_len, in}, device_)
                      : TensorView<const T>(dx_.template as<T>(), {seq_len, 0, in}, device_);
        }
        reserve_backward_buffers(compute_dx);
        TensorView<const T> dy_run = dy;
        if (bf) {
            T* dst = static_cast<T*>(dy_tm_.reserve(bytes_of(seq_len * batch * out)));
            detail::swap_leading_dims(device_, context_, batch, seq_len, out, dy.data(), dst);
            dy_run = TensorView<const T>(dst, {seq_len, batch, out}, device_);
        }
        const TensorView<T> dx =
            compute_dx ? TensorView<T>(dx_.template as<T>(), {seq_len, batch, in}, device_)
                       : TensorView<T>();
        // One backward per training forward, as in PyTorch: the variants write their gate
        // gradients over the activations the forward kept in the reserve, so a second backward
        // would read gradients as activations and return wrong numbers without a word.
        trained_ = false;
        backward_calls(dy_run, dhn, dcn, dx);
        if (!compute_dx) return TensorView<const T>();
        if (unbatched_) return TensorView<const T>(dx.data(), {seq_len, in}, device_);
        if (!bf) return dx;
        T* dst = static_cast<T*>(dx_bf_.reserve(bytes_of(seq_len * batch * in)));
        detail::swap_leading_dims(device_, context_, seq_len, batch, in, dx.data(), dst);
        return TensorView<const T>(dst, {batch, seq_len, in}, device_);
    }

    // Sizes (and checks against the memory limit) every buffer the backward() of the last
    // training forward will write, without computing anything: a caller that must not change
    // any state when memory runs out (SequenceModel's step) asks before it zeroes gradients.
    // backward() does the same itself; after this call its request adds nothing.
    void reserve_backward(bool compute_dx = true) {
        check(trained_,
              "Lstm::reserve_backward needs a training forward() since the last "
              "backward()");
        if (batch_ > 0) reserve_backward_buffers(compute_dx);
    }

    TensorView<const T> dh0() const { return h_state_view(dh0_); }  // as hn()
    TensorView<const T> dc0() const { return c_state_view(dc0_); }  // as cn()

    // Dropout masks are drawn from (seed, number of dropout forwards so far, layer, element), so
    // a seed and a count reproduce them exactly; checkpoints save both. The seed starts at 0.
    uint64_t dropout_seed() const { return dropout_seed_; }
    uint64_t dropout_count() const { return dropout_count_; }
    void set_dropout_state(uint64_t seed, uint64_t count = 0) {
        dropout_seed_ = seed;
        dropout_count_ = count;
    }
    // The mask of the last training forward after layer `layer` (0 .. L-2): (T, N, D*S) time-
    // major, each element 0 or 1 / (1 - dropout), on device(). Empty when that forward ran
    // without dropout.
    TensorView<const T> dropout_mask(int64_t layer) const {
        if (!dropped_) return {};
        check(layer >= 0 && layer + 1 < config_.num_layers, "dropout_mask: layer must be in 0..",
              config_.num_layers - 2, ", got ", layer);
        return TensorView<const T>(stage(layer, Stage::mask), {x_.size(0), x_.size(1), out_width()},
                                   device_);
    }

    // Called by backward() once per layer, top layer first, as soon as that layer's gradients are
    // final (on cuda: queued on context()): elements [layer_param_offset(config, layer),
    // layer_param_offset(config, layer + 1)) of gradients(), which the layers below never touch,
    // so data-parallel training (lstm/dist/) can start their allreduce while the layers below run
    // backward. While a hook is set, a training forward of a multi-layer stack runs one variant
    // call per layer (the dropout path, with or without dropout), since a whole-stack call
    // finishes every layer's gradient only at its end; the per-layer calls are the same math, not
    // the same rounding for every variant (within the tolerance rule). The hook must not touch
    // this layer. Empty (the default): whole-stack calls as without it, nothing is called.
    void set_layer_gradients_ready(std::function<void(int64_t layer)> hook) {
        layer_gradients_ready_ = std::move(hook);
    }

    // The variant path this layer's calls take (one of variant().paths(dtype); see Variant):
    // empty, the default, lets the variant choose when it makes a plan. Throws lstm::Unsupported
    // for a path this host cannot take, and then keeps the previous one.
    void set_path(std::string path) {
        if (!path.empty()) {
            const std::vector<std::string> known = variant_->paths(dtype_of<T>());
            if (std::find(known.begin(), known.end(), path) == known.end()) {
                std::string list;
                for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
                fail_as<Unsupported>("Lstm::set_path: variant '", variant_->name(),
                                     "' has no path '", path, "' for ", to_string(dtype_of<T>()),
                                     " on this host; it has: ", list);
            }
        }
        path_ = std::move(path);
    }
    const std::string& path() const { return path_; }

    // What this layer's products compute in (lstm/tensor.hpp's Precision, docs/precision.md), as
    // PyTorch's autocast chooses it: parameters, gradients and every tensor this layer takes and
    // returns stay in T (the fp32 masters a checkpoint saves); Precision::bf16 rounds the
    // operands of the products inside each call. Throws lstm::Unsupported where the variant has
    // no such path for this config and dtype, and then keeps the previous one.
    void set_precision(Precision precision) {
        variant_->require_precision(core_, dtype_of<T>(), precision);
        precision_ = precision;
    }
    Precision precision() const { return precision_; }
    // The plans this layer made (one per call shape it ran), least recently used dropped first.
    const PlanCache& plans() const { return plans_; }

    // Bytes of the buffers the last forward needed (reserve + workspace of the training step).
    size_t workspace_bytes() const { return workspace_need_; }
    size_t reserve_bytes() const { return reserve_need_; }

private:
    LstmT(const Config& config, const Variant& variant, cuda::Context* borrowed)
        : config_(config),
          core_(config.core()),
          variant_(&variant),
          device_(variant.device()),
          context_(borrowed),
          params_(device_),
          grads_(device_),
          y_(device_),
          hn_(device_),
          cn_(device_),
          dx_(device_),
          dh0_(device_),
          dc0_(device_),
          workspace_(device_),
          reserve_(device_),
          x_tm_(device_),
          y_bf_(device_),
          dy_tm_(device_),
          dx_bf_(device_),
          stages_(device_),
          d_mid_(device_) {
        config_.validate();
        variant_->require(core_, dtype_of<T>(), false);
        if (device_ == Device::cuda) {
#if LSTM_WITH_CUDA
            if (context_ == nullptr) {
                owned_context_ = std::make_unique<cuda::Context>();
                context_ = owned_context_.get();
            }
#else
            fail_as<Unsupported>(
                "Lstm on device cuda: this build has no CUDA back-end (LSTM_WITH_CUDA=0)");
#endif
        }
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("parameters", bytes_of({count()}))
                .add("gradients", bytes_of({count()}))
                .check([&] { return "Lstm (" + std::to_string(count()) + " parameters)"; });
        layer_reserve_offset_.assign(static_cast<size_t>(config_.num_layers), 0);
        next_reserve_offset_.assign(static_cast<size_t>(config_.num_layers), 0);
        params_.reserve(bytes_of(count()));
        grads_.reserve(bytes_of(count()));
        zero_grad();
        reset_parameters(0);
    }

    TensorView<const T> run(TensorView<const T> x, Span<const int64_t> lengths,
                            TensorView<const T> h0, TensorView<const T> c0, bool training) {
        if (x.rank() == 2) return run_unbatched(x, lengths, h0, c0, training);
        check(x.rank() == 3, "x must have rank 3 (", config_.batch_first ? "N, T, I" : "T, N, I",
              ") or 2 (T, I: one unbatched sequence), got shape ", x.shape_string());
        return run_batched(x, lengths, h0, c0, training, false);
    }

    // One sequence without its batch dimension: the batched run at N = 1, time-major whatever
    // batch_first says ((T, 1, I) and (1, T, I) are the same memory), outputs viewed without N.
    TensorView<const T> run_unbatched(TensorView<const T> x, Span<const int64_t> lengths,
                                      TensorView<const T> h0, TensorView<const T> c0,
                                      bool training) {
        check(x.size(0) >= 1, "x: T (x.size(0)) must be >= 1, got ", x.size(0));
        check_unbatched(x, "x", x.size(0), config_.input_size);
        check_unbatched(h0, "h0", config_.num_cells(), config_.state_size());
        check_unbatched(c0, "c0", config_.num_cells(), config_.hidden_size);
        const TensorView<const T> y =
            run_batched(with_batch_of_one(x), lengths, with_batch_of_one(h0), with_batch_of_one(c0),
                        training, true);
        y_out_ = TensorView<const T>(y.data(), {y.size(0), y.size(2)}, device_);
        return y_out_;
    }

    // x (T, N, I), or (N, T, I) when batch_first and not unbatched; see forward().
    TensorView<const T> run_batched(TensorView<const T> x, Span<const int64_t> lengths,
                                    TensorView<const T> h0, TensorView<const T> c0, bool training,
                                    bool unbatched) {
        const bool bf = config_.batch_first && !unbatched;
        const int64_t seq_len = bf ? x.size(1) : x.size(0), batch = bf ? x.size(0) : x.size(1);
        const int64_t in = config_.input_size, out = config_.output_size();
        check(seq_len >= 1, "x: T (x.size(", bf ? 1 : 0, ")) must be >= 1, got ", seq_len);
        check_layer_tensor(x, "x", seq_len, batch, in, bf);
        check_states(h0, c0, "h0", "c0", batch);
        if (batch == 0) {
            detail::check_lengths(lengths, seq_len, batch);
            return run_without_sequences(x, h0, c0, seq_len, training);
        }
        const int64_t layers = config_.num_layers;
        const bool dropped = training && config_.dropout > 0.0 && layers > 1;
        const bool staged = dropped || (training && layers > 1 && layer_gradients_ready_);
        // Stage planes per layer below the top: without dropout only the layer's output.
        const int64_t planes = dropped ? kDroppedPlanes : 1;
        // Per-layer calls (dropout, or the layer-gradients hook): the largest layer's workspace,
        // every layer's reserve back to back, each from a 64-byte boundary as the variants carve
        // from one.
        // Into locals and a spare offset table first: a refused forward must leave the last
        // forward's bookkeeping as it was, since its backward() may still come.
        size_t workspace_need = 0, reserve_need = 0;
        for (int64_t l = 0; l < (staged ? layers : 1); ++l) {
            const Config cl = staged ? core_.single_layer(l) : core_;
            workspace_need = std::max(workspace_need, plan(cl, seq_len, batch)->workspace_bytes());
            next_reserve_offset_[static_cast<size_t>(l)] = reserve_need;
            if (training) {
                const size_t bytes = plan(cl, seq_len, batch)->reserve_bytes();
                reserve_need += staged ? round_up(bytes, kReserveAlign) : bytes;
            }
        }
        const int64_t h_elems = config_.num_cells() * batch * config_.state_size();
        const int64_t c_elems = config_.num_cells() * batch * config_.hidden_size;
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("y", bytes_of({seq_len, batch, out}), y_.size())
                .add("hn", bytes_of({h_elems}), hn_.size())
                .add("cn", bytes_of({c_elems}), cn_.size())
                .add("workspace", workspace_need, workspace_.size())
                .add("reserve", reserve_need, reserve_.size())
                .add("x (time-major copy)", bf ? bytes_of({seq_len, batch, in}) : 0, x_tm_.size())
                .add("y (batch-first copy)", bf ? bytes_of({seq_len, batch, out}) : 0, y_bf_.size())
                .add("layer stages",
                     staged ? bytes_of({planes, layers - 1, seq_len, batch, out}) : 0,
                     stages_.size())
                .check([&] {
                    return describe(training ? "Lstm::forward" : "Lstm::infer", seq_len, batch);
                });
        y_.reserve(bytes_of(seq_len * batch * out));
        hn_.reserve(bytes_of(h_elems));
        cn_.reserve(bytes_of(c_elems));
        workspace_.reserve(workspace_need);
        reserve_.reserve(reserve_need);
        TensorView<const T> x_run = x;
        if (bf) {
            T* dst = static_cast<T*>(x_tm_.reserve(bytes_of(seq_len * batch * in)));
            detail::swap_leading_dims(device_, context_, batch, seq_len, in, x.data(), dst);
            x_run = TensorView<const T>(dst, {seq_len, batch, in}, device_);
        }
        trained_ = false;
        staged_ = false;
        dropped_ = false;
        unbatched_ = unbatched;
        workspace_need_ = workspace_need;
        reserve_need_ = reserve_need;
        layer_reserve_offset_.swap(next_reserve_offset_);
        x_ = x_run;
        lengths_.assign(lengths.begin(), lengths.end());
        h0_ = h0;
        c0_ = c0;
        batch_ = batch;
        y_view_ = TensorView<T>(y_.template as<T>(), {seq_len, batch, out}, device_);
        if (staged) stages_.reserve(bytes_of(planes * (layers - 1) * seq_len * batch * out));
        staged_ = staged;
        dropped_ = dropped;
        forward_calls(lengths, training);
        if (dropped) ++dropout_count_;
        trained_ = training;
        if (training) inputs_print_ = inputs_fingerprint();
        y_out_ = y_view_;
        if (bf) {
            T* dst = static_cast<T*>(y_bf_.reserve(bytes_of(seq_len * batch * out)));
            detail::swap_leading_dims(device_, context_, seq_len, batch, out, y_view_.data(), dst);
            y_out_ = TensorView<const T>(dst, {batch, seq_len, out}, device_);
        }
        return y_out_;
    }

    // N = 0, which PyTorch allows: outputs of the right shapes and no elements, and no variant
    // call (their sizing queries need N >= 1); the backward that may follow adds nothing.
    TensorView<const T> run_without_sequences(TensorView<const T> x, TensorView<const T> h0,
                                              TensorView<const T> c0, int64_t seq_len,
                                              bool training) {
        const int64_t in = config_.input_size, out = config_.output_size();
        staged_ = false;
        dropped_ = false;
        unbatched_ = false;  // an unbatched x has N = 1
        x_ = TensorView<const T>(x.data(), {seq_len, 0, in}, device_);
        lengths_.clear();
        h0_ = h0;
        c0_ = c0;
        batch_ = 0;
        y_view_ = TensorView<T>(y_.template as<T>(), {seq_len, 0, out}, device_);
        y_out_ = batch_major() ? TensorView<const T>(y_view_.data(), {0, seq_len, out}, device_)
                               : TensorView<const T>(y_view_);
        trained_ = training;
        if (training) inputs_print_ = inputs_fingerprint();
        return y_out_;
    }

    // A step is one variant call for the whole stack, or, with dropout or the layer-gradients
    // hook (staged_), one call per layer. Call k runs layers [k * call_layers(), (k + 1) *
    // call_layers()) with config call_config(k), on the matching slices of every layer-indexed
    // buffer.
    int64_t call_count() const { return staged_ ? config_.num_layers : 1; }
    int64_t call_layers() const { return staged_ ? 1 : config_.num_layers; }
    Config call_config(int64_t k) const { return staged_ ? core_.single_layer(k) : core_; }

    // Forward over x_ (time-major), h0_, c0_ into y_view_, hn_, cn_. Call k reads x_ (k = 0) or
    // the (with dropout: dropped-out) output of call k - 1 and writes its own stage (the last
    // call writes y_view_); the stages and masks stay in stages_ for backward.
    void forward_calls(Span<const int64_t> lengths, bool training) {
        const int64_t calls = call_count(), seq_len = x_.size(0), count = call_layers();
        for (int64_t k = 0; k < calls; ++k) {
            const Config ck = call_config(k);
            ForwardArgs<T> a;
            a.x = k == 0 ? x_ : stage_view(k - 1, next_input());
            a.lengths = lengths;
            a.h0 = caller_slice(h0_, k, count, config_.state_size());
            a.c0 = caller_slice(c0_, k, count, config_.hidden_size);
            a.params = layer_params(parameters().data, k, ck);
            a.y = k + 1 == calls ? y_view_ : stage_view_mut(k, Stage::output);
            a.hn = state_slice(hn_, k, count, config_.state_size());
            a.cn = state_slice(cn_, k, count, config_.hidden_size);
            a.workspace = workspace_.data();
            a.workspace_size = workspace_.size();
            const std::shared_ptr<const Plan> p = plan(ck, seq_len, batch_);
            a.reserve = training ? layer_reserve(k) : nullptr;
            a.reserve_size = training ? p->reserve_bytes() : 0;
            a.context = context_;
            p->forward(a);
            if (dropped_ && k + 1 < calls)
                detail::dropout(device_, context_, seq_len * batch_ * out_width(), dropout_key(k),
                                config_.dropout, stage(k, Stage::output), stage(k, Stage::mask),
                                stage(k, Stage::dropped));
        }
    }

    // Backward of forward_calls, last call first: with dropout, each layer's input gradient goes
    // back through the mask below it (in place) to become the output gradient of that layer.
    // After call k the gradients of its layers are final: the hook hears of them, top first.
    void backward_calls(TensorView<const T> dy, TensorView<const T> dhn, TensorView<const T> dcn,
                        TensorView<T> dx) {
        const int64_t calls = call_count(), seq_len = x_.size(0), count = call_layers();
        const int64_t plane = seq_len * batch_ * out_width();
        if (staged_) d_mid_.reserve(bytes_of(2 * plane));
        TensorView<const T> d_out = dy;
        for (int64_t k = calls - 1; k >= 0; --k) {
            const Config ck = call_config(k);
            // Two halves alternate, so a call's dx never aliases its dy.
            T* d_in = k > 0 ? d_mid_.template as<T>() + (k % 2) * plane : nullptr;
            BackwardArgs<T> a;
            a.x = k == 0 ? x_ : stage_view(k - 1, next_input());
            a.lengths = Span<const int64_t>(lengths_);
            a.h0 = caller_slice(h0_, k, count, config_.state_size());
            a.c0 = caller_slice(c0_, k, count, config_.hidden_size);
            a.params = layer_params(parameters().data, k, ck);
            a.y = k + 1 == calls ? TensorView<const T>(y_view_) : stage_view(k, Stage::output);
            a.dy = d_out;
            a.dhn = caller_slice(dhn, k, count, config_.state_size());
            a.dcn = caller_slice(dcn, k, count, config_.hidden_size);
            a.dx = k > 0 ? TensorView<T>(d_in, {seq_len, batch_, out_width()}, device_) : dx;
            a.dh0 = state_slice(dh0_, k, count, config_.state_size());
            a.dc0 = state_slice(dc0_, k, count, config_.hidden_size);
            a.dparams = layer_params(gradients().data, k, ck);
            a.workspace = workspace_.data();
            a.workspace_size = workspace_.size();
            const std::shared_ptr<const Plan> p = plan(ck, seq_len, batch_);
            a.reserve = layer_reserve(k);
            a.reserve_size = p->reserve_bytes();
            a.context = context_;
            p->backward(a);
            if (layer_gradients_ready_)
                for (int64_t l = (k + 1) * count - 1; l >= k * count; --l)
                    layer_gradients_ready_(l);
            if (k == 0) break;
            if (dropped_)
                detail::multiply(device_, context_, plane, d_in, stage(k - 1, Stage::mask), d_in);
            d_out = TensorView<const T>(d_in, {seq_len, batch_, out_width()}, device_);
        }
    }

    // Fingerprint of the host x, h0, c0 the layer keeps views of (0 on cuda: the layer does not
    // read device memory back for this).
    uint64_t inputs_fingerprint() const {
        if (device_ != Device::cpu) return 0;
        uint64_t print = 0;
        for (const TensorView<const T>* v : {&x_, &h0_, &c0_})
            print = print * 31 +
                    (v->empty() ? 0 : detail::fingerprint(v->data(), bytes_of(v->numel())));
        return print;
    }
    // Backward reads x, h0 and c0 again through the views forward kept; a caller that freed,
    // reused or overwrote them would get gradients of other data without any sign, so on the
    // host the layer compares their fingerprint with forward's.
    void check_inputs_unchanged() const {
        check(inputs_fingerprint() == inputs_print_,
              "Lstm::backward: x, h0 or c0 changed since forward() (their contents differ from "
              "what forward read). The layer keeps views of them, not copies: keep them alive and "
              "unchanged until backward() (a buffer freed and reused in between shows up here)");
    }

    // The backward buffers of the last training forward's shape, checked as one request first.
    void reserve_backward_buffers(bool compute_dx) {
        const int64_t seq_len = x_.size(0), batch = x_.size(1);
        const int64_t in = config_.input_size, out = config_.output_size();
        const bool bf = batch_major();
        const int64_t h_elems = config_.num_cells() * batch * config_.state_size();
        const int64_t c_elems = config_.num_cells() * batch * config_.hidden_size;
        if (device_ == Device::cpu)
            MemoryRequest()
                .add("dx", compute_dx ? bytes_of({seq_len, batch, in}) : 0, dx_.size())
                .add("dh0", bytes_of({h_elems}), dh0_.size())
                .add("dc0", bytes_of({c_elems}), dc0_.size())
                .add("dy (time-major copy)", bf ? bytes_of({seq_len, batch, out}) : 0,
                     dy_tm_.size())
                .add("dx (batch-first copy)", bf && compute_dx ? bytes_of({seq_len, batch, in}) : 0,
                     dx_bf_.size())
                .add("layer gradients", staged_ ? bytes_of({2, seq_len, batch, out}) : 0,
                     d_mid_.size())
                .check([&] { return describe("Lstm::backward", seq_len, batch); });
        // Without dx the variants get an empty view and write none, so no buffer is sized for it
        // (a model's first layer never wants it: 15 MiB on Braun's CE-long shape).
        if (compute_dx) dx_.reserve(bytes_of(seq_len * batch * in));
        dh0_.reserve(bytes_of(h_elems));
        dc0_.reserve(bytes_of(c_elems));
        if (bf) dy_tm_.reserve(bytes_of(seq_len * batch * out));
        if (bf && compute_dx) dx_bf_.reserve(bytes_of(seq_len * batch * in));
        if (staged_) d_mid_.reserve(bytes_of(2 * seq_len * batch * out));
    }

    // What stages_ holds per layer below the top, each (T, N, D*S): the layer's own output, and
    // with dropout its mask and the masked output the next layer reads (without, only the output).
    enum class Stage { output = 0, mask = 1, dropped = 2 };
    static constexpr int64_t kDroppedPlanes = 3;
    Stage next_input() const { return dropped_ ? Stage::dropped : Stage::output; }
    T* stage(int64_t layer, Stage which) const {
        const int64_t plane = x_.size(0) * batch_ * out_width();
        const int64_t planes = dropped_ ? kDroppedPlanes : 1;
        return stages_.template as<T>() + (planes * layer + static_cast<int64_t>(which)) * plane;
    }
    TensorView<const T> stage_view(int64_t layer, Stage which) const {
        return TensorView<const T>(stage(layer, which), {x_.size(0), batch_, out_width()}, device_);
    }
    TensorView<T> stage_view_mut(int64_t layer, Stage which) {
        return TensorView<T>(stage(layer, which), {x_.size(0), batch_, out_width()}, device_);
    }
    // Layer `layer`'s mask key: every (seed, forward count, layer) gets its own stream.
    uint64_t dropout_key(int64_t layer) const {
        using kernels::splitmix64;
        return splitmix64(splitmix64(dropout_seed_) ^
                          (dropout_count_ * static_cast<uint64_t>(config_.num_layers) +
                           static_cast<uint64_t>(layer)));
    }
    void* layer_reserve(int64_t layer) {
        return static_cast<unsigned char*>(reserve_.data()) +
               layer_reserve_offset_[static_cast<size_t>(layer)];
    }
    // Call k's slice of a flat parameter or gradient buffer (param_count(config) elements): the
    // parameters of its layers, laid out as `config` (call_config(k)) expects.
    TensorView<T> layer_params(T* flat, int64_t k, const Config& config) const {
        return TensorView<T>(flat + layer_param_offset(config_, k * call_layers()),
                             {param_count(config)}, device_);
    }
    // Cells of layers [layer, layer + count) of a (L*D, N, width) state given by the caller;
    // empty stays empty.
    TensorView<const T> caller_slice(TensorView<const T> v, int64_t layer, int64_t count,
                                     int64_t width) const {
        if (v.empty()) return v;
        const int64_t dirs = config_.num_directions();
        return TensorView<const T>(v.data() + layer * dirs * batch_ * width,
                                   {count * dirs, batch_, width}, device_);
    }
    // Cells [layer * D, (layer + count) * D) of a layer-owned (L*D, N, width) state buffer.
    TensorView<T> state_slice(Buffer& b, int64_t layer, int64_t count, int64_t width) {
        const int64_t dirs = config_.num_directions();
        return TensorView<T>(b.template as<T>() + layer * dirs * batch_ * width,
                             {count * dirs, batch_, width}, device_);
    }
    int64_t out_width() const { return config_.output_size(); }

    // Checks a caller's x / dy: (T, N, F), or (N, T, F) when batch_major, in the layer's memory
    // space (the variant would check its time-major copy, whose message would not name the
    // caller's layout).
    void check_layer_tensor(TensorView<const T> v, const char* name, int64_t seq_len, int64_t batch,
                            int64_t features, bool batch_major) const {
        // Data may be null only where there are no elements (N = 0).
        check(!v.empty() || (v.rank() == 3 && v.numel() == 0), name,
              " must be given, got an empty view");
        if (batch_major)
            check_shape(v, name, {batch, seq_len, features});
        else
            check_shape(v, name, {seq_len, batch, features});
        check(v.device() == device_, name, " lives on ", to_string(v.device()),
              " but the layer runs on ", to_string(device_));
    }
    // h-like (L*D, N, S) and c-like (L*D, N, H) states given by the caller, or empty.
    void check_states(TensorView<const T> h, TensorView<const T> c, const char* h_name,
                      const char* c_name, int64_t batch) const {
        if (!h.empty()) {
            check_shape(h, h_name, {config_.num_cells(), batch, config_.state_size()});
            check(h.device() == device_, h_name, " lives on ", to_string(h.device()),
                  " but the layer runs on ", to_string(device_));
        }
        if (!c.empty()) {
            check_shape(c, c_name, {config_.num_cells(), batch, config_.hidden_size});
            check(c.device() == device_, c_name, " lives on ", to_string(c.device()),
                  " but the layer runs on ", to_string(device_));
        }
    }
    // An unbatched caller's (rows, cols) tensor, or empty (check_layer_tensor then refuses an
    // empty x or dy). A batched one here means the caller mixed the two forms, so the message
    // says which form the call is in.
    void check_unbatched(TensorView<const T> v, const char* name, int64_t rows,
                         int64_t cols) const {
        if (v.empty() || v.has_shape({rows, cols})) return;
        fail(name, ": for one unbatched sequence (x of shape (T, I)) ", name, " must have shape (",
             rows, ", ", cols, "), got ", v.shape_string());
    }
    // (rows, cols) viewed as (rows, 1, cols); empty stays empty.
    TensorView<const T> with_batch_of_one(TensorView<const T> v) const {
        if (v.empty()) return v;
        return TensorView<const T>(v.data(), {v.size(0), 1, v.size(1)}, v.device());
    }
    // Whether the caller's x, y, dy and dx are (N, T, F): batch_first, unless unbatched.
    bool batch_major() const { return config_.batch_first && !unbatched_; }
    static size_t round_up(size_t bytes, size_t align) {
        return (bytes + align - 1) / align * align;
    }
    // Variants carve their reserve from a 64-byte boundary (a cache line; AVX-512 loads).
    static constexpr size_t kReserveAlign = 64;

    int64_t count() const { return param_count(config_); }
    static size_t bytes_of(int64_t elements) { return static_cast<size_t>(elements) * sizeof(T); }
    // The same for a product of sizes, kUnknownMemory on overflow (for MemoryRequest).
    static uint64_t bytes_of(std::initializer_list<int64_t> sizes) {
        return MemoryRequest::bytes(sizes, sizeof(T));
    }
    // "Lstm::forward (fused, T 100, N 32, H 256)", naming a call in a memory error.
    std::string describe(const char* call, int64_t seq_len, int64_t batch) const {
        return std::string(call) + " (" + variant_->name() + ", T " + std::to_string(seq_len) +
               ", N " + std::to_string(batch) + ", H " + std::to_string(config_.hidden_size) + ")";
    }
    void check_host_count(const char* fn, int64_t size) const {
        check(size == count(), "Lstm::", fn, ": the host buffer has ", size,
              " elements, expected param_count(config) = ", count());
    }
    TensorView<const T> h_state_view(const Buffer& b) const {
        return state_view(b, config_.state_size());
    }
    TensorView<const T> c_state_view(const Buffer& b) const {
        return state_view(b, config_.hidden_size);
    }
    // The plan of one variant call of `config` (core_ or one of its layers) on (T, N).
    std::shared_ptr<const Plan> plan(const Config& config, int64_t seq_len, int64_t batch) const {
        const PlanRequest request{config, dtype_of<T>(), seq_len,   batch,
                                  path_,  context_,      precision_};
        return plans_.get(*variant_, request);
    }

    TensorView<const T> state_view(const Buffer& b, int64_t width) const {
        if (unbatched_)
            return TensorView<const T>(b.template as<T>(), {config_.num_cells(), width}, device_);
        return TensorView<const T>(b.template as<T>(), {config_.num_cells(), batch_, width},
                                   device_);
    }

    Config config_;
    Config core_;  // what the variant runs: config_ without batch_first and dropout
    const Variant* variant_;
    Device device_;
    cuda::Context* context_;                 // the owned or the borrowed one; null on the host
    std::string path_;                       // see set_path
    Precision precision_ = Precision::full;  // see set_precision
#if LSTM_WITH_CUDA
    // Declared before the plans and the buffers, so it is destroyed after them (a CUDA plan
    // holds graphs and descriptors made on the context).
    std::unique_ptr<cuda::Context> owned_context_;
#endif
    mutable PlanCache plans_;
    Buffer params_, grads_;
    Buffer y_, hn_, cn_, dx_, dh0_, dc0_;
    Buffer workspace_, reserve_;
    Buffer x_tm_, y_bf_, dy_tm_, dx_bf_;  // batch_first: the time-major / batch-first copies
    Buffer stages_, d_mid_;  // per-layer calls: outputs (and dropout masks), their gradients
    std::vector<int64_t> lengths_;
    std::vector<size_t> layer_reserve_offset_;  // L entries, sized once by the constructor
    std::vector<size_t> next_reserve_offset_;   // the same, filled by a forward before it commits
    size_t workspace_need_ = 0, reserve_need_ = 0;
    TensorView<const T> x_, h0_, c0_;  // time-major x (the caller's or x_tm_) and the states
    TensorView<T> y_view_;             // time-major y in y_
    TensorView<const T> y_out_;        // what forward returned: y_view_ or its batch-first copy
    int64_t batch_ = 0;
    uint64_t dropout_seed_ = 0, dropout_count_ = 0;
    uint64_t inputs_print_ = 0;  // inputs_fingerprint() of the last training forward
    bool trained_ = false;
    bool staged_ = false;     // the last training forward ran layer by layer (dropout or hook)
    bool dropped_ = false;    // ... and applied dropout between the layers
    bool unbatched_ = false;  // the last forward took x (T, I): outputs and gradients drop N
    std::function<void(int64_t)> layer_gradients_ready_;  // see set_layer_gradients_ready
};

using Lstm = LstmT<float>;

// Compiled once, for float and double, in lstm_variants (lstm/templates.cpp): a program that uses
// them compiles only what the compiler chooses to inline.
extern template class LstmT<float>;
extern template class LstmT<double>;

}  // namespace lstm
