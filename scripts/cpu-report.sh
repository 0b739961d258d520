#!/usr/bin/env bash
# Measures what docs/benchmarks.md and docs/performance.md report for a CPU, on the machine it
# runs on, into one folder: the machine and the path each variant takes on it, Braun's 1x320
# table and plot, the paired fused / oneDNN ratios in several processes (the machines these
# docs came from moved by up to 10% between processes, so one process proves little), the CTC
# kernel's time, PyTorch's on the same shapes (CTC's peer), and a perf profile of fused's CE-short
# step. Run it on a quiet machine: a third runnable process on 2 cores wrecks the per-step
# barriers' timings.
#
# Usage: scripts/cpu-report.sh OUT_DIR [--stand-in] [--processes N] [--threads LIST]
#   --stand-in     hold every path to what an AVX2-only CPU runs (LSTM_MAX_CPU_ISA=avx2,
#                  DNNL_MAX_CPU_ISA=AVX2, and PyTorch's ATEN_CPU_CAPABILITY=avx2 and
#                  OPENBLAS_CORETYPE=Haswell); basic is left out then, as its Eigen code is
#                  compiled for the host and cannot be capped at run time
#   --processes N  processes of the paired cases (default 5)
#   --threads L    thread counts, comma-separated (default 1,2)
# Needs the README's Release build in build/; matplotlib for the PNG, PyTorch (Debian's
# python3-torch with libopenblas0-pthread) for its timings and perf for the profile (each is
# skipped, with a note in summary.md, where missing). It takes about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '/^# Usage/,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 ]] || usage
out=$1
shift
stand_in=0
processes=5
threads=1,2
while [[ $# -gt 0 ]]; do
    case $1 in
        --stand-in) stand_in=1 ;;
        --processes) processes=${2:?--processes needs a count}; shift ;;
        --threads) threads=${2:?--threads needs a list}; shift ;;
        *) usage ;;
    esac
    shift
done
bench=build/bench/lstm_bench
[[ -x $bench && -x build/tools/lstm_tool ]] || {
    echo "cpu-report: build first (the README's test command builds both)" >&2
    exit 2
}
mkdir -p "$out"
variants='(basic|fused|onednn)'
if [[ $stand_in == 1 ]]; then
    export LSTM_MAX_CPU_ISA=avx2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
    export OPENBLAS_CORETYPE=Haswell
    variants='(fused|onednn)'
fi
summary=$out/summary.md
stamp() { date -u '+%Y-%m-%d %H:%M:%S UTC'; }
# The first python that imports module $1, or nothing: Debian's python3-matplotlib and
# python3-torch live in the system python, which a python3 earlier in PATH may hide.
python_with() {
    local py
    for py in python3 /usr/bin/python3; do
        if "$py" -c "import $1" 2>/dev/null; then
            echo "$py"
            return
        fi
    done
}

{
    echo "# CPU report, $(stamp)"
    echo
    echo "Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified tree)');"
    echo "caps: LSTM_MAX_CPU_ISA=${LSTM_MAX_CPU_ISA:-none}" \
        "DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-none}" \
        "ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-none}" \
        "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-none}."
    echo
    echo '```'
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|L1d|L2|L3)' || true
    grep -m2 -E '^(cpu family|model)\s' /proc/cpuinfo || true
    echo "AVX-512F: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)," \
        "AVX2: $(grep -qw avx2 /proc/cpuinfo && echo yes || echo no)"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    "${CXX:-c++}" --version | head -1
    build/tools/lstm_tool info
    echo '```'
} > "$summary"

# Braun's 1x320 scenarios, interleaved repetitions, as the docs' tables and plot.
echo "cpu-report: Braun 1x320, $(stamp)" >&2
start=$(stamp)
"$bench" --benchmark_filter="braun/1x320-CE-(short|long)/cpu/$variants/threads:2/" \
    --lstm_threads=2 --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
    --benchmark_display_aggregates_only=true --benchmark_out="$out/braun.json" \
    --benchmark_out_format=json > "$out/braun.txt" 2> "$out/braun-context.txt"
