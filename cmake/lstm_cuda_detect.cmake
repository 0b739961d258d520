# Detects nvcc and cuDNN according to LSTM_CUDA (AUTO | ON | OFF) and sets LSTM_WITH_CUDA and
# LSTM_WITH_CUDNN to 0 or 1. CUDA is enabled only after check_language(CUDA) finds a compiler,
# so machines without the toolkit configure cleanly under AUTO.
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
        find_path(LSTM_CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT PATH_SUFFIXES include)
        find_library(LSTM_CUDNN_LIBRARY cudnn
            HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT PATH_SUFFIXES lib64 lib)
        if(LSTM_CUDNN_INCLUDE_DIR AND LSTM_CUDNN_LIBRARY)
            set(LSTM_WITH_CUDNN 1)
            message(STATUS "lstm: cuDNN at ${LSTM_CUDNN_LIBRARY}")
        endif()
    elseif(LSTM_CUDA STREQUAL "ON")
        message(FATAL_ERROR "LSTM_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
    endif()
endif()
