#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: configure with CUDA, build the GPU tests and the
# bench with every core, run the GPU tests (ctest label `gpu`, their output printed), run the GPU
# benchmarks (Braun and DeepBench, CUDA variants only, JSON kept) and print a table last:
# variant, scenario, ms, ratio to cudnn.
#
#   bash scripts/gpu-check.sh [build-dir]     (default build-dir: build-gpu)
#
# Exit status: 0 when the build, every GPU test and every benchmark case passed; non-zero
# otherwise (a failed or skipped GPU test, a benchmark case that errored), but the table of what
# ran is printed either way. Budget: under 8 minutes on an H200 with 16 cores; each phase has its
# own time limit below so a hang cannot eat the rest.
#
# Environment: LSTM_GPU_CHECK_BENCH_FILTER overrides the benchmark filter;
# LSTM_GPU_CHECK_MIN_TIME the seconds Google Benchmark spends per case (default 0.2).

set -u -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
results="$build/gpu-check"
bench_json="$results/bench.json"
filter="${LSTM_GPU_CHECK_BENCH_FILTER:-(braun|deepbench)/.*/cuda/}"
min_time="${LSTM_GPU_CHECK_MIN_TIME:-0.2}"
jobs="$(nproc)"

# Phase limits in seconds; their sum (470 s) keeps the whole check under 8 minutes even when
# every phase runs to its limit.
configure_limit=30
build_limit=210
test_limit=90
bench_limit=140

status=0
failures=()
note_failure() {
    failures+=("$1")
    status=1
}

banner() { printf '\n==== %s ====\n' "$1"; }

mkdir -p "$results"
start_seconds=$SECONDS

banner "device"
if command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ||
        note_failure "nvidia-smi could not query the GPU"
else
    echo "nvidia-smi not found"
fi

banner "configure ($build)"
if ! timeout "$configure_limit" cmake -S "$root" -B "$build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DLSTM_CUDA=ON -DLSTM_BUILD_TESTS=ON -DLSTM_BUILD_BENCH=ON; then
    echo "gpu-check: configure failed" >&2
    exit 2
fi

banner "build lstm_gpu_tests lstm_bench (-j $jobs)"
# Only what the check runs: the GPU tests and the bench (the CPU suite is CI's job).
if ! timeout "$build_limit" cmake --build "$build" --target lstm_gpu_tests lstm_bench -j "$jobs"; then
    echo "gpu-check: build failed" >&2
    exit 2
fi

banner "GPU tests (ctest -L gpu)"
ctest_log="$results/ctest.log"
# -V prints every GPU test's own output (device, worst mismatches), not only on failure.
timeout "$test_limit" ctest --test-dir "$build" -L gpu -V --output-on-failure \
    --timeout "$test_limit" 2>&1 | tee "$ctest_log"
test_rc=${PIPESTATUS[0]}
if [ "$test_rc" -ne 0 ]; then
    note_failure "GPU tests failed (ctest exit $test_rc)"
elif grep -q "Skipped" "$ctest_log"; then
    # Exit 77 (no device visible) is a skip for ctest, but this script exists to run them.
    note_failure "GPU tests were skipped: no CUDA device visible to the test executable"
fi

banner "GPU benchmarks ($filter)"
rm -f "$bench_json"
timeout "$bench_limit" "$build/bench/lstm_bench" \
    --benchmark_filter="$filter" \
    --benchmark_min_time="$min_time" \
    --benchmark_out="$bench_json" --benchmark_out_format=json
bench_rc=$?
if [ "$bench_rc" -ne 0 ]; then
    note_failure "lstm_bench exited with $bench_rc (124: it ran past ${bench_limit}s)"
fi

banner "table (ms per call; ratio = time / cudnn's time on the same case)"
if [ -s "$bench_json" ]; then
    python3 - "$bench_json" << 'PY' || note_failure "a benchmark case errored (see the table)"
import json
import re
import sys

with open(sys.argv[1]) as f:
    report = json.load(f)

pattern = re.compile(r"^(?P<scenario>.+)/cuda/(?P<variant>[^/]+)(/manual_time)?$")
to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
rows = []  # (scenario, variant, ms or None, error)
for b in report.get("benchmarks", []):
    if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
        continue
    m = pattern.match(b.get("run_name", b["name"]))
    if not m:
        continue
    if b.get("error_occurred"):
        rows.append((m["scenario"], m["variant"], None, b.get("error_message", "error")))
    else:
        rows.append((m["scenario"], m["variant"], b["real_time"] * to_ms[b["time_unit"]], ""))

cudnn = {s: ms for s, v, ms, _ in rows if v == "cudnn" and ms is not None}
print(f"{'variant':<8} {'scenario':<40} {'ms':>10} {'x cudnn':>8}")
errors = 0
for scenario, variant, ms, error in rows:
    if ms is None:
        errors += 1
        print(f"{variant:<8} {scenario:<40} {'error':>10} {'':>8}  {error[:100]}")
        continue
    ratio = f"{ms / cudnn[scenario]:.2f}" if scenario in cudnn else "-"
    print(f"{variant:<8} {scenario:<40} {ms:>10.3f} {ratio:>8}")
print(f"{len(rows)} cases, {errors} errors; JSON: {sys.argv[1]}")
sys.exit(1 if errors else 0)
PY
else
    echo "no benchmark results in $bench_json"
    note_failure "no benchmark results"
fi

banner "summary ($((SECONDS - start_seconds)) s)"
if [ "$status" -eq 0 ]; then
    echo "gpu-check: PASSED"
else
    for f in "${failures[@]}"; do echo "gpu-check: FAILED: $f"; done
fi
exit "$status"
