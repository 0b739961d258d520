#pragma once

// Where the PyTorch-written fixtures of tests/data/ live. The build passes the source folder's
// path (tests/tool_tests.cmake); the fallback serves a run from the repository root.

#include <string>

#ifndef LSTM_TEST_DATA_DIR
#define LSTM_TEST_DATA_DIR "tests/data"
#endif

namespace lstm::test {

inline std::string data_path(const std::string& name) {
    return std::string(LSTM_TEST_DATA_DIR) + "/" + name;
}

}  // namespace lstm::test
