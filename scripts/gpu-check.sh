#!/usr/bin/env bash
# The one GPU run: build, test every GPU case in its own process, memcheck, benchmark, summarize.
# Written for a bare CUDA machine (the CUDA toolkit, CMake, ninja, g++, Python; no Debian -dev
# packages, no network), lent for minutes, whose output comes back only as the last lines printed
# and a few files.
#
#   bash scripts/gpu-check.sh [--quick] [build-dir]          (default build-dir: build-gpu)
#
# Before: scripts/gpu-deps.sh on the development machine makes .gpu-deps (Eigen, nlohmann-json,
# Catch2, Google Benchmark, Highway); carry that folder with the working tree. cuDNN comes from
# CUDNN_ROOT or from the pip wheel nvidia-cudnn-cu13 (asked of python3); without it the script
# stops before building, because a build without cuDNN would silently drop the cudnn variant.
#
# Phases, each printing its seconds:
#   1. device and cuDNN;  2. configure;  3. build lstm_gpu_tests and lstm_bench;
#   4. every GPU test case in its own process with its own time limit (cuDNN and CTC cases
#      first), one line each: passed, failed, crashed, timed out or skipped, with the worst error
#      as a fraction of its tolerance;
#   5. compute-sanitizer memcheck on the small case of each kernel family ([memcheck]), if time is
#      left;  6. the GPU benchmarks (Braun and DeepBench), console output, tabulated even when cut
#      short;  7. the summary table.
# --quick stops after phase 4. Time limits hold the full run to 7 minutes and --quick to 4; on an
# H200 machine with 16 host cores the full run took 151 s and --quick 114 s (2026-12-04).
#
# Files (at most 8) go to $OUT when it is set (the device machine's folder that comes back), else
# to <build-dir>/gpu-check: summary.txt, build.log, tests.log, cases.tsv, memcheck.log,
# memcheck.tsv, bench.log.
#
# Exit status: 0 only when every case passed, memcheck found nothing and no benchmark errored;
# 2 when the build failed; 3 when cuDNN was not found; 1 otherwise (a case skipped for want of a
# device counts as not verified). With LSTM_GPU_CHECK_REHEARSAL=1 (scripts/gpu-check-rehearsal.sh,
# no GPU) a skipped case is the expected outcome: 0 when every case was skipped or passed.
#
# Each case's result is written whole before the collector can see it (scripts/gpu_check_lib.sh:
# written under a temporary name, then renamed), so cases that end at the same moment are each
# reported once, with their real exit status.
#
# Environment (defaults in brackets): LSTM_GPU_DEPS [.gpu-deps], CUDNN_ROOT, NCCL_ROOT,
# LSTM_GPU_CHECK_BUDGET [420 s; 240 with --quick], LSTM_GPU_CHECK_BUILD_LIMIT [220 s],
# LSTM_GPU_CHECK_CASE_LIMIT [90 s per case], LSTM_GPU_CHECK_PARALLEL [cases at once: 8 on 16 or
# more cores, else 4], LSTM_GPU_CHECK_MIN_TIME [0.05 s per benchmark case],
# LSTM_GPU_CHECK_BENCH_FILTER, CMAKE_CUDA_ARCHITECTURES [90], LSTM_GPU_CHECK_REHEARSAL [0].

set -u -o pipefail

usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

quick=0
build=""
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "gpu-check: unknown option $arg" >&2; exit 64 ;;
        *) build="$arg" ;;
    esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${build:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
out="${OUT:-$build/gpu-check}"
deps="${LSTM_GPU_DEPS:-$root/.gpu-deps}"
case "$deps" in /*) ;; *) deps="$root/$deps" ;; esac
budget="${LSTM_GPU_CHECK_BUDGET:-$((quick ? 240 : 420))}"
build_limit="${LSTM_GPU_CHECK_BUILD_LIMIT:-220}"
case_limit="${LSTM_GPU_CHECK_CASE_LIMIT:-90}"
jobs="$(nproc)"
# Cases at once: each takes a CUDA context and a share of the cores for its CPU oracle.
parallel="${LSTM_GPU_CHECK_PARALLEL:-$((jobs >= 16 ? 8 : 4))}"
min_time="${LSTM_GPU_CHECK_MIN_TIME:-0.05}"
bench_filter="${LSTM_GPU_CHECK_BENCH_FILTER:-(braun|deepbench)/.*/cuda/}"

mkdir -p "$out" "$build"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
summary="$out/summary.txt"
phases="$work/phases.tsv"
: > "$phases"
rm -f "$out"/{summary.txt,build.log,tests.log,cases.tsv,memcheck.log,memcheck.tsv,bench.log}

