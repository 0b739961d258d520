#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/CMakeLists.txt) in their own clang build tree and runs
# each for a fixed time on its seed corpus (tests/fuzz/corpus/<target>/). ctest runs them side by
# side for 20 s (test fuzz_smoke, label fuzz); run them longer, or one of them, by hand:
#
#   bash tests/fuzz/run-smoke.sh [WORK_DIR] [SECONDS] [TARGET...]   # e.g. build/fuzz 600 ctc_fuzz
#
# Targets: safetensors_fuzz, ctc_fuzz, tool_fuzz (all by default).
# Exit codes: 0 no finding, 77 skipped because clang++, libFuzzer or clang's OpenMP is not
# installed (Debian packages clang, libclang-rt-dev, libomp-dev; scripts/install-deps.sh installs
# them), anything else a failure: a crashing input is left in WORK_DIR as crash-* / timeout-* /
# oom-*; reproduce it with WORK_DIR/tree/tests/fuzz/<target> <file>.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="${1:-$root/build/fuzz}"
seconds="${2:-20}"
shift $(($# < 2 ? $# : 2))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors_fuzz ctc_fuzz tool_fuzz)

cxx="${LSTM_FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
    for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
        if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
    done
fi
if [ -z "$cxx" ]; then
    echo "run-smoke: SKIP: no clang++ found (Debian package: clang)"
    exit 77
fi
mkdir -p "$work"

# libFuzzer and clang's OpenMP ship in separate packages from the compiler; tell their absence
# from a broken build.
probe="$work/probe.cpp"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' '#include <omp.h>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return omp_get_max_threads() > 0 ? 0 : 1; }' \
    > "$probe"
if ! "$cxx" -fsanitize=fuzzer -fopenmp "$probe" -o "$work/probe" >"$work/probe.log" 2>&1; then
    echo "run-smoke: SKIP: $cxx cannot link -fsanitize=fuzzer -fopenmp" \
        "(Debian packages: libclang-rt-dev, libomp-dev)"
    cat "$work/probe.log"
    exit 77
fi

# oneDNN is left out: Debian's libdnnl uses GCC's OpenMP runtime, clang's code uses LLVM's, and
# one process should not hold both. The CUDA back-end, tests, bench and examples are not fuzzed.
# -O0: under ASan and coverage, clang needs over 10 minutes for the fused kernel's Highway code
# at -O1 and 15 s at -O0; the smoke runs trade execution speed for that. Long runs may want
# LSTM_FUZZ_OPT="-O1 -g" (in a fresh WORK_DIR).
opt="${LSTM_FUZZ_OPT:--O0 -g1}"
tree="$work/tree"
if [ ! -f "$tree/build.ninja" ]; then
    cmake -S "$root" -B "$tree" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" \
        -DLSTM_FUZZ=ON -DLSTM_ONEDNN=OFF -DLSTM_CUDA=OFF -DLSTM_BUILD_TESTS=OFF \
        -DLSTM_BUILD_BENCH=OFF -DLSTM_BUILD_EXAMPLES=OFF >"$work/configure.log" 2>&1 || {
        cat "$work/configure.log"
        exit 1
    }
fi
cmake --build "$tree" --target "${targets[@]}"

# New inputs go into scratch corpora in the build tree, never into the source tree's seeds. The
# targets run side by side, each for the whole time: one after another, CI's 2 cores would idle
# one of them for the whole smoke. Their OpenMP threads sleep instead of spinning when idle
# (OMP_WAIT_POLICY=passive), so that one target's spinning thread does not take a core another
# target needs (ctc_fuzz ran about twice as many inputs so). Each one's output is printed when
# all have ended.
cd "$work"
pids=()
for target in "${targets[@]}"; do
    corpus="$work/corpus-$target"
    mkdir -p "$corpus"
    echo "run-smoke: fuzzing $target for ${seconds}s (seeds: $here/corpus/$target)"
    # libFuzzer's own exit code for a finding is 77, which ctest reads as "skipped": a finding
    # must fail the test instead.
    OMP_WAIT_POLICY=passive "$tree/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -error_exitcode=1 \
        -timeout_exitcode=1 "$corpus" "$here/corpus/$target" >"$work/$target.log" 2>&1 &
    pids+=($!)
done
failed=()
for i in "${!targets[@]}"; do
    wait "${pids[$i]}" || failed+=("${targets[$i]}")
done
for target in "${targets[@]}"; do
    echo "run-smoke: $target's output"
    cat "$work/$target.log"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "run-smoke: FAILED: ${failed[*]} (inputs that fail are in $work)"
    exit 1
fi
