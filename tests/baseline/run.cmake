# ctest driver: the library built with flags that make AVX2 lstm_cpu's baseline, as -march=native
# does on a Zen 2 or 3, so that Highway compiles no SSE4 kernels into it. LSTM_MAX_CPU_ISA=sse4
# must then be refused with a message naming the baseline and the narrowest cap, avx2 must still
# run fused's AVX2 kernels, and no cap must run everything (kernels/cpu/cpu_features.hpp).
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -P run.cmake
foreach(var SOURCE_DIR WORK_DIR GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run.cmake needs -D${var}=...")
    endif()
endforeach()

# The flags below emit these instructions everywhere in the build; a CPU without one of them
# cannot run it, and the check is skipped there (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
file(READ /proc/cpuinfo cpuinfo LIMIT 8192)
foreach(flag avx2 fma bmi1 bmi2 f16c movbe aes pclmulqdq)
    if(NOT cpuinfo MATCHES "flags[^\n]* ${flag}[ \n]")
        message("LSTM_TEST_SKIPPED: this CPU has no ${flag}, which the AVX2-baseline build runs")
        return()
    endif()
endforeach()

# Highway's AVX2 target needs AES and PCLMUL besides x86-64-v3's AVX2, FMA, BMI2 and F16C; without
# them its baseline stays SSSE3.
set(flags "-march=x86-64-v3 -maes -mpclmul")
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/../run_step.cmake)

run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${flags}" -DLSTM_NATIVE_ARCH=OFF
    -DLSTM_CUDA=OFF -DLSTM_ONEDNN=OFF -DLSTM_MPI=OFF -DLSTM_BUILD_TESTS=OFF
    -DLSTM_BUILD_BENCH=OFF -DLSTM_BUILD_EXAMPLES=OFF)
run_step(${CMAKE_COMMAND} --build ${build} --target lstm_tool)

# Runs `lstm_tool info` under LSTM_MAX_CPU_ISA=<cap> and checks its exit code and that its output
# matches every regex given.
function(expect_info cap expect_rc)
    set(ENV{LSTM_MAX_CPU_ISA} ${cap})
    execute_process(COMMAND ${build}/tools/lstm_tool info
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    set(all "${out}${err}")
    if(NOT rc STREQUAL expect_rc)
        message("${all}")
        message(FATAL_ERROR "LSTM_MAX_CPU_ISA=${cap}: exit code ${rc}, expected ${expect_rc}")
    endif()
    foreach(regex ${ARGN})
        if(NOT all MATCHES "${regex}")
            message("${all}")
            message(FATAL_ERROR "LSTM_MAX_CPU_ISA=${cap}: the output does not match '${regex}'")
        endif()
    endforeach()
    message(STATUS "LSTM_MAX_CPU_ISA=${cap}: exit code ${rc} and the output as expected")
endfunction()

expect_info(sse4 1
    "LSTM_MAX_CPU_ISA = 'sse4' is narrower than this build's CPU kernels allow: they were compiled with AVX2 as their baseline"
    "the narrowest ceiling is 'avx2'")
expect_info(avx2 0 "simd_target +AVX2 " "fused +cpu +avx2 kernels" "ctc +cpu +Highway AVX2")
expect_info(all 0 "simd_target +AVX")
