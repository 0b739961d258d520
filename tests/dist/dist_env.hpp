#pragma once

// The communicator every test of tests/dist shares; set up by tests/dist/main.cpp, which runs
// under mpirun (tests/dist/CMakeLists.txt). Every rank runs the same test cases in the same order,
// so their collectives match; tests use CHECK rather than REQUIRE around collectives, so that a
// failure on one rank does not skip a collective the others are waiting in.

#include "lstm/dist/communicator.hpp"

namespace lstm::test {

dist::Communicator& world();

}  // namespace lstm::test
