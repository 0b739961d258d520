# ctest driver: the suite's instruction-set cases on CPUs this machine is not, under QEMU's
# user-mode emulator. ctest's capped runs (LSTM_MAX_CPU_ISA, DNNL_MAX_CPU_ISA) still execute on
# the host's CPU, which has every instruction they leave out, so a stray AVX-512 instruction in a
# path meant for AVX2 would pass there. QEMU reports the CPU model's CPUID to the program, and its
# translator has no AVX-512 at all: any AVX-512 instruction stops the run with SIGILL, as it would
# on an AMD Zen 3. The library is built portable (no -march, as a consumer building with plain -O2
# does), so the same binaries run on every model; each model must detect its own instruction
# sets, take the paths named below and pass the cases, and report the paths it cannot run as
# skipped. Emulated vector code runs about 100 times slower, hence a selection of cases.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DQEMU=<qemu-x86_64 or empty> -P run.cmake
foreach(var SOURCE_DIR WORK_DIR GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run.cmake needs -D${var}=...")
    endif()
endforeach()

cmake_host_system_information(RESULT processor QUERY OS_PLATFORM)
if(NOT processor MATCHES "^(x86_64|AMD64)$")
    message("LSTM_TEST_SKIPPED: emulating x86 CPU models needs an x86-64 host, this is "
            "'${processor}'")
    return()
endif()
if(NOT QEMU)
    message("LSTM_TEST_SKIPPED: qemu-x86_64 is not installed (Debian's qemu-user; "
            "scripts/install-deps.sh installs it)")
    return()
endif()

set(build ${WORK_DIR}/build)
# Only the files of the cases run below (a third of the suite's compile time).
set(test_files fused_test.cpp onednn_test.cpp isa_cap_test.cpp host_info_test.cpp ctc_test.cpp
    ctc_decode_test.cpp ctc_head_test.cpp variants_test.cpp)
include(${CMAKE_CURRENT_LIST_DIR}/../run_step.cmake)
# Not through run_step, whose argument list would split the file list at its semicolons.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DLSTM_NATIVE_ARCH=OFF -DLSTM_CUDA=OFF -DLSTM_MPI=OFF
    -DLSTM_BUILD_BENCH=OFF -DLSTM_BUILD_EXAMPLES=OFF -DLSTM_INSTALL=OFF
    "-DLSTM_TEST_FILES=${test_files}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the portable build failed (${rc})")
endif()
run_step(${CMAKE_COMMAND} --build ${build} --target lstm_tests lstm_tool)

# Runs <command> under QEMU as CPU model <cpu>; fails naming both unless it exits 0 and its output
# matches every regex after EXPECT. QEMU's warnings about CPUID bits its translator lacks (which
# the program then sees as absent) are left out of what is shown.
function(run_as cpu)
    cmake_parse_arguments(arg "" "" "COMMAND;EXPECT" ${ARGN})
    execute_process(COMMAND ${QEMU} -cpu ${cpu} ${arg_COMMAND}
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(REGEX REPLACE "qemu-x86_64: warning: TCG doesn't support requested feature[^\n]*\n" ""
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
    if(problem)
        # Shown without the skip marker of the cases it ran, which would turn the failure into a
        # skip (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
        string(REPLACE "LSTM_TEST_SKIPPED:" "skipped:" shown "${all}")
        message("${shown}")
        message(FATAL_ERROR "as ${cpu}: ${shown_command}: ${problem}")
    endif()
    message(STATUS "as ${cpu}: ${shown_command}: passed")
endfunction()

set(tests ${build}/tests/lstm_tests)
set(tool ${build}/tools/lstm_tool)

# The cases: every CPU-specific path and how it is chosen (fused, onednn, the CTC kernel, the
# instruction-set cap and the host report). Left out for time: fused's 32000-frame case (1.8
# minutes as the Zen 3) and CTC's at T = 5000 (5 s natively), which run the kernels of the rest.
set(isa_cases "[fused]~*32000*,[onednn],[isa_cap],[host_info],[peak],[ctc]~*5000*")

# AMD Zen 3 (EPYC Milan): AVX2 and FMA, no AVX-512. Also every variant against the reference on
# all the shapes of tests/variants_test.cpp (about 2.5 minutes): the shapes for which oneDNN
# takes another weight layout on AVX2 CPUs among them.
run_as(EPYC-Milan COMMAND ${tool} info EXPECT
    "AVX2 yes, FMA yes, AVX-512F no" "fused +cpu +avx2 kernels \\(Highway, AVX2 target\\)"
    "onednn +cpu +oneDNN JIT up to avx2" "ctc +cpu +Highway AVX2")
run_as(EPYC-Milan COMMAND ${tests} "${isa_cases},every CPU variant matches the reference" EXPECT
    "LSTM_TEST_SKIPPED: the avx512 path does not run here")

# Intel Nehalem: SSE4.2, no AVX, no AES (so Highway's widest target there is SSSE3).
run_as(Nehalem COMMAND ${tool} info EXPECT
    "AVX2 no, FMA no, AVX-512F no" "fused +cpu +eigen kernels" "onednn +cpu +oneDNN JIT up to sse41"
    "ctc +cpu +Highway SSSE3")
run_as(Nehalem COMMAND ${tests} "${isa_cases}" EXPECT
    "LSTM_TEST_SKIPPED: the avx512 path does not run here"
    "LSTM_TEST_SKIPPED: the avx2 path does not run here")
