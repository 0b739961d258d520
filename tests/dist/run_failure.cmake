# Runs tests/dist/failure_program under mpirun in one failure mode and checks that the job ends on
# every rank within TIMEOUT seconds (no hang), with a nonzero status, and that its output matches
# EXPECT (a regular expression; empty: anything). Mode "ok" must instead exit 0.
# cmake -DMPIEXEC=... -DPROGRAM=... -DMODE=... -DEXPECT=... -DTIMEOUT=... "-DFLAGS=a;b" -P this
string(TIMESTAMP start "%s")
execute_process(
    COMMAND ${MPIEXEC} ${FLAGS} ${PROGRAM} ${MODE}
    RESULT_VARIABLE status
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out
    TIMEOUT ${TIMEOUT})
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
message(STATUS "mode ${MODE}: status '${status}' after ${seconds} s; output:\n${out}")
if(status MATCHES "timeout")
    message(FATAL_ERROR "mode ${MODE}: the job still ran after ${TIMEOUT} s: a rank hangs")
endif()
if(MODE STREQUAL "ok")
    if(NOT status EQUAL 0)
        message(FATAL_ERROR "mode ok: the job failed with status '${status}'")
    endif()
    return()
endif()
if(status EQUAL 0)
    message(FATAL_ERROR "mode ${MODE}: the job exited 0; it must fail")
endif()
if(EXPECT AND NOT out MATCHES "${EXPECT}")
    message(FATAL_ERROR "mode ${MODE}: the output does not match '${EXPECT}'")
endif()
