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
