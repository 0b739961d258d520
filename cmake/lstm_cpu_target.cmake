# lstm_cpu: the compiled CPU half of the library (kernels/cpu/*.cpp), and the host memory query
# (lstm/memory.cpp), which lstm_variants and lstm_cuda both call: the part they both link, so a
# static link finds it after either, whichever a program's references pull first (a program
# using only a loss once failed to link, tests/consumer/loss_main.cpp). Its kernels are compiled
# once per instruction set with Google Highway (Debian's libhwy-dev) and dispatched at run time,
# so one binary takes AVX-512 where the processor has it and AVX2 (or narrower) elsewhere, and a
# consumer gets that speed whatever flags it compiles with. No -march here: Highway compiles each
# target with its own attributes, and the baseline must run on every x86-64.
find_package(hwy 1.0 REQUIRED CONFIG)
file(GLOB LSTM_CPU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cpu/*.cpp)
lstm_static_part(lstm_cpu lstm_cpu ${LSTM_CPU_SOURCES} ${PROJECT_SOURCE_DIR}/lstm/memory.cpp)
target_link_libraries(lstm_cpu PUBLIC OpenMP::OpenMP_CXX PRIVATE hwy::hwy)

# Highway 1.0 stops with "#error Logic error: best baseline should be included in dynamic
# targets" when the compiler flags make AVX3_DL its baseline (CMAKE_CXX_FLAGS=-march=native on a
# Sapphire Rapids, whose AVX-VNNI, VBMI2, VPOPCNTDQ, BITALG, VAES and VPCLMULQDQ complete that
# set) unless that target is wanted. Wanted, it is the only x86 target compiled, and the library
# runs only where the flags already demand such a CPU. Other flags compile as before.
include(CheckCXXSourceCompiles)
get_target_property(_lstm_hwy_includes hwy::hwy INTERFACE_INCLUDE_DIRECTORIES)
set(CMAKE_REQUIRED_QUIET ON)
set(CMAKE_REQUIRED_INCLUDES ${_lstm_hwy_includes})
set(_lstm_hwy_probe "#include <hwy/highway.h>\nint main() { return 0; }")
check_cxx_source_compiles("${_lstm_hwy_probe}" LSTM_HWY_BASELINE_COMPILES)
if(NOT LSTM_HWY_BASELINE_COMPILES)
    set(CMAKE_REQUIRED_DEFINITIONS -DHWY_WANT_AVX3_DL)
    check_cxx_source_compiles("${_lstm_hwy_probe}" LSTM_HWY_NEEDS_AVX3_DL)
    if(LSTM_HWY_NEEDS_AVX3_DL)
        target_compile_definitions(lstm_cpu PRIVATE HWY_WANT_AVX3_DL)
    endif()
endif()
unset(CMAKE_REQUIRED_QUIET)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_DEFINITIONS)