start=$SECONDS
deadline=$((start + budget))
left() { echo $((deadline - SECONDS)); }
banner() { printf '\n==== %s (at %d s) ====\n' "$1" $((SECONDS - start)); }
phase_start=0
begin_phase() { banner "$1"; phase_start=$SECONDS; }
# phase name, outcome: one row of the summary's phase table.
end_phase() {
    local seconds=$((SECONDS - phase_start))
    printf '%s\t%d\t%s\n' "$1" "$seconds" "$2" >> "$phases"
    echo "-- $1: $2 ($seconds s)"
}
summary_args=()
[ "${LSTM_GPU_CHECK_REHEARSAL:-0}" = 1 ] && summary_args=(--rehearsal)
summarize() {
    python3 "$root/scripts/gpu_check_summary.py" --out "$out" --phases "$phases" \
        --info "$work/info.txt" "${summary_args[@]}" > "$summary"
    local rc=$?
    cat "$summary"
    return $rc
}

# ---------------------------------------------------------------------------------------------
begin_phase "device and cuDNN"
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)"
    cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "host CPU: $cpu, $jobs cores"
    if command -v nvidia-smi > /dev/null 2>&1; then
        gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
        echo "GPU: $(echo "$gpu" | head -1)"
    else
        echo "GPU: none (nvidia-smi not found)"
    fi
    echo "nvcc: $(nvcc --version 2> /dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
} > "$work/info.txt"
cat "$work/info.txt"

# python3 -> the folder of an installed nvidia-* wheel (nvidia.cudnn, nvidia.nccl), or nothing.
wheel_dir() {
    python3 -c "import importlib, sys
m = importlib.import_module('nvidia.$1')
print(list(m.__path__)[0])" 2> /dev/null
}
cudnn_root="${CUDNN_ROOT:-}"
cudnn_from="CUDNN_ROOT"
if [ -z "$cudnn_root" ]; then
    cudnn_root="$(wheel_dir cudnn)"
    cudnn_from="pip wheel nvidia-cudnn-cu13"
fi
if [ -z "$cudnn_root" ]; then
    nvcc_path="$(command -v nvcc 2> /dev/null || echo /nonexistent/bin/nvcc)"
    toolkit="$(dirname "$(dirname "$nvcc_path")")"
    if [ -f "$toolkit/include/cudnn.h" ]; then cudnn_root="$toolkit"; cudnn_from="CUDA toolkit"; fi
fi
cudnn_lib=""
for d in "$cudnn_root/lib" "$cudnn_root/lib64"; do
    if compgen -G "$d/libcudnn.so*" > /dev/null; then cudnn_lib="$d"; break; fi
done
if [ -z "$cudnn_root" ] || [ ! -f "$cudnn_root/include/cudnn.h" ] || [ -z "$cudnn_lib" ]; then
    msg="cuDNN not found (no CUDNN_ROOT, no python3 module nvidia.cudnn, nothing in the toolkit;"
    msg="$msg looked for include/cudnn.h and lib/libcudnn.so*): stopping before the build"
    echo "gpu-check: $msg" >&2
    end_phase "device and cuDNN" "$msg"
    summarize
    exit 3
fi
cudnn_version="$(sed -n 's/^#define CUDNN_\(MAJOR\|MINOR\|PATCHLEVEL\) *\([0-9]*\).*/\2/p' \
    "$cudnn_root/include/cudnn_version.h" 2> /dev/null | paste -sd.)"
echo "cuDNN: ${cudnn_version:-?} from the $cudnn_from at $cudnn_root" | tee -a "$work/info.txt"
# NCCL is optional (its test needs MPI too); the wheel's library has no unversioned link either.
nccl_root="${NCCL_ROOT:-$(wheel_dir nccl)}"
[ -n "$nccl_root" ] && export NCCL_ROOT="$nccl_root"
# cuDNN loads its sub-libraries (libcudnn_ops.so.9, ...) by name at run time.
export LD_LIBRARY_PATH="$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -n "$nccl_root" ] && export LD_LIBRARY_PATH="$nccl_root/lib:$LD_LIBRARY_PATH"
end_phase "device and cuDNN" "cuDNN ${cudnn_version:-?}"

# ---------------------------------------------------------------------------------------------
begin_phase "configure ($build)"
prefix_args=()
if [ -d "$deps/usr" ]; then
    prefix_args=("-DCMAKE_PREFIX_PATH=$deps/usr")
else
    echo "no $deps (scripts/gpu-deps.sh makes it): relying on packages installed here"
fi
# Ninja when it is there (pip's ninja package provides it on images without the Debian one).
generator="Unix Makefiles"
command -v ninja > /dev/null 2>&1 && generator=Ninja
[ -f "$build/CMakeCache.txt" ] && generator="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' \
    "$build/CMakeCache.txt")"
