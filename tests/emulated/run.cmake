# ctest driver: the suite's instruction-set cases on CPUs this machine is not, under QEMU's
# user-mode emulator. ctest's capped runs (LSTM_MAX_CPU_ISA, DNNL_MAX_CPU_ISA) still execute on
# the host's CPU, which has every instruction they leave out, so a stray AVX-512 instruction in a
# path meant for AVX2 would pass there. QEMU reports the CPU model's CPUID to the program, and its
# translator has no AVX-512 at all: any AVX-512 instruction stops the run with SIGILL, as it would
# on an AMD Zen 3. The library is built portable (no -march, as a consumer building with plain -O2
# does), so the same binaries run on every model; each model must detect its own instruction
# sets, take the paths named below and pass the cases, and report the paths it cannot run as
# skipped. Emulated vector code runs about 100 times slower, hence a selection of cases.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DQEMU=<qemu-x86_64 or empty> -P run.cmake
foreach(var SOURCE_DIR WORK_DIR GENERATOR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run.cmake needs -D${var}=...")
    endif()
endforeach()

cmake_host_system_information(RESULT processor QUERY OS_PLATFORM)
if(NOT processor MATCHES "^(x86_64|AMD64)$")
    message("LSTM_TEST_SKIPPED: emulating x86 CPU models needs an x86-64 host, this is "
            "'${processor}'")
    return()
endif()
if(NOT QEMU)
    message("LSTM_TEST_SKIPPED: qemu-x86_64 is not installed (Debian's qemu-user; "
            "scripts/install-deps.sh installs it)")
    return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
# Only the files of the cases run below (a third of the suite's compile time).
build_for_emulation(portable OPTIONS -DLSTM_NATIVE_ARCH=OFF
    FILES fused_test.cpp onednn_test.cpp isa_cap_test.cpp host_info_test.cpp ctc_test.cpp
    ctc_decode_test.cpp ctc_head_test.cpp variants_test.cpp)

# The cases: every CPU-specific path and how it is chosen (fused, onednn, the CTC kernel, the
# instruction-set cap and the host report). Left out for time: fused's 32000-frame case (1.8
# minutes as the Zen 3) and CTC's at T = 5000 (5 s natively), which run the kernels of the rest.
set(isa_cases "[fused]~*32000*,[onednn],[isa_cap],[host_info],[peak],[ctc]~*5000*")

# AMD Zen 3 (EPYC Milan): AVX2 and FMA, no AVX-512. Also every variant against the reference on
# all the shapes of tests/variants_test.cpp (about 2.5 minutes): the shapes for which oneDNN
# takes another weight layout on AVX2 CPUs among them.
run_as(EPYC-Milan COMMAND ${tool} info EXPECT
    "AVX2 yes, FMA yes, AVX-512F no" "fused +cpu +avx2 kernels \\(Highway, AVX2 target\\)"
    "onednn +cpu +oneDNN JIT up to avx2" "ctc +cpu +Highway AVX2")
run_as(EPYC-Milan COMMAND ${tests} "${isa_cases},every CPU variant matches the reference" EXPECT
    "LSTM_TEST_SKIPPED: the avx512 path does not run here")

# Intel Nehalem: SSE4.2, no AVX, no AES (so Highway's widest target there is SSSE3).
run_as(Nehalem COMMAND ${tool} info EXPECT
    "AVX2 no, FMA no, AVX-512F no" "fused +cpu +eigen kernels" "onednn +cpu +oneDNN JIT up to sse41"
    "ctc +cpu +Highway SSSE3")
run_as(Nehalem COMMAND ${tests} "${isa_cases}" EXPECT
    "LSTM_TEST_SKIPPED: the avx512 path does not run here"
    "LSTM_TEST_SKIPPED: the avx2 path does not run here")
