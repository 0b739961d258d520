#pragma once

// PlanCache: the one place plans are kept. An lstm::Lstm owns one for its calls, a
// cuda::Context's variants keep theirs in the context's, and the process has a default one for
// direct Variant calls and sizing queries (default_plan_cache()). One key for all of them: the
// variant, the request (config, dtype, T, N, path resolved, context, precision) and the
// variant's plan_tag (oneDNN's thread count). Bounded by a count and by the bytes the plans hold
// (Plan::held_bytes); the least recently used plan goes first, and a plan dropped while a call
// holds it lives until the call returns. A lookup that finds its plan does not allocate.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "lstm/cuda/context.hpp"
#include "lstm/variant.hpp"

namespace lstm {

struct PlanCacheLimits {
    // A training loop uses one or two shapes, a bucketed speech loader a handful.
    size_t max_plans = 16;
    // oneDNN's plans hold primitives of a few MB; a cache past this drops its oldest.
    size_t max_bytes = size_t(256) << 20;
};

class PlanCache {
public:
    explicit PlanCache(PlanCacheLimits limits = {}) : limits_(limits) {}
    PlanCache(const PlanCache&) = delete;
    PlanCache& operator=(const PlanCache&) = delete;

    // The plan of `request` for `variant`, built by variant.make_plan() on first use (which
    // throws as that does and then leaves the cache as it was). Thread-safe.
    std::shared_ptr<const Plan> get(const Variant& variant, const PlanRequest& request) {
        // Resolved before the lock: default_path reads the environment, which a caller may change
        // between calls (LSTM_FUSED_ISA), and a plan is kept per path.
        const std::string path =
            request.path.empty() ? variant.default_path(request.dtype) : request.path;
        const int64_t tag = variant.plan_tag(request);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (auto it = entries_.begin(); it != entries_.end(); ++it) {
                if (matches(*it, variant, request, path, tag)) {
                    entries_.splice(entries_.begin(), entries_, it);
                    return entries_.front().plan;
                }
            }
        }
        PlanRequest resolved = request;
        resolved.path = path;
        std::shared_ptr<const Plan> plan = variant.make_plan(resolved);
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.push_front(Entry{&variant, std::move(resolved), tag, plan});
        held_ += plan->held_bytes();
        while (entries_.size() > 1 &&
               (entries_.size() > limits_.max_plans || held_ > limits_.max_bytes)) {
            held_ -= entries_.back().plan->held_bytes();
            entries_.pop_back();
        }
        return plan;
    }

    // Drops every plan of `variant` (a variant about to be destroyed).
    void forget(const Variant& variant) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = entries_.begin(); it != entries_.end();) {
            if (it->variant == &variant) {
                held_ -= it->plan->held_bytes();
                it = entries_.erase(it);
            } else {
                ++it;
            }
        }
    }

    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.clear();
        held_ = 0;
    }

    size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return entries_.size();
    }
    // Bytes the kept plans hold (Plan::held_bytes).
    size_t held_bytes() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return held_;
    }
    const PlanCacheLimits& limits() const { return limits_; }

private:
    struct Entry {
        const Variant* variant;
        PlanRequest request;  // path resolved
        int64_t tag;
        std::shared_ptr<const Plan> plan;
    };

    static bool matches(const Entry& e, const Variant& variant, const PlanRequest& r,
                        const std::string& path, int64_t tag) {
        return e.variant == &variant && e.tag == tag && e.request.dtype == r.dtype &&
               e.request.seq_len == r.seq_len && e.request.batch == r.batch &&
               e.request.context == r.context && e.request.precision == r.precision &&
               e.request.path == path && e.request.config == r.config;
    }

    PlanCacheLimits limits_;
    mutable std::mutex mutex_;
    std::list<Entry> entries_;  // most recently used first
    size_t held_ = 0;
};

// The process's cache for direct Variant calls and sizing queries. Never destroyed, so variants
// destroyed at exit can still forget their plans in it.
inline PlanCache& default_plan_cache() {
    static PlanCache* cache = new PlanCache();
    return *cache;
}

// Where a direct call keeps the plan of `request`: its context's cache (the context's plans live
// and go with it), else the default one.
inline PlanCache& plan_cache_for(const PlanRequest& request) {
    return request.context ? request.context->plans() : default_plan_cache();
}

// Variant's members that go through the default plan cache (declared in lstm/variant.hpp).

inline Variant::~Variant() { default_plan_cache().forget(*this); }

inline size_t Variant::workspace_bytes(const Config& config, DType dtype, int64_t seq_len,
                                       int64_t batch) const {
    check_sizes(config, seq_len, batch, "workspace_bytes");
    return default_plan_cache()
        .get(*this, PlanRequest{config, dtype, seq_len, batch})
        ->workspace_bytes();
}

inline size_t Variant::reserve_bytes(const Config& config, DType dtype, int64_t seq_len,
                                     int64_t batch) const {
    check_sizes(config, seq_len, batch, "reserve_bytes");
    return default_plan_cache()
        .get(*this, PlanRequest{config, dtype, seq_len, batch})
        ->reserve_bytes();
}

namespace detail {

// The request of a direct call: its problem, the default path, its context.
template <typename A>
PlanRequest request_of(const Config& config, const A& args, DType dtype) {
    check(!args.x.empty(), "x must be given, got an empty view");
    check(args.x.rank() == 3, "x must have rank 3 (T, N, I), got shape ", args.x.shape_string());
    PlanRequest r{config, dtype, args.x.size(0), args.x.size(1)};
    r.context = args.context;
    return r;
}

}  // namespace detail

template <typename T>
void Variant::forward(const Config& config, const ForwardArgs<T>& args) const {
    const PlanRequest request = detail::request_of(config, args, dtype_of<T>());
    plan_cache_for(request).get(*this, request)->forward(args);
}

template <typename T>
void Variant::backward(const Config& config, const BackwardArgs<T>& args) const {
    const PlanRequest request = detail::request_of(config, args, dtype_of<T>());
    plan_cache_for(request).get(*this, request)->backward(args);
}

}  // namespace lstm
