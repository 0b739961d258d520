// lstm_tests' main. Under an LSTM_MAX_CPU_ISA narrower than this build's CPU kernels allow (ctest's
// runs capped to AVX2 and SSE4, when the library was compiled with flags such as -march=znver3
// that leave those kernels out), every case would fail on the same refusal; such a run exits with
// ctest's skip code instead and says why.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/cpu_features.hpp"
#include "runner_util.hpp"

int main(int argc, char** argv) {
    namespace kc = lstm::kernels::cpu;
    Catch::Session session;
    if (const int bad_arguments = session.applyCommandLine(argc, argv)) return bad_arguments;
    if (lstm::test::runs_cases(session.configData())) {
        const char* cap = std::getenv("LSTM_MAX_CPU_ISA");
        try {
            if (kc::narrower_than(kc::parse_isa_cap(cap), kc::narrowest_simd_cap())) {
                std::printf(
                    "LSTM_TEST_SKIPPED: LSTM_MAX_CPU_ISA = %s, but this build has no "
                    "kernels that narrow (its flags made %s the baseline of lstm_cpu)\n",
                    cap, kc::simd_baseline_name());
                return lstm::test::kSkipExitCode;
            }
        } catch (const lstm::Error& e) {  // a malformed value fails the run, named
            std::printf("lstm_tests: %s\n", e.what());
            return 1;
        }
    }
    return session.run();
}
