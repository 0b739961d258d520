#pragma once

// Prints, after every test case, how close its tolerance comparisons came to failing: one line
//     worst-of-tolerance: <largest |error| / allowed, 3 significant digits> (<its label>)
// or, when the case made no tolerance comparison (bitwise checks only, or none),
//     worst-of-tolerance: n/a (bitwise or no tolerance check)
// scripts/gpu-check.sh reads this line; its format is a contract with that script.
// Include from exactly one translation unit (CATCH_REGISTER_LISTENER defines a registrar).

#include <catch2/catch.hpp>
#include <iostream>
#include <sstream>

#include "test_util.hpp"

namespace lstm::test {

inline std::string worst_of_tolerance_line(const ToleranceRecord& r) {
    if (r.worst < 0) return "worst-of-tolerance: n/a (bitwise or no tolerance check)";
    std::ostringstream line;
    line.precision(3);
    line << "worst-of-tolerance: " << r.worst << " (" << r.label << ")";
    return line.str();
}

class ToleranceListener : public Catch::TestEventListenerBase {
public:
    using TestEventListenerBase::TestEventListenerBase;

    void testCaseStarting(const Catch::TestCaseInfo& info) override {
        TestEventListenerBase::testCaseStarting(info);
        reset_tolerance_record();
    }

    void testCaseEnded(const Catch::TestCaseStats& stats) override {
        std::cout << worst_of_tolerance_line(tolerance_record()) << std::endl;
        TestEventListenerBase::testCaseEnded(stats);
    }
};

// The macro pastes the type into a name, so it takes the unqualified one.
CATCH_REGISTER_LISTENER(ToleranceListener)

}  // namespace lstm::test
