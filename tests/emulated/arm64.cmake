# ctest driver: the instruction-set cases on 64-bit ARM, built with Debian's cross compiler
# (cmake/aarch64-linux-gnu.cmake) and run under QEMU's user-mode emulator. The x86 hosts that test
# this project never run the ARM code otherwise: the NEON target of the fused kernels and the
# NEON and SVE targets of the CTC kernel, the ARM detection and the floating-point control
# register (FPCR) that flushes denormals. Two CPU models: QEMU's `max` (SVE2, which the CTC kernel
# takes) and a Cortex-A72 (NEON only, as the Raspberry Pi 4). Speed is not measured here.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DQEMU=<qemu-aarch64 or empty> -P arm64.cmake
foreach(var SOURCE_DIR WORK_DIR GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "arm64.cmake needs -D${var}=...")
    endif()
endforeach()

cmake_host_system_information(RESULT processor QUERY OS_PLATFORM)
if(processor MATCHES "^(aarch64|arm64)$")
    message("LSTM_TEST_SKIPPED: this host is 64-bit ARM: the whole suite runs here natively")
    return()
endif()
if(NOT QEMU)
    message("LSTM_TEST_SKIPPED: qemu-aarch64 is not installed (Debian's qemu-user; "
            "scripts/install-deps.sh installs it)")
    return()
endif()
find_program(cross_compiler aarch64-linux-gnu-g++)
# What the emulated programs load at run time, from Debian's arm64 packages (multiarch).
set(arm64_lib /usr/lib/aarch64-linux-gnu)
set(missing "")
if(NOT cross_compiler)
    list(APPEND missing "g++-aarch64-linux-gnu")
endif()
foreach(pair "libhwy.so;libhwy-dev:arm64" "libgomp.so.1;libgomp1:arm64"
        "libstdc++.so.6;libstdc++6:arm64")
    list(GET pair 0 file)
    list(GET pair 1 package)
    if(NOT EXISTS ${arm64_lib}/${file})
        list(APPEND missing ${package})
    endif()
endforeach()
if(missing)
    string(REPLACE ";" ", " missing "${missing}")
    message("LSTM_TEST_SKIPPED: building for 64-bit ARM needs Debian's ${missing} "
            "(scripts/install-deps.sh installs them on x86-64 hosts)")
    return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
# Only the files of the cases run below. oneDNN is not built (the host's is x86 code).
build_for_emulation(arm64
    OPTIONS -DCMAKE_TOOLCHAIN_FILE=${SOURCE_DIR}/cmake/aarch64-linux-gnu.cmake -DLSTM_ONEDNN=OFF
    FILES fused_test.cpp isa_cap_test.cpp host_info_test.cpp ctc_test.cpp ctc_decode_test.cpp
    ctc_head_test.cpp variants_test.cpp)

# As in run.cmake, less fused's 32000-frame case and CTC's at T = 5000; plus every variant
# against the reference on all the shapes of tests/variants_test.cpp.
set(arm_cases "[fused]~*32000*,[isa_cap],[host_info],[peak],[ctc]~*5000*")
set(x86_skips "LSTM_TEST_SKIPPED: the avx512 path does not run here"
    "LSTM_TEST_SKIPPED: the avx2 path does not run here")
set(neon_skip "the neon path does not run here")

run_as(max COMMAND ${tool} info EXPECT "cpu_isa +NEON yes, SVE yes, SVE2 yes"
    "fused +cpu +neon kernels \\(Highway, NEON target\\)" "ctc +cpu +Highway SVE2")
run_as(max COMMAND ${tests} "${arm_cases},every CPU variant matches the reference"
    EXPECT ${x86_skips} REJECT ${neon_skip})

run_as(cortex-a72 COMMAND ${tool} info EXPECT "cpu_isa +NEON yes, SVE no, SVE2 no"
    "fused +cpu +neon kernels \\(Highway, NEON target\\)" "ctc +cpu +Highway NEON")
run_as(cortex-a72 COMMAND ${tests} "${arm_cases}" EXPECT ${x86_skips} REJECT ${neon_skip})
