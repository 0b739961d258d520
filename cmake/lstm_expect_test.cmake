# lstm_expect_test(<name> <exit code> <output regex> <program> [<arg>...]): a ctest test that runs
# the program once and passes when it exits with that code and its stdout and stderr together
# match the regex ("" matches anything). WILL_FAIL and PASS_REGULAR_EXPRESSION cannot tell a
# usage error (2) from a failure of the work (1), which the command-line programs keep apart.
# <program> may be a launcher (mpiexec) with the program among the arguments.
function(lstm_expect_test name rc regex program)
    add_test(NAME ${name}
        COMMAND ${CMAKE_COMMAND} -DTOOL=${program} "-DARGS=${ARGN}" -DEXPECT_RC=${rc}
            "-DEXPECT_OUTPUT=${regex}" -P ${PROJECT_SOURCE_DIR}/tests/tool/expect.cmake)
endfunction()
