// What the test executables' own main functions share: ctest's skip status, and whether Catch was
// asked to run cases at all (listing them must work on any machine, under any environment).
#pragma once

#include <catch2/catch.hpp>

namespace lstm::test {

// The conventional "skipped" exit status (automake's); SKIP_RETURN_CODE in tests/CMakeLists.txt
// maps it to "Skipped".
constexpr int kSkipExitCode = 77;

// Whether the parsed command line runs test cases rather than listing them or printing help.
inline bool runs_cases(const Catch::ConfigData& config) {
    return !(config.listTests || config.listTestNamesOnly || config.listTags ||
             config.listReporters || config.showHelp || config.libIdentify);
}

}  // namespace lstm::test
