#pragma once

// Optimizers over flat (parameter, gradient) buffer pairs with torch.optim's update rules, so a
// model trained here follows the same trajectory as in PyTorch (up to rounding). Buffers live on
// the host; the optimizer only reads the gradients, which belong to whoever registered them.

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/tensor.hpp"

namespace lstm::nn {

namespace detail {

// Below this many elements an OpenMP team costs more than the update it would split. The pragmas
// are guarded so that a consumer built without OpenMP gets a serial loop and no warning.
constexpr int64_t kOptimParallelMin = int64_t(1) << 15;

inline void check_buffer_pair(const char* fn, int64_t params_size, const void* params_data,
                              int64_t grads_size, const void* grads_data) {
    check(grads_size == params_size, fn, ": grads has ", grads_size, " elements, but params has ",
          params_size, "; they must match");
    check(params_size == 0 || (params_data != nullptr && grads_data != nullptr), fn,
          ": params or grads has no data for ", params_size, " elements");
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

    // Registers a host buffer pair of equal size; allocates its momentum buffer (when momentum is
    // used) here, once, so that step() never allocates. Both buffers must outlive the optimizer.
    void add(Span<T> params, Span<const T> grads) {
        detail::check_buffer_pair("Sgd::add", params.size, params.data, grads.size, grads.data);
        Entry entry{params, grads, {}, false};
        if (options_.momentum != 0) entry.momentum.assign(static_cast<size_t>(params.size), T(0));
        entries_.push_back(std::move(entry));
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

private:
    struct Entry {
        Span<T> params;
        Span<const T> grads;
        std::vector<T> momentum;
        bool started;  // PyTorch seeds the momentum buffer with the first step's d, undamped
    };

    void step_entry(Entry& e) {
        const int64_t n = e.params.size;
        T* p = e.params.data;
        const T* g = e.grads.data;
        const T lr = static_cast<T>(options_.lr);
        const T wd = static_cast<T>(options_.weight_decay);
        const T mu = static_cast<T>(options_.momentum);
        const T keep = static_cast<T>(1.0 - options_.dampening);
        const bool use_momentum = options_.momentum != 0, nesterov = options_.nesterov;
        const bool first = !e.started;
        T* buf = use_momentum ? e.momentum.data() : nullptr;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n >= detail::kOptimParallelMin)
#endif
        for (int64_t i = 0; i < n; ++i) {
            T d = g[i];
            if (wd != T(0)) d += wd * p[i];
            if (use_momentum) {
                buf[i] = first ? d : mu * buf[i] + keep * d;
                d = nesterov ? d + mu * buf[i] : buf[i];
            }
            p[i] -= lr * d;
        }
        e.started = true;
    }

    SgdOptions options_;
    std::vector<Entry> entries_;
};

// torch.optim.Adam's hyperparameters (amsgrad, maximize and decoupled weight decay are not
// supported; weight_decay is the L2 term added to the gradient, as in Adam, not AdamW).
struct AdamOptions {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
};

// Adam with PyTorch's bias-corrected update, per element, with step count s per buffer:
//   d = grad + weight_decay * p
//   m = m + (1 - beta1) * (d - m)        (PyTorch's lerp form of beta1 * m + (1 - beta1) * d)
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

    // Registers a host buffer pair of equal size; allocates its two moment buffers here, once, so
    // that step() never allocates. Each buffer pair keeps its own step count, as PyTorch keeps
    // one per parameter. Both buffers must outlive the optimizer.
    void add(Span<T> params, Span<const T> grads) {
        detail::check_buffer_pair("Adam::add", params.size, params.data, grads.size, grads.data);
        const auto n = static_cast<size_t>(params.size);
        entries_.push_back(
            Entry{params, grads, std::vector<T>(n, T(0)), std::vector<T>(n, T(0)), 0});
    }

    // Updates every registered buffer once from its current gradients.
    void step() {
        for (Entry& e : entries_) step_entry(e);
    }

    const AdamOptions& options() const { return options_; }
    // Changes the learning rate for the following steps (a schedule), as setting a param group's
    // "lr" does in PyTorch.
    void set_lr(double lr) {
        check(lr >= 0, "Adam::set_lr: lr must be >= 0, got ", lr);
        options_.lr = lr;
    }
    int64_t buffer_count() const { return static_cast<int64_t>(entries_.size()); }

private:
    struct Entry {
        Span<T> params;
        Span<const T> grads;
        std::vector<T> exp_avg;     // m
        std::vector<T> exp_avg_sq;  // v
        int64_t steps;
    };

    void step_entry(Entry& e) {
        e.steps += 1;
        const double s = static_cast<double>(e.steps);
        const double correction1 = 1.0 - std::pow(options_.beta1, s);
        const double correction2 = 1.0 - std::pow(options_.beta2, s);
        const T step_size = static_cast<T>(options_.lr / correction1);
        const T correction2_sqrt = static_cast<T>(std::sqrt(correction2));
        const T one_minus_beta1 = static_cast<T>(1.0 - options_.beta1);
        const T beta2 = static_cast<T>(options_.beta2);
        const T one_minus_beta2 = static_cast<T>(1.0 - options_.beta2);
        const T eps = static_cast<T>(options_.eps);
        const T wd = static_cast<T>(options_.weight_decay);
        const int64_t n = e.params.size;
        T* p = e.params.data;
        const T* g = e.grads.data;
        T* m = e.exp_avg.data();
        T* v = e.exp_avg_sq.data();
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n >= detail::kOptimParallelMin)
#endif
        for (int64_t i = 0; i < n; ++i) {
            T d = g[i];
            if (wd != T(0)) d += wd * p[i];
            m[i] += one_minus_beta1 * (d - m[i]);
            v[i] = beta2 * v[i] + one_minus_beta2 * d * d;
            p[i] -= step_size * (m[i] / (std::sqrt(v[i]) / correction2_sqrt + eps));
        }
    }

    AdamOptions options_;
    std::vector<Entry> entries_;
};

}  // namespace lstm::nn
