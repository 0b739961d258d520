# lstm_variants: the registry and the CPU variants' host code (lstm/registry.cpp), the report of
# the paths they take (lstm/host_info.cpp), the safetensors reader and writer (lstm/io/safetensors.cpp, safetensors_write.cpp) and the float and double instances of
# Lstm, the dense layer, the optimizers and SequenceModel (lstm/templates.cpp), compiled once in
# the library instead of in each program that includes <lstm/lstm.hpp>. Programs then compile only the interface
# (lstm/variant.hpp), and the kernels run at the speed this build gives them, whatever flags the
# program uses. The fused variant's hot loops dispatch at run time (lstm_cpu, and the AVX-512
# kernel behind a target pragma); the Eigen code of basic and of fused's portable path is compiled
# for the instruction set this target is built with: -march=native under LSTM_NATIVE_ARCH (the
# default, for a library used on the machine that builds it); turn that off for a package meant
# for other machines.
#
# kernels/cpu/native/ holds the host arithmetic that programs would otherwise compile from headers
# with their own flags: the Eigen GEMM behind kernels/cpu/gemm.hpp (basic, fused's portable path,
# the dense layer) and the optimizers' loops (kernels/cpu/optim.hpp).
file(GLOB LSTM_NATIVE_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cpu/native/*.cpp)
lstm_static_part(lstm_variants lstm_variants ${PROJECT_SOURCE_DIR}/lstm/registry.cpp
    ${PROJECT_SOURCE_DIR}/lstm/host_info.cpp
    ${PROJECT_SOURCE_DIR}/lstm/io/safetensors.cpp
    ${PROJECT_SOURCE_DIR}/lstm/io/safetensors_write.cpp
    ${PROJECT_SOURCE_DIR}/lstm/templates.cpp
    ${LSTM_NATIVE_SOURCES})
# Adam's square root: with errno left alone it vectorises (kernels/cpu/native/optim.cpp).
set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cpu/native/optim.cpp
    PROPERTIES COMPILE_OPTIONS -fno-math-errno)
target_compile_definitions(lstm_variants PUBLIC
    LSTM_WITH_CUDA=${LSTM_WITH_CUDA}
    LSTM_WITH_CUDNN=${LSTM_WITH_CUDNN}
    LSTM_WITH_ONEDNN=${LSTM_WITH_ONEDNN})
# Eigen and nlohmann-json are private: no public header includes them, and a program that
# included one by accident would fail to compile without their include paths. Both are
# header-only, so the installed static library needs nothing of them at link time either:
# BUILD_INTERFACE keeps them out of the export, and a consumer's find_package(lstm) does not
# look for them.
target_link_libraries(lstm_variants PUBLIC lstm_cpu OpenMP::OpenMP_CXX
    PRIVATE $<BUILD_INTERFACE:Eigen3::Eigen> $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)
# With CUDA, the stand-ins for the CUDA entry points a program without lstm::cuda can reach
# (lstm/cuda/link.hpp): lstm_variants names lstm_cuda's functions, but does not link it.
if(LSTM_WITH_CUDA)
    target_sources(lstm_variants PRIVATE ${PROJECT_SOURCE_DIR}/lstm/cuda/absent.cpp)
endif()
if(LSTM_NATIVE_ARCH)
    target_compile_options(lstm_variants PRIVATE -march=native)
endif()

# lstm_onednn: the optional `onednn` variant (lstm/registry_onednn.cpp), the only part that links
# oneDNN. A program that links lstm::onednn gets the variant in its registry; one that does not
# links no oneDNN at all. The registry refers to the variant through weak symbols
# (lstm/detail/onednn_hooks.hpp), which do not make the linker take an archive member by
# themselves, so the target's link option asks for it by name.
if(LSTM_WITH_ONEDNN)
    lstm_static_part(lstm_onednn onednn ${PROJECT_SOURCE_DIR}/lstm/registry_onednn.cpp)
    set_target_properties(lstm_onednn PROPERTIES EXPORT_NAME onednn)
    target_link_libraries(lstm_onednn PUBLIC lstm_variants DNNL::dnnl)
    target_link_options(lstm_onednn INTERFACE "LINKER:--undefined=lstm_onednn_variant")
    if(LSTM_NATIVE_ARCH)
        target_compile_options(lstm_onednn PRIVATE -march=native)
    endif()
endif()
