#pragma once

// Google Benchmark 1.7.1 ends a case without a time in one way only, SkipWithError ("ERROR
// OCCURRED" in the report), both for a case that cannot run here (a variant without a feature
// the case needs, no CUDA device visible), which is expected and only reported, and for one that
// failed (a reference check, a non-finite loss, an exception), which must fail the run. Failures
// go through fail_case, which counts them, so that lstm_bench exits 1 when any case failed;
// cases that cannot run call state.SkipWithError themselves.

#include <benchmark/benchmark.h>

#include <atomic>
#include <string>

namespace lstm::bench {

inline std::atomic<int>& failed_case_count() {
    static std::atomic<int> count{0};
    return count;
}

// Ends the case of `state` as failed, with `why` as its error.
inline void fail_case(benchmark::State& state, const std::string& why) {
    state.SkipWithError(why.c_str());
    ++failed_case_count();
}

// How many runs of cases have failed in this process so far.
inline int failed_cases() { return failed_case_count().load(); }

}  // namespace lstm::bench
