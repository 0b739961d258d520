// Running a test case on each instruction set of the compiled kernels (lstm_cpu, Highway's
// run-time dispatch): the one dispatched on this CPU, and capped at AVX2 and at SSE4, so an
// AVX-512 host also checks the code AVX2-only and older machines run. A test case is templated
// over the types of LSTM_SIMD_LEVELS (or, when it is templated over float and double already,
// LSTM_SIMD_FLOAT_TYPES) and starts with LSTM_ON_SIMD_LEVEL(TestType), which caps the dispatch
// for the rest of the case, or ends it as skipped (LSTM_SKIP) where the CPU lacks the set.
#pragma once

#include <cstring>
#include <string>

#include "kernels/cpu/simd.hpp"
#include "test_util.hpp"

namespace lstm::test {

using kernels::cpu::SimdCap;

// Level tags for cases without an element type.
struct Dispatched {};
struct Avx2 {};
struct Sse4 {};
// An element type run with the dispatch capped; a plain float or double runs dispatched.
template <typename T>
struct OnAvx2 {};
template <typename T>
struct OnSse4 {};

// The element type and the cap of a test type.
template <typename X>
struct SimdLevel {
    using type = X;
    static constexpr SimdCap cap = SimdCap::all;
};
template <>
struct SimdLevel<Dispatched> {
    using type = void;
    static constexpr SimdCap cap = SimdCap::all;
};
template <>
struct SimdLevel<Avx2> {
    using type = void;
    static constexpr SimdCap cap = SimdCap::avx2;
};
template <>
struct SimdLevel<Sse4> {
    using type = void;
    static constexpr SimdCap cap = SimdCap::sse4;
};
template <typename T>
struct SimdLevel<OnAvx2<T>> {
    using type = T;
    static constexpr SimdCap cap = SimdCap::avx2;
};
template <typename T>
struct SimdLevel<OnSse4<T>> {
    using type = T;
    static constexpr SimdCap cap = SimdCap::sse4;
};

// The element type of a test type of LSTM_SIMD_FLOAT_TYPES.
template <typename X>
using simd_element_t = typename SimdLevel<X>::type;

// Caps the dispatch for its lifetime and lifts the cap afterwards, so a failing check cannot leave
// later test cases on a narrower instruction set.
class SimdCapScope {
public:
    explicit SimdCapScope(SimdCap cap) : cap_(cap) { kernels::cpu::restrict_simd(cap); }
    ~SimdCapScope() { kernels::cpu::restrict_simd(SimdCap::all); }
    SimdCapScope(const SimdCapScope&) = delete;
    SimdCapScope& operator=(const SimdCapScope&) = delete;

    // Whether the dispatched target is the capped set itself (a CPU without it, or another
    // architecture, runs something else, which the uncapped case covers already).
    bool runs_cap() const {
        const char* name = kernels::cpu::simd_target_name();
        switch (cap_) {
            case SimdCap::all:
                return true;
            case SimdCap::avx2:
                return std::strcmp(name, "AVX2") == 0;
            case SimdCap::sse4:
                return std::strcmp(name, "SSE4") == 0;
        }
        return false;
    }

    std::string why_not() const {
        const std::string set = cap_ == SimdCap::avx2 ? "AVX2" : "SSE4";
        if (kernels::cpu::narrower_than(cap_, kernels::cpu::narrowest_simd_cap())) {
            return "this build has no " + set + " kernels: its flags made " +
                   kernels::cpu::simd_baseline_name() + " the baseline of lstm_cpu";
        }
        return "this CPU cannot run the " + set +
               " kernels (dispatched: " + kernels::cpu::simd_target_name() + ")" +
               kernels::cpu::isa_cap_note();
    }

private:
    SimdCap cap_;
};

}  // namespace lstm::test

// The types a kernel test case iterates: one per instruction set, or per element type and set.
#define LSTM_SIMD_LEVELS lstm::test::Dispatched, lstm::test::Avx2, lstm::test::Sse4
#define LSTM_SIMD_FLOAT_TYPES                                             \
    float, double, lstm::test::OnAvx2<float>, lstm::test::OnAvx2<double>, \
        lstm::test::OnSse4<float>, lstm::test::OnSse4<double>

// At the start of a case templated over one of the lists above: caps the dispatch for the rest
// of the case (or skips it where the CPU lacks the set) and names the set in failure messages.
#define LSTM_ON_SIMD_LEVEL(TestType)                                                     \
    const lstm::test::SimdCapScope simd_cap_scope(lstm::test::SimdLevel<TestType>::cap); \
    if (!simd_cap_scope.runs_cap()) LSTM_SKIP(simd_cap_scope.why_not());                 \
    INFO("instruction set " << lstm::kernels::cpu::simd_target_name())
