#pragma once

// Optimizers over flat (parameter, gradient) buffer pairs with torch.optim's update rules, so a
// model trained here follows the same trajectory as in PyTorch (up to rounding). Buffers live on
// the host or on a CUDA device (each pair in one memory space, its optimizer state next to it);
// the optimizer only reads the gradients, which belong to whoever registered them. The
// per-element update is the one kernels/cuda/optim.hpp defines for both the CPU loop (compiled in
// the library, kernels/cpu/optim.hpp) and the CUDA kernel.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/optim.hpp"
#include "lstm/buffer.hpp"
#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

#if LSTM_WITH_CUDA
#include "lstm/nn/optim_cuda.hpp"
#endif

namespace lstm::nn {

namespace detail {

// element_bytes: the size of one element of both buffers.
inline void check_buffer_pair(const char* fn, int64_t params_size, const void* params_data,
                              int64_t grads_size, const void* grads_data, size_t element_bytes) {
    check(params_size >= 0, fn, ": params has ", params_size, " elements; sizes must be >= 0");
    check(grads_size == params_size, fn, ": grads has ", grads_size, " elements, but params has ",
          params_size, "; they must match");
    check(params_size == 0 || (params_data != nullptr && grads_data != nullptr), fn,
          ": params or grads has no data for ", params_size, " elements");
    // The update loops are vectorised on the promise that what they write (params) is not what
    // they read (grads).
    const auto p = reinterpret_cast<uintptr_t>(params_data);
    const auto g = reinterpret_cast<uintptr_t>(grads_data);
    const uintptr_t bytes = static_cast<uintptr_t>(params_size) * element_bytes;
    check(params_size == 0 || p + bytes <= g || g + bytes <= p, fn, ": params and grads overlap (",
          params_size, " elements each, ", p < g ? g - p : p - g,
          " bytes apart); they must be separate buffers");
}

// Checks a device-tagged pair: same memory space, and a context for cuda (ordering the updates on
// its stream); returns the device.
template <typename T>
Device check_device_pair(const char* fn, const TensorView<T>& params,
                         const TensorView<const T>& grads, const cuda::Context* context) {
    check_buffer_pair(fn, params.numel(), params.data(), grads.numel(), grads.data(), sizeof(T));
    check(params.device() == grads.device(), fn, ": params is on ", to_string(params.device()),
          " but grads is on ", to_string(grads.device()), "; they must share a device");
    check(params.device() == Device::cpu || context != nullptr, fn,
          ": buffers on cuda need the lstm::cuda::Context that orders their updates, got null");
    return params.device();
}

// A registered (parameter, gradient) pair and where its update runs.
template <typename T>
struct OptimTarget {
    T* params;
    const T* grads;
    int64_t size;
    Device device;
    cuda::Context* context;  // cuda only
};

// A new pair must share no memory with a registered one: a parameter in two pairs would be
// updated twice per step (PyTorch refuses a parameter in two groups), and params over another
// pair's grads would rewrite a gradient the optimizer reads. `registered` holds Entry-like
// objects with a `target` member.
template <typename T, typename Entries>
void check_apart_from_registered(const char* fn, const OptimTarget<T>& t,
                                 const Entries& registered) {
    using lstm::detail::overlaps;
    for (size_t k = 0; k < registered.size(); ++k) {
        const OptimTarget<T>& o = registered[k].target;
        if (o.device != t.device) continue;  // separate memory spaces
        check(!overlaps(t.params, t.size, o.params, o.size), fn,
              ": params overlap the params of "
              "registered buffer ",
              k, "; each parameter may be registered once");
        check(!overlaps(t.params, t.size, o.grads, o.size), fn,
              ": params overlap the grads of "
              "registered buffer ",
              k, "; a step would rewrite a gradient it reads");
        check(!overlaps(t.grads, t.size, o.params, o.size), fn,
              ": grads overlap the params of "
              "registered buffer ",
              k, "; a step would rewrite a gradient it reads");
    }
}

// An optimizer state buffer of `count` elements next to the parameters, zeroed once.
template <typename T>
Buffer zeroed_state(const OptimTarget<T>& target, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    Buffer out(target.device, bytes);
    out.zero(bytes, target.context);
    return out;
}

}  // namespace detail

// What a group of registered buffers sets for itself, as a torch.optim param group overrides its
// optimizer's defaults: its own weight decay (unset: the optimizer's), e.g. 0 to exempt biases
// and norms from decay, and a factor on the optimizer's learning rate (a factor, not an lr, so
// that a schedule's set_lr moves every group together).
struct ParamGroup {
    std::optional<double> weight_decay;
    double lr_scale = 1.0;
};

namespace detail {

inline void check_param_group(const char* fn, const ParamGroup& group) {
    check(!group.weight_decay || *group.weight_decay >= 0, fn,
          ": group.weight_decay must be >= 0, got ", group.weight_decay.value_or(0));
    check(group.lr_scale >= 0 && std::isfinite(group.lr_scale), fn,
          ": group.lr_scale must be finite and >= 0, got ", group.lr_scale);
}

}  // namespace detail

// torch.optim.SGD's hyperparameters (maximize is not supported).
struct SgdOptions {
    double lr = 1e-3;
    double momentum = 0;
    double dampening = 0;
    double weight_decay = 0;
    bool nesterov = false;
};

// Stochastic gradient descent with PyTorch's semantics, per element:
//   d = grad + weight_decay * p
//   with momentum: buf = d on the first step, else buf = momentum * buf + (1 - dampening) * d;
//                  d = nesterov ? d + momentum * buf : buf
//   p -= lr * d
// Hyperparameters are applied in T, as PyTorch casts its Python scalars to the tensor's type.
template <typename T>
class Sgd {
public:
    explicit Sgd(const SgdOptions& options) : options_(options) {
        check(options.lr >= 0, "Sgd: lr must be >= 0, got ", options.lr);
        check(options.momentum >= 0, "Sgd: momentum must be >= 0, got ", options.momentum);
        check(options.weight_decay >= 0, "Sgd: weight_decay must be >= 0, got ",
              options.weight_decay);
        check(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
              "Sgd: nesterov needs momentum > 0 and dampening = 0, got momentum ", options.momentum,
              " and dampening ", options.dampening);
    }

