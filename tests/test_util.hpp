#pragma once

// Shared helpers of the test suite: deterministic random data and a tolerance comparison that
// reports the worst offenders (index, got, expected) when it fails.

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lstm/error.hpp"
#include "lstm/memory.hpp"

#if LSTM_WITH_CUDA
#include "lstm/cuda/runtime.hpp"
#endif

// Ends the running test case as skipped, with the reason: the marker is the
// SKIP_REGULAR_EXPRESSION tests/CMakeLists.txt gives ctest, so ctest lists the case as "Skipped"
// (Catch2 v2 has no SKIP) instead of a pass that checked nothing. Only for a whole case that cannot
// run on this host (an instruction set the CPU lacks); the reason names what is missing.
// Whether this build's heap says anything about the library's memory: the sanitizers' allocators
// pad every block and keep freed ones in quarantine, so peaks measured under them are theirs.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LSTM_MEMORY_MEASURABLE 0
#else
#define LSTM_MEMORY_MEASURABLE 1
#endif

#define LSTM_SKIP(reason)                      \
    do {                                       \
        WARN("LSTM_TEST_SKIPPED: " << reason); \
        return;                                \
    } while (0)

namespace lstm::test {

// Sets an environment variable for the scope (nullptr: unset) and restores what it was.
class EnvScope {
public:
    EnvScope(const char* name, const char* value) : name_(name), had_(getenv(name) != nullptr) {
        if (had_) saved_ = getenv(name);
        set(value);
    }
    ~EnvScope() { set(had_ ? saved_.c_str() : nullptr); }
    EnvScope(const EnvScope&) = delete;
    EnvScope& operator=(const EnvScope&) = delete;

private:
    void set(const char* value) const {
        if (value)
            setenv(name_.c_str(), value, 1);
        else
            unsetenv(name_.c_str());
    }
    std::string name_, saved_;
    bool had_;
};

// Whether this process can use a GPU: false in builds without CUDA and on machines (CI) without
// a device, where CUDA variants are compiled and registered but cannot run.
inline bool gpu_visible() {
#if LSTM_WITH_CUDA
    return cuda::device_available();
#else
    return false;
#endif
}

// Uniform values in [lo, hi) from a fixed seed, so every failure reproduces.
template <typename T = double>
std::vector<T> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> out(n);
    for (auto& v : out) v = static_cast<T>(dist(rng));
    return out;
}

template <typename To, typename From>
std::vector<To> cast_vector(const std::vector<From>& in) {
    return std::vector<To>(in.begin(), in.end());
}

struct Comparison {
    bool ok = true;
    std::string report;  // empty when ok
};

// The largest |error| / allowed error of the tolerance comparisons made since the last reset,
// and the label of that comparison: how close a passing case came to failing (the GPU test
// executable prints it per case, tests/gpu/tolerance_listener.hpp). A ratio below 0 means
// nothing was recorded.
struct ToleranceRecord {
    double worst = -1;
    std::string label;
};

namespace tolerance_detail {
inline std::mutex& tolerance_mutex() {
    static std::mutex m;
    return m;
}
inline ToleranceRecord& tolerance_state() {
    static ToleranceRecord r;
    return r;
}
}  // namespace tolerance_detail

// NaN counts as infinitely far: a comparison that saw one is the worst there is.
inline void record_tolerance(const std::string& label, double ratio) {
    if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
    std::lock_guard<std::mutex> lock(tolerance_detail::tolerance_mutex());
    ToleranceRecord& r = tolerance_detail::tolerance_state();
    if (ratio > r.worst) {
        r.worst = ratio;
        r.label = label;
    }
}

inline ToleranceRecord tolerance_record() {
    std::lock_guard<std::mutex> lock(tolerance_detail::tolerance_mutex());
    return tolerance_detail::tolerance_state();
}

inline void reset_tolerance_record() {
    std::lock_guard<std::mutex> lock(tolerance_detail::tolerance_mutex());
    tolerance_detail::tolerance_state() = ToleranceRecord();
}

// |err| / limit, with an exact match under a zero limit counting as 0.
inline double tolerance_ratio(double err, double limit) {
    if (err == 0) return 0;
    return limit > 0 ? err / limit : std::numeric_limits<double>::infinity();
}

// |got - want| <= atol + rtol * |want| for one scalar, recorded under `what`.
inline bool scalar_close(const std::string& what, double got, double want, double atol,
                         double rtol) {
    const double err = std::abs(got - want), limit = atol + rtol * std::abs(want);
    record_tolerance(what, tolerance_ratio(err, limit));
    return err <= limit;
}

