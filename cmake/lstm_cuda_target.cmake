# lstm_cuda: the compiled half of the library, built when LSTM_WITH_CUDA is 1. It holds the
# device kernels (kernels/cuda/*.cu), the CUDA variants' host code (lstm/variants/*.cpp: cuBLAS,
# cuDNN, streams, graphs) and the runtime services behind lstm/cuda/*.hpp. The header-only `lstm`
# target links it, so a consumer of lstm::lstm gets it without naming it.
#
# Whole-program CUDA compilation (no separable compilation): the static library needs no device
# link step, so consumers link it with their ordinary C++ linker.
#
# One CUDA runtime per process: lstm_cuda links the shared cudart (CUDA::cudart below), and CMake
# adds a CUDA runtime of its own to every executable that links a library with CUDA objects,
# static by default. Two copies keep two sets of runtime state (devices, streams, error state)
# in one process, so every target defined after this point takes the shared one as well.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
file(GLOB LSTM_CUDA_SOURCES CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu
    ${PROJECT_SOURCE_DIR}/lstm/cuda/*.cpp
    ${PROJECT_SOURCE_DIR}/lstm/variants/*.cpp
    ${PROJECT_SOURCE_DIR}/lstm/loss/*.cpp
    ${PROJECT_SOURCE_DIR}/lstm/nn/*.cpp)
add_library(lstm_cuda STATIC ${LSTM_CUDA_SOURCES})
add_library(lstm::lstm_cuda ALIAS lstm_cuda)
set_target_properties(lstm_cuda PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CUDA_RUNTIME_LIBRARY Shared
    CUDA_SEPARABLE_COMPILATION OFF)
target_include_directories(lstm_cuda PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include>)
target_compile_features(lstm_cuda PUBLIC cxx_std_17)
target_compile_definitions(lstm_cuda PUBLIC
    LSTM_WITH_CUDA=1
    LSTM_WITH_CUDNN=${LSTM_WITH_CUDNN}
    LSTM_WITH_ONEDNN=${LSTM_WITH_ONEDNN})
# lstm_cpu for the host memory query (lstm/memory.cpp) its host buffers are checked against.
target_link_libraries(lstm_cuda PUBLIC lstm_cpu CUDA::cudart CUDA::cublas)
if(LSTM_WITH_CUDNN)
    target_include_directories(lstm_cuda PRIVATE ${LSTM_CUDNN_INCLUDE_DIR})
    target_link_libraries(lstm_cuda PUBLIC ${LSTM_CUDNN_LIBRARY})
endif()
# Same warnings as the rest of the project; nvcc passes them to the host compiler. Eigen stays
# out of .cu files (docs/architecture.md), so it is not on lstm_cuda's include path at all.
target_compile_options(lstm_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow --expt-relaxed-constexpr>)
