// The GPU test executable. Listing its cases (--list-test-names-only, --list-tests, --list-tags)
// needs no device: a runner lists them on any machine, then starts each case in its own process.
// Running cases without a visible device exits with ctest's skip code (SKIP_RETURN_CODE in
// tests/CMakeLists.txt) instead of passing vacuously.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "case_registry.hpp"
#include "lstm/cuda/runtime.hpp"
#include "runner_util.hpp"
#include "tolerance_listener.hpp"

int main(int argc, char** argv) {
    lstm::test::register_generated_cases();
    Catch::Session session;
    if (const int bad_arguments = session.applyCommandLine(argc, argv)) return bad_arguments;
    if (lstm::test::runs_cases(session.configData())) {
        if (!lstm::cuda::device_available()) {
            std::printf("lstm_gpu_tests: no CUDA device visible; skipping every GPU test\n");
            return lstm::test::kSkipExitCode;
        }
        std::printf("lstm_gpu_tests on %s\n", lstm::cuda::device_description(0).c_str());
        std::fflush(stdout);
    }
    return session.run();
}