    // Registers a host buffer pair of equal size, params (n) and grads (n), in `group` (the
    // optimizer's own settings by default); allocates its momentum buffer (when momentum is
    // used) here, once, so that step() never allocates. Both buffers must outlive the optimizer.
    void add(Span<T> params, Span<const T> grads, const ParamGroup& group = {}) {
        detail::check_buffer_pair("Sgd::add", params.size, params.data, grads.size, grads.data,
                                  sizeof(T));
        add_target({params.data, grads.data, params.size, Device::cpu, nullptr}, group);
    }

    // Registers a buffer pair on the device its views are tagged with, params (n) and grads (n);
    // the momentum buffer is allocated there. On cuda, `context` orders every update on its
    // stream (step() does not wait) and must outlive the optimizer, as must both buffers.
    void add(TensorView<T> params, TensorView<const T> grads, cuda::Context* context = nullptr,
             const ParamGroup& group = {}) {
        const Device device = detail::check_device_pair("Sgd::add", params, grads, context);
        add_target({params.data(), grads.data(), params.numel(), device, context}, group);
    }

    // Updates every registered buffer once from its current gradients.
    void step() {
        for (Entry& e : entries_) step_entry(e);
    }

    const SgdOptions& options() const { return options_; }
    // Changes the learning rate for the following steps (a schedule), as setting a param group's
    // "lr" does in PyTorch.
    void set_lr(double lr) {
        check(lr >= 0, "Sgd::set_lr: lr must be >= 0, got ", lr);
        options_.lr = lr;
    }
    int64_t buffer_count() const { return static_cast<int64_t>(entries_.size()); }
    // The group registered buffer k (registration order) was added with.
    const ParamGroup& group(int64_t k) const {
        check(k >= 0 && k < buffer_count(), "Sgd::group: buffer ", k, " is not registered (",
              buffer_count(), " are)");
        return entries_[static_cast<size_t>(k)].group;
    }

private:
    struct Entry {
        detail::OptimTarget<T> target;
        Buffer momentum;  // next to the parameters; empty without momentum
        bool started;     // PyTorch seeds the momentum buffer with the first step's d, undamped
        ParamGroup group;
    };

    void add_target(const detail::OptimTarget<T>& target, const ParamGroup& group) {
        detail::check_param_group("Sgd::add", group);
        detail::check_apart_from_registered("Sgd::add", target, entries_);
        const int64_t state = options_.momentum != 0 ? target.size : 0;
        entries_.push_back(Entry{target, detail::zeroed_state(target, state), false, group});
    }

