# lstm_cpu: the compiled CPU half of the library (kernels/cpu/*.cpp). Its kernels are compiled
# once per instruction set with Google Highway (Debian's libhwy-dev) and dispatched at run time,
# so one binary takes AVX-512 where the processor has it and AVX2 (or narrower) elsewhere, and a
# consumer gets that speed whatever flags it compiles with. No -march here: Highway compiles each
# target with its own attributes, and the baseline must run on every x86-64.
find_package(hwy 1.0 REQUIRED CONFIG)
file(GLOB LSTM_CPU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cpu/*.cpp)
add_library(lstm_cpu STATIC ${LSTM_CPU_SOURCES})
add_library(lstm::lstm_cpu ALIAS lstm_cpu)
set_target_properties(lstm_cpu PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(lstm_cpu PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include>)
target_compile_features(lstm_cpu PUBLIC cxx_std_17)
# Eigen: kernels/cpu/fused_cell.hpp (the fused layout the Highway kernels share) brings in gemm.hpp.
target_link_libraries(lstm_cpu PUBLIC OpenMP::OpenMP_CXX Eigen3::Eigen PRIVATE hwy::hwy)
target_compile_options(lstm_cpu PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
