# Detects MPI and NCCL according to LSTM_MPI and LSTM_NCCL (AUTO | ON | OFF) and sets
# LSTM_WITH_MPI and LSTM_WITH_NCCL to 0 or 1. Under AUTO a missing library only leaves the
# data-parallel part out (with the reason), so machines without them configure cleanly. NCCL
# needs both CUDA (device buffers) and MPI (it exchanges its clique id over MPI), so it is on only
# when those are.
set(LSTM_WITH_MPI 0)
set(LSTM_WITH_NCCL 0)
if(NOT LSTM_MPI STREQUAL "OFF")
    # The C API only: OpenMPI's deprecated C++ bindings would add warnings and a library.
    set(MPI_CXX_SKIP_MPICXX TRUE)
    find_package(MPI COMPONENTS CXX QUIET)
    if(MPI_CXX_FOUND)
        set(LSTM_WITH_MPI 1)
    elseif(LSTM_MPI STREQUAL "ON")
        message(FATAL_ERROR "LSTM_MPI=ON but no MPI was found (install libopenmpi-dev)")
    else()
        message(STATUS "lstm: MPI back-end off: no MPI found (libopenmpi-dev)")
    endif()
endif()
if(NOT LSTM_NCCL STREQUAL "OFF")
    set(lstm_nccl_reason "")
    if(NOT LSTM_WITH_CUDA)
        set(lstm_nccl_reason "it needs the CUDA back-end")
    elseif(NOT LSTM_WITH_MPI)
        set(lstm_nccl_reason "it needs MPI to exchange its clique id")
    else()
        # NCCL_ROOT (a CMake or environment variable) may name the pip wheel nvidia-nccl-cu13,
        # which ships include/ and lib/libnccl.so.2 with no unversioned link.
        find_path(LSTM_NCCL_INCLUDE_DIR nccl.h
            HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
        find_library(LSTM_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
            HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
        if(LSTM_NCCL_INCLUDE_DIR AND LSTM_NCCL_LIBRARY)
            set(LSTM_WITH_NCCL 1)
            message(STATUS "lstm: NCCL at ${LSTM_NCCL_LIBRARY}")
        else()
            set(lstm_nccl_reason "nccl.h or libnccl not found (set NCCL_ROOT)")
        endif()
    endif()
    if(NOT LSTM_WITH_NCCL)
        if(LSTM_NCCL STREQUAL "ON")
            message(FATAL_ERROR "LSTM_NCCL=ON but NCCL cannot be built: ${lstm_nccl_reason}")
        endif()
        message(STATUS "lstm: NCCL back-end off: ${lstm_nccl_reason}")
    endif()
endif()