    void step_entry(Entry& e) {
        kernels::SgdCoefficients<T> c;
        c.lr = static_cast<T>(options_.lr * e.group.lr_scale);
        c.weight_decay = static_cast<T>(e.group.weight_decay.value_or(options_.weight_decay));
        c.momentum = static_cast<T>(options_.momentum);
        c.keep = static_cast<T>(1.0 - options_.dampening);
        c.use_momentum = options_.momentum != 0;
        c.nesterov = options_.nesterov;
        c.first = !e.started;
        const int64_t n = e.target.size;
        T* p = e.target.params;
        const T* g = e.target.grads;
        T* buf = c.use_momentum ? e.momentum.template as<T>() : nullptr;
        e.started = true;
        if (e.target.device == Device::cuda) {
#if LSTM_WITH_CUDA
            detail::sgd_step_cuda<T>(*e.target.context, n, p, g, buf, c);
#endif
            return;
        }
        kernels::cpu::sgd_update(n, p, g, buf, c);
    }

    SgdOptions options_;
    std::vector<Entry> entries_;
};

// torch.optim.Adam's hyperparameters (amsgrad and maximize are not supported). weight_decay is
// the L2 term added to the gradient, as in Adam; with decoupled_weight_decay it is AdamW's
// decoupled decay instead (torch.optim.AdamW, Loshchilov & Hutter), whose usual value is 1e-2.
struct AdamOptions {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
    bool decoupled_weight_decay = false;
};

// torch.optim.AdamW's defaults: AdamOptions with decoupled weight decay 1e-2.
inline AdamOptions adamw_options(double lr = 1e-3, double weight_decay = 1e-2) {
    AdamOptions o;
    o.lr = lr;
    o.weight_decay = weight_decay;
    o.decoupled_weight_decay = true;
    return o;
}

// Adam with PyTorch's bias-corrected update, per element, with step count s per buffer:
//   p *= 1 - lr * weight_decay           (AdamW only; d below then has no weight_decay term)
//   d = grad + weight_decay * p
//   m = lerp(m, d, 1 - beta1)            (torch.lerp: m + w (d - m) for w < 0.5, else
//                                         d - (d - m)(1 - w); beta1 m + (1 - beta1) d to rounding)
//   v = beta2 * v + (1 - beta2) * d * d
//   p -= lr / (1 - beta1^s) * m / (sqrt(v) / sqrt(1 - beta2^s) + eps)
// The bias corrections are computed in double, like PyTorch's Python floats; the element math
// runs in T.
template <typename T>
class Adam {
public:
    explicit Adam(const AdamOptions& options = {}) : options_(options) {
        check(options.lr >= 0, "Adam: lr must be >= 0, got ", options.lr);
        check(options.eps >= 0, "Adam: eps must be >= 0, got ", options.eps);
        check(options.beta1 >= 0 && options.beta1 < 1, "Adam: beta1 must be in [0, 1), got ",
              options.beta1);
        check(options.beta2 >= 0 && options.beta2 < 1, "Adam: beta2 must be in [0, 1), got ",
              options.beta2);
        check(options.weight_decay >= 0, "Adam: weight_decay must be >= 0, got ",
              options.weight_decay);
    }

    // Registers a host buffer pair of equal size, params (n) and grads (n), in `group` (the
    // optimizer's own settings by default); allocates its two moment buffers here, once, so that
    // step() never allocates. Each buffer pair keeps its own step count, as PyTorch keeps one
    // per parameter. Both buffers must outlive the optimizer.
    void add(Span<T> params, Span<const T> grads, const ParamGroup& group = {}) {
        detail::check_buffer_pair("Adam::add", params.size, params.data, grads.size, grads.data,
                                  sizeof(T));
        add_target({params.data, grads.data, params.size, Device::cpu, nullptr}, group);
    }

    // Registers a buffer pair on the device its views are tagged with, params (n) and grads (n);
    // the moment buffers are allocated there. On cuda, `context` orders every update on its
    // stream (step() does not wait) and must outlive the optimizer, as must both buffers.
    void add(TensorView<T> params, TensorView<const T> grads, cuda::Context* context = nullptr,
             const ParamGroup& group = {}) {
        const Device device = detail::check_device_pair("Adam::add", params, grads, context);
        add_target({params.data(), grads.data(), params.numel(), device, context}, group);
    }

