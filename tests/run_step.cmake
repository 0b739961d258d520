# run_step(<command> <args>...): runs a command from a ctest driver script (cmake -P) and stops
# the script with the command line and its exit code when it fails.
function(run_step)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
    endif()
endfunction()