png_args=()
plot_python=$(python_with matplotlib)
[[ -n $plot_python ]] && png_args=(--png "$out/braun.png")
{
    echo
    echo "## Braun 1x320, 2 threads, 5 interleaved repetitions ($start to $(stamp))"
    echo
    # The bench's own context: the FMA peak its peak_frac divides by, and whether it ran alone.
    grep -E '^(fma_peak|busy_processes|Load Average)' "$out/braun-context.txt" | sed 's/^/    /'
    echo
    "${plot_python:-python3}" scripts/plot-bench.py "$out/braun.json" "${png_args[@]}"
    echo
    [[ ${#png_args[@]} -gt 0 ]] || echo "(no plot: matplotlib is not installed)"
} >> "$summary"

# Paired cases: fused and oneDNN alternate within one process, one ratio per process.
{
    echo
    echo "## fused / oneDNN, paired steps, one process per line (threads $threads)"
    echo
    echo "| process (UTC) | case | threads | ratio | fused ms | oneDNN ms |"
    echo "|---|---|---|---|---|---|"
} >> "$summary"
for ((p = 1; p <= processes; ++p)); do
    echo "cpu-report: paired process $p of $processes, $(stamp)" >&2
    when=$(date -u +%H:%M)
    "$bench" --benchmark_filter='pair/1x320-CE-(short|long)/cpu/fused:onednn/' \
        --lstm_threads="$threads" --benchmark_min_time=4 --benchmark_repetitions=3 \
        --benchmark_display_aggregates_only=true --benchmark_out="$out/pair-$p.json" \
        --benchmark_out_format=json > /dev/null 2>&1
    # The medians over the repetitions of each case's counters (ratio: the median of its pairs).
    python3 - "$out/pair-$p.json" "$when" >> "$summary" <<'PY'
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        parts = b["run_name"].split("/")
        print(f"| {sys.argv[2]} | {parts[1].split('-', 1)[1]} | {parts[4].split(':')[1]} | "
              f"{b['ratio']:.3f} | {b['ms']:.1f} | {b['peer_ms']:.1f} |")
PY
done

# The CTC kernel on Braun's CTC shape (forward + gradient).
echo "cpu-report: CTC, $(stamp)" >&2
"$bench" --benchmark_filter='loss/ctc/cpu' --lstm_threads=2 --benchmark_repetitions=5 \
    --benchmark_display_aggregates_only=true --benchmark_out="$out/ctc.json" \
    --benchmark_out_format=json > "$out/ctc.txt" 2> /dev/null
{
    echo
    echo "## CTC kernel, 2 threads, medians of 5 ($(stamp))"
    echo
    echo '```'
    grep -E '_median' "$out/ctc.txt" || true
    echo '```'
} >> "$summary"

# PyTorch on the same shapes in the same minutes: the CTC target's peer, and the CE steps'.
{
    echo
    echo "## PyTorch, 2 threads"
    echo
} >> "$summary"
torch_python=$(python_with torch)
if [[ -n $torch_python ]]; then
    echo "cpu-report: PyTorch, $(stamp)" >&2
    start=$(stamp)
    "$torch_python" scripts/torch-peers.py --threads 2 > "$out/torch.txt" 2>&1 || true
    {
        echo "$start to $(stamp):"
        echo
        cat "$out/torch.txt"
        echo
        echo "Ratios to PyTorch (this library's medians above / PyTorch's median):"
        echo
        python3 - "$out/ctc.json" "$out/braun.json" "$out/torch.txt" <<'PY'
import json, re, sys
torch_ms = {}
for line in open(sys.argv[3]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 5 and re.fullmatch(r"[0-9.]+", cells[1]):
        torch_ms[cells[0]] = float(cells[1])
ms_per_unit = {"s": 1e3, "ms": 1, "us": 1e-3, "ns": 1e-6}
def medians(path):
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            yield b["run_name"], b["real_time"] * ms_per_unit[b["time_unit"]]
for name, ms in medians(sys.argv[1]):
    if "ctc" in torch_ms:
        print(f"- {name}: {ms:.1f} ms, {ms / torch_ms['ctc']:.3f}x PyTorch's ctc")
for name, ms in medians(sys.argv[2]):
    scenario = name.split("/")[1]
    if scenario in torch_ms:
        print(f"- {name}: {ms:.1f} ms, {ms / torch_ms[scenario]:.3f}x PyTorch's step")
PY
    } >> "$summary"
else
    echo "(not timed: python3 cannot import torch; apt-get install python3-torch" \
        "libopenblas0-pthread)" >> "$summary"
fi

# Where fused's CE-short step spends its time.
{
    echo
    echo "## Profile of fused's CE-short step, 2 threads"
    echo
} >> "$summary"
if perf record -q -o /dev/null true 2>/dev/null; then
    echo "cpu-report: profile, $(stamp)" >&2
    # -D leaves out the start-up (the FMA-peak loop and the reference check).
    perf record -q -F 2000 -D 8000 -o "$out/perf.data" "$bench" \
        --benchmark_filter='braun/1x320-CE-short/cpu/fused/threads:2/' --lstm_threads=2 \
        --benchmark_min_time=10 > /dev/null 2>&1
    {
        echo "Shares of the samples, start-up left out ($(stamp)):"
        echo
        echo '```'
        # awk reads to the end, so no stage of the pipe dies of a closed pipe under pipefail.
        perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
            awk '/^ +[0-9.]+%/ && n++ < 20 { print substr($0, 1, 110) }' | sed 's/ *$//'
        echo '```'
    } >> "$summary"
else
    echo "(no profile: perf cannot record on this machine)" >> "$summary"
fi
echo "cpu-report: done, $(stamp); see $summary" >&2
