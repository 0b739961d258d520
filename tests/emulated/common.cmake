# What the emulated runs share (tests/emulated/run.cmake, tests/emulated/arm64.cmake).

include(${CMAKE_CURRENT_LIST_DIR}/../run_step.cmake)

# build_for_emulation(<what> FILES <tests/*_test.cpp>... OPTIONS <cmake -D...>...): configures
# ${WORK_DIR}/build from ${SOURCE_DIR} with only the CPU parts and the given test files, plus the
# options, builds lstm_tests and lstm_tool there, and sets `tests` and `tool` to their paths.
# <what> names the build in a failure.
function(build_for_emulation what)
    cmake_parse_arguments(arg "" "" "FILES;OPTIONS" ${ARGN})
    set(build ${WORK_DIR}/build)
    # Not through run_step, whose argument list would split the file list at its semicolons.
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G "${GENERATOR}"
        -DCMAKE_BUILD_TYPE=Release -DLSTM_CUDA=OFF -DLSTM_MPI=OFF -DLSTM_BUILD_BENCH=OFF
        -DLSTM_BUILD_EXAMPLES=OFF -DLSTM_INSTALL=OFF ${arg_OPTIONS}
        "-DLSTM_TEST_FILES=${arg_FILES}" RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "configuring the ${what} build failed (${rc})")
    endif()
    run_step(${CMAKE_COMMAND} --build ${build} --target lstm_tests lstm_tool)
    set(tests ${build}/tests/lstm_tests PARENT_SCOPE)
    set(tool ${build}/tools/lstm_tool PARENT_SCOPE)
endfunction()

# run_as(<cpu> COMMAND <program> <args>... EXPECT <regex>... [REJECT <regex>...]): runs the
# program under ${QEMU} (qemu-x86_64 or qemu-aarch64, user mode) as CPU model <cpu>; fails naming
# both unless it exits 0, its output matches every EXPECT regex and none of REJECT. QEMU's warnings about CPU features its translator lacks
# (which the program then sees as absent) are left out of what is shown.
function(run_as cpu)
    cmake_parse_arguments(arg "" "" "COMMAND;EXPECT;REJECT" ${ARGN})
    execute_process(COMMAND ${QEMU} -cpu ${cpu} ${arg_COMMAND}
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(REGEX REPLACE "qemu-[a-z0-9_]+: warning: TCG doesn't support requested feature[^\n]*\n" ""
        all "${out}${err}")
    list(GET arg_COMMAND 0 program)
    list(SUBLIST arg_COMMAND 1 -1 args)
    get_filename_component(program ${program} NAME)
    string(REPLACE ";" " " shown_command "${program} ${args}")
    set(problem "")
    if(NOT rc EQUAL 0)
        set(problem "exit code ${rc}")
    endif()
    foreach(regex ${arg_EXPECT})
        if(NOT problem AND NOT all MATCHES "${regex}")
            set(problem "the output does not match '${regex}'")
        endif()
    endforeach()
    foreach(regex ${arg_REJECT})
        if(NOT problem AND all MATCHES "${regex}")
            set(problem "the output matches '${regex}'")
        endif()
    endforeach()
    if(problem)
        # Shown without the skip marker of the cases it ran, which would turn the failure into a
        # skip (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
        string(REPLACE "LSTM_TEST_SKIPPED:" "skipped:" shown "${all}")
        message("${shown}")
        message(FATAL_ERROR "as ${cpu}: ${shown_command}: ${problem}")
    endif()
    message(STATUS "as ${cpu}: ${shown_command}: passed")
endfunction()

