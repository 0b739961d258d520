# `cmake --install` gives a package that find_package(lstm) + target_link_libraries(app lstm::lstm)
# consumes: the headers of lstm/ and kernels/, the exported interface target and its config. A
# build with CUDA also exports lstm::cuda (the CUDA variants, kernels and runtime services), one
# with oneDNN lstm::onednn, and one with MPI lstm::dist (data-parallel training; with NCCL its
# compiled device back-end, lstm::dist_nccl, which lstm::dist links and which links lstm::cuda).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Headers of the parts this build has, and only those: a header of a part the build left out
# declares what the package does not define, and some include what the consumer's machine need
# not have (mpi.h, the CUDA runtime's headers). The headers of the parts it has never include
# one of these (tests/consumer checks that every installed header compiles on its own).
set(lstm_header_excludes
    # CUDA-including helpers of lstm_cuda's own sources; consumers never include them.
    PATTERN "internal" EXCLUDE)
if(NOT LSTM_WITH_CUDA)
    # The CUDA back-end: its services, variants, device kernels and the CUDA halves of the
    # model's layers and losses (their CPU headers include them only under LSTM_WITH_CUDA).
    list(APPEND lstm_header_excludes
        REGEX "/lstm/cuda$" EXCLUDE
        REGEX "/kernels/cuda$" EXCLUDE
        REGEX "/lstm/variants/(cuda_|cudnn)[^/]*$" EXCLUDE
        REGEX "/lstm/nn/[^/]*_cuda\\.hpp$" EXCLUDE
        REGEX "/lstm/loss/cross_entropy_cuda\\.hpp$" EXCLUDE)
elseif(NOT LSTM_WITH_CUDNN)
    list(APPEND lstm_header_excludes REGEX "/lstm/variants/cudnn[^/]*$" EXCLUDE)
endif()
if(NOT LSTM_WITH_ONEDNN)
    list(APPEND lstm_header_excludes REGEX "/lstm/variants/onednn\\.hpp$" EXCLUDE)
endif()
if(NOT LSTM_WITH_MPI)
    list(APPEND lstm_header_excludes REGEX "/lstm/dist$" EXCLUDE)
elseif(NOT LSTM_WITH_NCCL)
    list(APPEND lstm_header_excludes REGEX "/lstm/dist/nccl_backend\\.hpp$" EXCLUDE)
endif()
install(DIRECTORY lstm kernels DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" ${lstm_header_excludes})
if(NOT LSTM_WITH_CUDA)
    # kernels/cpu/optim.hpp shares the optimizers' update rules with the CUDA kernels through
    # this one, which includes no CUDA header (nor does the launcher convention it names), and
    # lstm/loss/ctc.hpp includes ctc_cuda.hpp, whose declarations need lstm/cuda/link.hpp.
    install(FILES kernels/cuda/optim.hpp kernels/cuda/launch.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kernels/cuda)
    install(FILES lstm/cuda/link.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lstm/cuda)
endif()
install(TARGETS lstm lstm_cpu lstm_variants EXPORT lstmTargets)
install(EXPORT lstmTargets NAMESPACE lstm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
# The optional parts in export files of their own: the package config loads each only where its
# dependency is found, so that a program linking lstm::lstm alone needs neither the CUDA toolkit,
# oneDNN nor MPI.
if(LSTM_WITH_CUDA)
    # Its link interface names libcudnn by the absolute path this build found.
    install(TARGETS lstm_cuda lstm_cuda_component EXPORT lstmCudaTargets)
    install(EXPORT lstmCudaTargets NAMESPACE lstm::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
endif()
if(LSTM_WITH_ONEDNN)
    install(TARGETS lstm_onednn EXPORT lstmOnednnTargets)
    install(EXPORT lstmOnednnTargets NAMESPACE lstm::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
endif()
if(LSTM_WITH_MPI)
    install(TARGETS lstm_dist EXPORT lstmDistTargets)
    if(LSTM_WITH_NCCL)
        # Its link interface names libnccl by the absolute path this build found.
        install(TARGETS lstm_dist_nccl EXPORT lstmDistTargets)
    endif()
    install(EXPORT lstmDistTargets NAMESPACE lstm::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
endif()
configure_package_config_file(cmake/lstmConfig.cmake.in
    ${CMAKE_CURRENT_BINARY_DIR}/lstmConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/lstmConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lstmConfig.cmake
    ${CMAKE_CURRENT_BINARY_DIR}/lstmConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lstm)
