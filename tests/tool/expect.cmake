# Runs one command line and checks its exit code and output, so that ctest can assert exit code
# 2 (usage) apart from 1 (failure), which WILL_FAIL cannot tell apart (cmake/lstm_expect_test.cmake
# registers such tests).
#   cmake -DTOOL=<program> "-DARGS=a;b;c" -DEXPECT_RC=<n> [-DEXPECT_OUTPUT=<regex>] -P expect.cmake
# EXPECT_OUTPUT is matched against stdout and stderr together.
execute_process(COMMAND ${TOOL} ${ARGS}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err)
set(all "${out}${err}")
get_filename_component(program ${TOOL} NAME)
if(NOT rc STREQUAL EXPECT_RC)
    # The output verbatim first: FATAL_ERROR re-wraps its text, and a test's
    # SKIP_REGULAR_EXPRESSION matches the program's own lines.
    message("${all}")
    message(FATAL_ERROR "${program} ${ARGS}: exit code ${rc}, expected ${EXPECT_RC} (output above)")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT all MATCHES "${EXPECT_OUTPUT}")
    message(FATAL_ERROR "${program} ${ARGS}: output does not match '${EXPECT_OUTPUT}':\n${all}")
endif()
message(STATUS "${program} ${ARGS}: exit code ${rc} as expected")
