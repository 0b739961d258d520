# lstm_cuda: the CUDA part of the library, built when LSTM_WITH_CUDA is 1, and the lstm::cuda
# target that brings it. It holds the device kernels (kernels/cuda/*.cu), the CUDA variants' host
# code (lstm/variants/*.cpp: cuBLAS, cuDNN, streams, graphs) with their registry entry
# (lstm/registry_cuda.cpp), the runtime services behind lstm/cuda/*.hpp and the device halves of
# the losses and of lstm/nn. lstm::lstm does not link it: a CPU program links no CUDA library
# (no cudart, cuBLAS, cuBLASLt, cuDNN); a program that runs anything on a GPU links lstm::cuda,
# and then has the CUDA variants in its registry (CPU first, then CUDA).
#
# lstm::cuda links lstm_cuda as a whole archive. The CPU part names the CUDA entry points only
# weakly or defines weak stand-ins for them (lstm/cuda/link.hpp), and neither makes a static link
# take an archive member; whole, every member is in, whichever entry points the program uses.
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
# The CPU part's stand-ins (lstm_variants), not lstm_cuda's.
list(REMOVE_ITEM LSTM_CUDA_SOURCES ${PROJECT_SOURCE_DIR}/lstm/cuda/absent.cpp)
add_library(lstm_cuda STATIC ${LSTM_CUDA_SOURCES} ${PROJECT_SOURCE_DIR}/lstm/registry_cuda.cpp)
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
# lstm_variants for the CPU part it completes (whose stand-ins its definitions replace), lstm_cpu
# for the host memory query (lstm/memory.cpp) its host buffers are checked against.
target_link_libraries(lstm_cuda PUBLIC lstm_variants lstm_cpu CUDA::cudart CUDA::cublas)
if(LSTM_WITH_CUDNN)
    target_include_directories(lstm_cuda PRIVATE ${LSTM_CUDNN_INCLUDE_DIR})
    target_link_libraries(lstm_cuda PUBLIC ${LSTM_CUDNN_LIBRARY})
endif()
# Same warnings as the rest of the project; nvcc passes them to the host compiler. Eigen stays
# out of .cu files (docs/architecture.md), so it is not on lstm_cuda's include path at all.
target_compile_options(lstm_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow --expt-relaxed-constexpr>)

# lstm::cuda (exported as lstm::cuda, component `cuda` of the package): lstm::lstm plus the whole
# of lstm_cuda. Every target that needs the CUDA part links this, never lstm_cuda itself: CMake
# refuses a link that names one library both whole and plain. The installed package names the
# archive by its exported name (an export does not rename targets inside $<LINK_LIBRARY>).
add_library(lstm_cuda_component INTERFACE)
add_library(lstm::cuda ALIAS lstm_cuda_component)
set_target_properties(lstm_cuda_component PROPERTIES EXPORT_NAME cuda)
target_link_libraries(lstm_cuda_component INTERFACE lstm
    "$<BUILD_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,lstm_cuda>>"
    "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,lstm::lstm_cuda>>")
