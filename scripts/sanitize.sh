#!/usr/bin/env bash
# Builds the tests with AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover: the
# first report fails the run) in their own build tree, and runs them. GCC's sanitizer runtimes come
# with Debian's g++, so nothing beyond scripts/install-deps.sh is needed.
#
#   bash scripts/sanitize.sh            # the hostile-input subset: io, CTC, CTC decoding,
#                                       # cross-entropy, the tool, the registry, errors, memory,
#                                       # batches, checkpoints (ctest runs this: sanitize_subset)
#   bash scripts/sanitize.sh all        # the whole CPU suite (about 10 minutes on 2 cores)
#   bash scripts/sanitize.sh subset DIR # build tree DIR instead of build-sanitize-<mode>
#
# The library's compiled parts are sanitized too, so a bad access inside a kernel shows where it
# happens. CUDA, the bench and the examples are left out (nvcc does not take these flags, and
# they read no outside input). Exit code: 0 clean, anything else a report or a failed test.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-subset}"
dir="${2:-$root/build-sanitize-$mode}"

case "$mode" in
subset)
    files="io_test.cpp;ctc_test.cpp;ctc_decode_test.cpp;cross_entropy_test.cpp;tool_test.cpp"
    files+=";variants_test.cpp;errors_test.cpp;memory_test.cpp;batch_test.cpp"
    files+=";checkpoint_test.cpp;host_info_test.cpp"
    ;;
all) files="" ;;
*)
    echo "sanitize: mode must be subset or all, got '$mode'" >&2
    exit 2
    ;;
esac

# -O0 -g1: sanitized code needs frames and lines for its reports, and under the sanitizers -O1
# builds the fused kernel's file many times more slowly (docs/testing.md); the run, less the
# cases tagged [long] (below), takes seconds at -O0 all the same.
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${LSTM_SANITIZE_OPT:--O0 -g1}" -DLSTM_SANITIZE=ON "-DLSTM_TEST_FILES=$files" \
    -DLSTM_CUDA=OFF -DLSTM_BUILD_BENCH=OFF -DLSTM_BUILD_EXAMPLES=OFF >"$dir.configure.log" 2>&1 ||
    {
        cat "$dir.configure.log"
        exit 1
    }
cmake --build "$dir" --target lstm_tests lstm_tool

# detect_leaks: every allocation is released by the end of a test run. OpenMP's thread pool and
# oneDNN's JIT cache live until exit, which LeakSanitizer does not count as leaks.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The hostile-input cases and the tool's binary (its command-line cases: exit codes, messages).
# Cases tagged [long] (float's accuracy over 5000 CTC frames) are left out: at -O0 they took 96
# of the run's 113 s, and the shorter cases run the same code; the ordinary suite runs them.
"$dir/tests/lstm_tests" "~[long]"
ctest --test-dir "$dir" -R '^tool_cli_' --output-on-failure
echo "sanitize: $mode clean"