// Elementwise |got - want| <= atol + rtol * |want|; NaN or Inf in `got` where `want` is finite
// always fails. On failure the report lists the `worst` largest violations.
template <typename A, typename B>
Comparison compare(const std::string& what, const A* got, const B* want, size_t n, double atol,
                   double rtol, size_t worst = 8) {
    struct Miss {
        size_t index;
        double got, want, excess;
    };
    std::vector<Miss> misses;
    double worst_ratio = 0;
    for (size_t i = 0; i < n; ++i) {
        const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
        const double limit = atol + rtol * std::abs(w);
        const double err = std::abs(g - w);
        worst_ratio =
            std::max(worst_ratio, std::isnan(err) ? std::numeric_limits<double>::infinity()
                                                  : tolerance_ratio(err, limit));
        if (!(err <= limit)) misses.push_back({i, g, w, std::isfinite(err) ? err / limit : 1e300});
    }
    record_tolerance(what, worst_ratio);
    Comparison out;
    if (misses.empty()) return out;
    std::sort(misses.begin(), misses.end(),
              [](const Miss& a, const Miss& b) { return a.excess > b.excess; });
    std::ostringstream msg;
    msg.precision(12);
    msg << what << ": " << misses.size() << " of " << n << " elements outside atol " << atol
        << " + rtol " << rtol << " * |expected|; worst:\n";
    for (size_t k = 0; k < std::min(worst, misses.size()); ++k)
        msg << "  [" << misses[k].index << "] got " << misses[k].got << ", expected "
            << misses[k].want << "\n";
    out.ok = false;
    out.report = msg.str();
    return out;
}

template <typename A, typename B>
Comparison compare(const std::string& what, const std::vector<A>& got, const std::vector<B>& want,
                   double atol, double rtol) {
    if (got.size() != want.size()) {
        record_tolerance(what + " (size mismatch)", std::numeric_limits<double>::infinity());
        Comparison out;
        out.ok = false;
        out.report = what + ": size " + std::to_string(got.size()) + " vs expected " +
                     std::to_string(want.size());
        return out;
    }
    return compare(what, got.data(), want.data(), got.size(), atol, rtol);
}

// d loss() / d value by central differences with step h; `loss` reads `value` (by reference), which
// is restored afterwards.
template <typename Loss>
double central_difference(double& value, double h, Loss&& loss) {
    const double saved = value;
    value = saved + h;
    const double up = loss();
    value = saved - h;
    const double down = loss();
    value = saved;
    return (up - down) / (2 * h);
}

// True when every element is finite.
template <typename T>
bool all_finite(const std::vector<T>& v) {
    return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); });
}

// Sets the host memory budget (lstm::set_host_memory_limit) for a scope, and lifts it afterwards
// even when a check fails, so later cases run unlimited.
struct MemoryLimitScope {
    explicit MemoryLimitScope(uint64_t bytes) { lstm::set_host_memory_limit(bytes); }
    ~MemoryLimitScope() { lstm::set_host_memory_limit(0); }
    MemoryLimitScope(const MemoryLimitScope&) = delete;
    MemoryLimitScope& operator=(const MemoryLimitScope&) = delete;
};

// Disarms lstm::testing::fail_memory_request_after however the scope ends, so that a failed
// check cannot leave the hook armed for the next case.
struct MemoryFailureDisarm {
    MemoryFailureDisarm() = default;
    MemoryFailureDisarm(const MemoryFailureDisarm&) = delete;
    MemoryFailureDisarm& operator=(const MemoryFailureDisarm&) = delete;
    ~MemoryFailureDisarm() { lstm::testing::fail_memory_request_after(-1); }
};

// The message of the lstm::OutOfMemory that `body` throws ("" when it throws nothing, which the
// caller's CHECK_THAT then reports).
template <typename Body>
std::string out_of_memory_message(Body body) {
    try {
        body();
    } catch (const lstm::OutOfMemory& e) {
        return e.what();
    }
    return "";
}

}  // namespace lstm::test

// Fails the current Catch2 test with the comparison's report (the worst mismatches).
#define LSTM_REQUIRE_CLOSE(cmp)       \
    do {                              \
        const auto lstm_cmp_ = (cmp); \
        INFO(lstm_cmp_.report);       \
        REQUIRE(lstm_cmp_.ok);        \
    } while (0)
#define LSTM_CHECK_CLOSE(cmp)         \
    do {                              \
        const auto lstm_cmp_ = (cmp); \
        INFO(lstm_cmp_.report);       \
        CHECK(lstm_cmp_.ok);          \
    } while (0)