    // Updates every registered buffer once from its current gradients. Whatever is refused (a
    // step count that cannot grow) is refused before any buffer or count changes.
    void step() {
        check_can_step();
        for (Entry& e : entries_) step_entry(e);
    }

    // Throws what step() would refuse, changing nothing: for a caller that must refuse a whole
    // training step before its first change.
    void check_can_step() const {
        for (const Entry& e : entries_)
            check(e.steps < std::numeric_limits<int64_t>::max(),
                  "Adam::step: a buffer's step count is already ", e.steps,
                  " (set_steps), the largest an int64 holds");
    }

    const AdamOptions& options() const { return options_; }
    // Changes the learning rate for the following steps (a schedule), as setting a param group's
    // "lr" does in PyTorch.
    void set_lr(double lr) {
        check(lr >= 0, "Adam::set_lr: lr must be >= 0, got ", lr);
        options_.lr = lr;
    }
    int64_t buffer_count() const { return static_cast<int64_t>(entries_.size()); }
    // The group registered buffer k (registration order) was added with.
    const ParamGroup& group(int64_t k) const { return entry("Adam::group", k).group; }

    // The state of registered buffer k (registration order), for checkpoints: its step count and
    // its moments m (exp_avg) and v (exp_avg_sq), n elements each, in the buffer's memory space.
    // Restoring all three (and the parameters) resumes the exact trajectory.
    int64_t steps(int64_t k) const { return entry("Adam::steps", k).steps; }
    void set_steps(int64_t k, int64_t steps) {
        check(steps >= 0, "Adam::set_steps: steps must be >= 0, got ", steps);
        entry("Adam::set_steps", k).steps = steps;
    }
    TensorView<T> exp_avg(int64_t k) { return moment(entry("Adam::exp_avg", k), true); }
    TensorView<T> exp_avg_sq(int64_t k) { return moment(entry("Adam::exp_avg_sq", k), false); }

private:
    struct Entry {
        detail::OptimTarget<T> target;
        Buffer exp_avg;     // m, next to the parameters
        Buffer exp_avg_sq;  // v
        int64_t steps;
        ParamGroup group;
    };

    void add_target(const detail::OptimTarget<T>& target, const ParamGroup& group) {
        detail::check_param_group("Adam::add", group);
        detail::check_apart_from_registered("Adam::add", target, entries_);
        entries_.push_back(Entry{target, detail::zeroed_state(target, target.size),
                                 detail::zeroed_state(target, target.size), 0, group});
    }

    Entry& entry(const char* fn, int64_t k) {
        check(k >= 0 && k < buffer_count(), fn, ": buffer ", k, " is not registered (",
              buffer_count(), " are)");
        return entries_[static_cast<size_t>(k)];
    }
    const Entry& entry(const char* fn, int64_t k) const {
        return const_cast<Adam*>(this)->entry(fn, k);
    }
    static TensorView<T> moment(Entry& e, bool first) {
        Buffer& b = first ? e.exp_avg : e.exp_avg_sq;
        return TensorView<T>(b.template as<T>(), {e.target.size}, e.target.device);
    }

    void step_entry(Entry& e) {
        e.steps += 1;
        const kernels::AdamCoefficients<T> c = kernels::adam_coefficients<T>(
            options_.lr * e.group.lr_scale, options_.beta1, options_.beta2, options_.eps,
            e.group.weight_decay.value_or(options_.weight_decay), options_.decoupled_weight_decay,
            e.steps);
        const int64_t n = e.target.size;
        T* p = e.target.params;
        const T* g = e.target.grads;
        T* m = e.exp_avg.template as<T>();
        T* v = e.exp_avg_sq.template as<T>();
        if (e.target.device == Device::cuda) {
#if LSTM_WITH_CUDA
            detail::adam_step_cuda<T>(*e.target.context, n, p, g, m, v, c);
#endif
            return;
        }
        kernels::cpu::adam_update(n, p, g, m, v, c);
    }

    AdamOptions options_;
    std::vector<Entry> entries_;
};

// Compiled once, for float and double, in lstm_variants (lstm/templates.cpp): a program that uses
// them compiles only what the compiler chooses to inline.
extern template class Sgd<float>;
extern template class Sgd<double>;
extern template class Adam<float>;
extern template class Adam<double>;

}  // namespace lstm::nn
