#pragma once

// The tolerance rule of lstm/reference/tolerance.hpp, reported through test_util's compare() so a
// failing test lists its worst elements.

#include <string>
#include <vector>

#include "lstm/reference/tolerance.hpp"
#include "test_util.hpp"

namespace lstm::test {

using reference::lstm_rtol;
using reference::max_abs;
using reference::Pass;

inline Comparison compare_scaled(const std::string& what, const std::vector<double>& got,
                                 const std::vector<double>& want, double rtol) {
    return compare(what, got, want, rtol * max_abs(want), rtol);
}

}  // namespace lstm::test