timeout 60 cmake -S "$root" -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
    -DLSTM_CUDA=ON -DLSTM_CUDNN=ON "-DCUDNN_ROOT=$cudnn_root" -DLSTM_ONEDNN=OFF \
    -DLSTM_BUILD_TESTS=ON -DLSTM_BUILD_BENCH=ON -DLSTM_BUILD_EXAMPLES=OFF \
    "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}" "${prefix_args[@]}" \
    > "$out/build.log" 2>&1
rc=$?
grep -E "^-- lstm" "$out/build.log"
if [ "$rc" -ne 0 ]; then
    tail -n 30 "$out/build.log"
    end_phase configure "failed (exit $rc); see build.log"
    summarize
    exit 2
fi
end_phase configure "ok"

# ---------------------------------------------------------------------------------------------
begin_phase "build lstm_gpu_tests lstm_bench (-j $jobs, limit $build_limit s)"
timeout "$build_limit" cmake --build "$build" --target lstm_gpu_tests lstm_bench -j "$jobs" \
    >> "$out/build.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    grep -E -m 20 "error|Error" "$out/build.log"
    tail -n 15 "$out/build.log"
    why="failed (exit $rc)"
    [ "$rc" -eq 124 ] && why="stopped at its limit of $build_limit s"
    end_phase build "$why; see build.log"
    summarize
    exit 2
fi
end_phase build "ok"

# ---------------------------------------------------------------------------------------------
exe="$build/tests/lstm_gpu_tests"
# run_case, classify and run_cases: the case runner and its collector.
gpu_check_exe="$exe"
gpu_check_work="$work"
# shellcheck source=scripts/gpu_check_lib.sh
source "$root/scripts/gpu_check_lib.sh"

# Reserve the later phases' minimum (benchmarks and summary) unless --quick.
if [ "$quick" -eq 1 ]; then reserve=5; else reserve=70; fi
begin_phase "GPU test cases, one process each ($parallel at a time, limit $case_limit s each)"
# Cases share the cores: the CPU oracle inside each case gets its part of them.
export OMP_NUM_THREADS=$(((jobs + parallel - 1) / parallel))
"$exe" --list-test-names-only 2> "$work/list.err" | sed '/^[[:space:]]*$/d' > "$work/cases.txt"
if [ ! -s "$work/cases.txt" ]; then
    cat "$work/list.err"
    end_phase tests "could not list the cases"
    summarize
    exit 1
fi
# cuDNN and CTC first: they are the cases a first run most needs to see.
{ grep -E 'cudnn|ctc' "$work/cases.txt"; grep -v -E 'cudnn|ctc' "$work/cases.txt"; } |
    run_cases "$out/cases.tsv" "$out/tests.log" $((deadline - reserve)) "$parallel" "$case_limit"
counts="$(cut -f2 "$out/cases.tsv" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')"
end_phase tests "${counts%, }"

if [ "$quick" -eq 0 ]; then
    # -----------------------------------------------------------------------------------------
    begin_phase "compute-sanitizer memcheck, one small case per kernel family"
    if ! command -v compute-sanitizer > /dev/null 2>&1; then
        echo "compute-sanitizer not found" > "$out/memcheck.log"
        end_phase memcheck "skipped: compute-sanitizer not found"
    elif [ "$(left)" -lt 60 ]; then
        end_phase memcheck "skipped: $(left) s left, kept for the benchmarks"
    else
        "$exe" --list-test-names-only "[memcheck]" 2> /dev/null | sed '/^[[:space:]]*$/d' |
            run_cases "$out/memcheck.tsv" "$out/memcheck.log" $((deadline - 50)) 2 "$case_limit" \
                compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20
        counts="$(cut -f2 "$out/memcheck.tsv" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')"
        end_phase memcheck "${counts%, }"
    fi

    # -----------------------------------------------------------------------------------------
    bench_limit=$(($(left) - 8))
    begin_phase "GPU benchmarks ($bench_filter, limit $bench_limit s)"
    if [ "$bench_limit" -lt 15 ]; then
        end_phase bench "skipped: $(left) s left"
    else
        # Console output: each case's line is printed as it ends, so a run stopped at its limit
        # still leaves every finished case to tabulate.
        timeout -k 5 "$bench_limit" "$build/bench/lstm_bench" --benchmark_filter="$bench_filter" \
            --benchmark_min_time="$min_time" --benchmark_time_unit=ms \
            --benchmark_color=false --benchmark_counters_tabular=false \
            > "$out/bench.log" 2>&1
        rc=$?
        why="ok"
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            why="stopped at its limit (the finished cases are tabulated)"
        fi
        [ "$rc" -ne 0 ] && [ "$why" = ok ] && why="exit $rc"
        end_phase bench "$why"
    fi
fi

banner "summary"
summarize
exit $?
