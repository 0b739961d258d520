# ctest driver: install the library into a scratch prefix, then configure, build and run the
# consumer project against that installed copy (not the source tree).
foreach(var SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR WITH_ONEDNN WITH_CUDA WITH_TOOL)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run.cmake needs -D${var}=...")
    endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

include(${CMAKE_CURRENT_LIST_DIR}/../run_step.cmake)

run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# The tool (LSTM_BUILD_TOOLS) is installed beside the library and runs from there (`info`
# without a file describes the host); without it, nothing is installed in its place.
if(WITH_TOOL)
    if(NOT EXISTS ${prefix}/bin/lstm_tool)
        message(FATAL_ERROR "cmake --install did not install bin/lstm_tool")
    endif()
    run_step(${prefix}/bin/lstm_tool info)
elseif(EXISTS ${prefix}/bin/lstm_tool)
    message(FATAL_ERROR "cmake --install installed bin/lstm_tool with LSTM_BUILD_TOOLS off")
endif()
# Plain -O2 and nothing else (no -march, no -DNDEBUG): the flags a consumer may well use, which
# must not change what the library's compiled parts run.
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 -DCMAKE_PREFIX_PATH=${prefix}
    -DCONSUMER_HEADER_DIR=${prefix}/include)
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/consumer)
run_step(${WORK_DIR}/build/consumer_loss)
if(EXISTS ${WORK_DIR}/build/consumer_onednn)
    run_step(${WORK_DIR}/build/consumer_onednn)
endif()
if(WITH_CUDA)
    if(NOT EXISTS ${WORK_DIR}/build/consumer_cuda)
        message(FATAL_ERROR "the build has CUDA, but the installed package did not give the "
                            "consumer lstm::cuda (no consumer_cuda was built)")
    endif()
    # Registers the CUDA variants; needs no GPU.
    run_step(${WORK_DIR}/build/consumer_cuda)
endif()

# A CPU program carries no GPU: what the dynamic loader maps for a program linking lstm::lstm
# alone (ldd lists the libraries the libraries need too) names none of the CUDA libraries, nor
# oneDNN or the OpenCL it brings. The programs that link lstm::cuda and lstm::onednn do map theirs,
# which shows the check sees them.
set(lstm_gpu_libraries "libcudart|libcublas|libcublasLt|libcudnn|libOpenCL|libdnnl")
find_program(LSTM_LDD ldd)
if(LSTM_LDD)
    foreach(program consumer consumer_loss consumer_cuda consumer_onednn)
        if(NOT EXISTS ${WORK_DIR}/build/${program})
            continue()
        endif()
        execute_process(COMMAND ${LSTM_LDD} ${WORK_DIR}/build/${program}
            RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE deps)
        if(NOT rc EQUAL 0)
            message(FATAL_ERROR "ldd ${program} failed (${rc}):\n${deps}")
        endif()
        string(REGEX MATCHALL "(${lstm_gpu_libraries})[^ \t\n]*" found "${deps}")
        if(program MATCHES "^consumer(_loss)?$" AND found)
            message(FATAL_ERROR "${program} links lstm::lstm alone, but maps ${found}:\n${deps}")
        elseif(program STREQUAL "consumer_cuda" AND NOT found MATCHES "libcudart")
            message(FATAL_ERROR "consumer_cuda links lstm::cuda, but ldd shows no libcudart:\n"
                                "${deps}")
        elseif(program STREQUAL "consumer_onednn" AND NOT found MATCHES "libdnnl")
            message(FATAL_ERROR "consumer_onednn links lstm::onednn, but ldd shows no libdnnl:\n"
                                "${deps}")
        endif()
        message(STATUS "${program} maps: ${found}")
    endforeach()
else()
    message(STATUS "no ldd: the consumers' shared libraries are not checked")
endif()
# A program that links lstm::lstm alone configures, builds and runs where none of the optional
# parts' dependencies (the CUDA toolkit, oneDNN, with the OpenCL its CMake config needs, and MPI)
# nor the private header-only ones (Eigen, nlohmann-json) can be found.
set(hidden)
foreach(package CUDAToolkit dnnl OpenCL MPI Eigen3 nlohmann_json)
    list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON)
endforeach()
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/core -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 -DCMAKE_PREFIX_PATH=${prefix}
    -DCONSUMER_CORE_ONLY=ON ${hidden})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/core)
run_step(${WORK_DIR}/core/consumer)
# There, a program that requires lstm::onednn is refused at configure time, with the reason.
if(WITH_ONEDNN)
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer
        -B ${WORK_DIR}/require_onednn -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${prefix}
        -DCONSUMER_COMPONENTS=onednn ${hidden}
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "lstm::onednn is not available: oneDNN's CMake config was")
        message(FATAL_ERROR "requiring lstm::onednn without oneDNN: expected a configure error "
                            "naming the reason, got (${rc}):\n${out}")
    endif()
endif()
# A build with MPI adds tests/dist, and its package must export lstm::dist: the consumer then
# builds consumer_dist against it and runs it with one rank (OpenMPI's flags as tests/dist uses
# them: root allowed, no pinning, shared memory only).
if(EXISTS ${BUILD_DIR}/tests/dist)
    if(NOT EXISTS ${WORK_DIR}/build/consumer_dist OR NOT EXISTS ${WORK_DIR}/build/dist_run.cmake)
        message(FATAL_ERROR "the build has MPI, but the installed package did not give the "
                            "consumer lstm::dist (no consumer_dist was built)")
    endif()
    include(${WORK_DIR}/build/dist_run.cmake)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
    set(ENV{OMP_NUM_THREADS} 1)
    run_step(${CONSUMER_MPIEXEC} ${CONSUMER_NUMPROC_FLAG} 1 --oversubscribe --bind-to none
        --mca pml ob1 --mca btl self,vader ${WORK_DIR}/build/consumer_dist)
endif()
