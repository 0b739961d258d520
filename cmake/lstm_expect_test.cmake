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

# lstm_expect_tests(<prefix> <cases> LABEL <label> [TIMEOUT <seconds>] [ENVIRONMENT <var=value>...]
#                   COMMAND <program> [<arg>...]): one lstm_expect_test per case in the list
# variable named <cases>, four entries a case: name, exit code, output regex, and the case's own
# arguments as one string (split at spaces), which follow the COMMAND. The tests are named
# <prefix><name>.
function(lstm_expect_tests prefix cases)
    cmake_parse_arguments(PARSE_ARGV 2 arg "" "LABEL;TIMEOUT" "ENVIRONMENT;COMMAND")
    list(LENGTH ${cases} n)
    math(EXPR last "${n} - 1")
    foreach(i RANGE 0 ${last} 4)
        math(EXPR j "${i} + 1")
        math(EXPR k "${i} + 2")
        math(EXPR l "${i} + 3")
        list(GET ${cases} ${i} name)
        list(GET ${cases} ${j} rc)
        list(GET ${cases} ${k} regex)
        list(GET ${cases} ${l} args)
        separate_arguments(args)
        lstm_expect_test(${prefix}${name} ${rc} "${regex}" ${arg_COMMAND} ${args})
        set_tests_properties(${prefix}${name} PROPERTIES LABELS ${arg_LABEL}
            ENVIRONMENT "${arg_ENVIRONMENT}")
        if(arg_TIMEOUT)
            set_tests_properties(${prefix}${name} PROPERTIES TIMEOUT ${arg_TIMEOUT})
        endif()
    endforeach()
endfunction()
