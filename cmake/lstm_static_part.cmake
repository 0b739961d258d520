# lstm_static_part(<name> <alias> <sources>...): one compiled part of the library: a static,
# position-independent C++17 library `<name>` (alias lstm::<alias>) that finds the headers from
# the source tree or the installed include folder, with the project's warnings.
function(lstm_static_part name alias)
    add_library(${name} STATIC ${ARGN})
    add_library(lstm::${alias} ALIAS ${name})
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_include_directories(${name} PUBLIC
        $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
        $<INSTALL_INTERFACE:include>)
    target_compile_features(${name} PUBLIC cxx_std_17)
    target_compile_options(${name} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
endfunction()

# The compiled parts are static by design: lstm::onednn reaches the registry through weak symbols
# that only an archive member taken by --undefined resolves (lstm/detail/onednn_hooks.hpp), and
# they are position-independent, so they link into a shared library of the program's own.
if(BUILD_SHARED_LIBS)
    message(STATUS "lstm: BUILD_SHARED_LIBS is ON, but lstm's compiled parts stay static "
                   "(position-independent) libraries by design")
endif()
