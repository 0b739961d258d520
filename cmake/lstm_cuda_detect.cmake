# Detects nvcc and cuDNN according to LSTM_CUDA and LSTM_CUDNN (AUTO | ON | OFF) and sets
# LSTM_WITH_CUDA and LSTM_WITH_CUDNN to 0 or 1. CUDA is enabled only after check_language(CUDA)
# finds a compiler, so machines without the toolkit configure cleanly under AUTO.
set(LSTM_WITH_CUDA 0)
set(LSTM_WITH_CUDNN 0)
if(NOT LSTM_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
            # "90" is sm_90 SASS plus compute_90 PTX: the H200, and a JIT path for newer GPUs.
            set(CMAKE_CUDA_ARCHITECTURES 90)
        endif()
        enable_language(CUDA)
        find_package(CUDAToolkit REQUIRED)
        set(LSTM_WITH_CUDA 1)
        if(NOT LSTM_CUDNN STREQUAL "OFF")
            # cuDNN lives in the toolkit, under CUDNN_ROOT (a CMake or environment variable), or in
            # the pip wheel nvidia-cudnn-cu13, which ships include/ and lib/libcudnn.so.9 with no
            # unversioned link (scripts/gpu-check.sh points CUDNN_ROOT at it). NAMES_PER_DIR: a
            # hinted folder's libcudnn.so.9 wins over a libcudnn.so elsewhere on the system, so
            # the library matches the header found beside it.
            find_path(LSTM_CUDNN_INCLUDE_DIR cudnn.h
                HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS}
                PATH_SUFFIXES include)
            find_library(LSTM_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
                HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR}
                PATH_SUFFIXES lib64 lib)
            if(LSTM_CUDNN_INCLUDE_DIR AND LSTM_CUDNN_LIBRARY)
                set(LSTM_WITH_CUDNN 1)
                message(STATUS "lstm: cuDNN at ${LSTM_CUDNN_LIBRARY}")
            elseif(LSTM_CUDNN STREQUAL "ON")
                message(FATAL_ERROR "LSTM_CUDNN=ON but cudnn.h or libcudnn was not found "
                                    "(set CUDNN_ROOT to the folder holding include/ and lib/)")
            else()
                message(STATUS "lstm: cudnn variant off: cudnn.h or libcudnn not found "
                               "(set CUDNN_ROOT)")
            endif()
        endif()
    elseif(LSTM_CUDA STREQUAL "ON")
        message(FATAL_ERROR "LSTM_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
    endif()
endif()
