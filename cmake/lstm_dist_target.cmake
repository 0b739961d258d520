# lstm_dist (alias lstm::dist): the data-parallel part (lstm/dist/), built when LSTM_WITH_MPI is 1.
# It is a target of its own rather than part of lstm::lstm so that programs which do not train
# across processes neither link MPI nor need mpirun. The NCCL back-end is compiled (it includes
# nccl.h and the CUDA runtime, which the header-only part keeps out) into lstm_dist_nccl.
#
# Both are installed and exported with the package (cmake/lstm_install.cmake): a consumer's
# find_package(lstm) finds MPI again (cmake/lstmConfig.cmake.in) and links lstm::dist.
add_library(lstm_dist INTERFACE)
add_library(lstm::dist ALIAS lstm_dist)
set_target_properties(lstm_dist PROPERTIES EXPORT_NAME dist)
target_link_libraries(lstm_dist INTERFACE lstm MPI::MPI_CXX)
target_compile_definitions(lstm_dist INTERFACE LSTM_WITH_MPI=1 LSTM_WITH_NCCL=${LSTM_WITH_NCCL})
if(LSTM_WITH_NCCL)
    add_library(lstm_dist_nccl STATIC ${PROJECT_SOURCE_DIR}/lstm/dist/nccl_backend.cpp)
    set_target_properties(lstm_dist_nccl PROPERTIES POSITION_INDEPENDENT_CODE ON
        EXPORT_NAME dist_nccl)
    target_include_directories(lstm_dist_nccl PRIVATE ${LSTM_NCCL_INCLUDE_DIR})
    target_link_libraries(lstm_dist_nccl PUBLIC lstm::cuda CUDA::cudart ${LSTM_NCCL_LIBRARY})
    target_compile_options(lstm_dist_nccl PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
    target_link_libraries(lstm_dist INTERFACE lstm_dist_nccl)
endif()
