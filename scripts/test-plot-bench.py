#!/usr/bin/env python3
"""Checks scripts/plot-bench.py against the JSON it reads (ctest: bench_plot_sample, bench_plot_run).

Usage: python3 scripts/test-plot-bench.py                  # the checked-in sample
       python3 scripts/test-plot-bench.py --bench build/bench/lstm_bench   # a short real run

The sample (bench/testdata/plot-bench-sample.json) holds a case of every name lstm_bench and
lstm_dist_bench emit (braun, pair, deepbench, shape, bahrampour, loss/ctc and its AVX2 stand-in,
kernels/activations, a cuda case, a dist case, a case with aggregates only, one that did not run),
taken from real runs with their load averages edited: 1.9 everywhere but 4.6 in one repetition of
pair/1x320-CE-short/cpu/fused:onednn. The script must print one row per case whose numbers are the
JSON's (medians of real_time, peak_frac, the pair ratio and its extremes) and name on stderr that
repetition, and no other, as disturbed. With --bench, a run of a tiny --lstm_shape is checked the
same way (its load warnings depend on the machine and are not checked).
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot-bench.py")
SAMPLE = os.path.join(HERE, os.pardir, "bench", "testdata", "plot-bench-sample.json")
TIME_SCALE_MS = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}

failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def run_plot(path):
    p = subprocess.run([sys.executable, PLOT, path], capture_output=True, text=True)
    expect(p.returncode == 0, f"plot-bench.py exited {p.returncode}: {p.stderr}")
    return p.stdout, p.stderr


def table_rows(stdout):
    """{(group, variant): {column: cell}} from the markdown table."""
    lines = [l for l in stdout.splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        rows[(cells["group"], cells["variant"])] = cells
    return rows


def json_cases(path):
    """{run_name: [iteration runs]} of the cases that ran, aggregates under their run_name too."""
    with open(path) as f:
        data = json.load(f)
    cases = {}
    for b in data["benchmarks"]:
        if not b.get("error_occurred"):
            cases.setdefault(b["run_name"], []).append(b)
    return cases


def close(printed, want, what):
    """The printed cell against the JSON value, to the digits it was printed with."""
    try:
        got = float(printed)
    except ValueError:
        failures.append(f"{what}: printed '{printed}', want {want}")
        return
    if "e" in printed:  # three significant digits in exponent form
        tolerance = abs(want) * 5e-3
    else:
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        tolerance = 0.51 * 10**-decimals
    expect(abs(got - want) <= tolerance, f"{what}: printed {printed}, the JSON gives {want}")


def check_row(rows, cases, run_name, group, variant):
    row = rows.get((group, variant))
    if row is None:
        failures.append(f"no row for {run_name} (expected group '{group}', variant '{variant}')")
        return
    its = [b for b in cases[run_name] if b.get("run_type") == "iteration"]
    scale = TIME_SCALE_MS[cases[run_name][0]["time_unit"]]
    if its:
        close(row["median ms"], statistics.median(b["real_time"] * scale for b in its),
              f"{run_name} median ms")
        if "peak_frac" in its[0]:
            close(row["peak_frac"], statistics.median(b["peak_frac"] for b in its),
                  f"{run_name} peak_frac")
        if "ratio" in its[0]:
            ratio, extremes = row["pair ratio (min-max)"].split(" ", 1)
            lo, hi = extremes.strip("()").split("-")
            close(ratio, statistics.median(b["ratio"] for b in its), f"{run_name} ratio")
            close(lo, min(b["ratio_min"] for b in its), f"{run_name} ratio_min")
            close(hi, max(b["ratio_max"] for b in its), f"{run_name} ratio_max")
    else:
        median = [b for b in cases[run_name] if b.get("aggregate_name") == "median"][0]
        close(row["median ms"], median["real_time"] * scale, f"{run_name} median ms (aggregate)")


def check_sample():
    stdout, stderr = run_plot(SAMPLE)
    rows = table_rows(stdout)
    cases = json_cases(SAMPLE)
    expect(len(rows) == len(cases), f"{len(rows)} table rows for the sample's {len(cases)} cases")
    for run_name, group, variant in [
        ("braun/1x320-CE-short/cpu/fused/threads:2/real_time",
         "braun/1x320-CE-short/cpu/threads:2", "fused"),
        ("pair/1x320-CE-short/cpu/fused:onednn/threads:2/manual_time",
         "pair/1x320-CE-short/cpu/threads:2", "fused:onednn"),
        ("deepbench/H:256/N:16/T:150/fwd/cpu/onednn/threads:2/manual_time",
         "deepbench/H:256/N:16/T:150/fwd/cpu/threads:2", "onednn"),
        ("shape/T:20/N:8/I:16/H:32/layers:1/dirs:2/fwd_bwd/cpu/fused/threads:2/manual_time",
         "shape/T:20/N:8/I:16/H:32/layers:1/dirs:2/fwd_bwd/cpu/threads:2", "fused"),
        ("loss/ctc/cpu-avx2/threads:2/real_time", "loss/ctc/threads:2", "cpu-avx2"),
        ("kernels/activations/AVX2", "kernels/activations", "AVX2"),
        ("braun/1x320-CE-short/cuda/fused/manual_time", "braun/1x320-CE-short/cuda", "fused"),
        ("braun/1x320-CE-short/cpu/fused/ranks:2/overlap:1/iterations:3/manual_time",
         "braun/1x320-CE-short/cpu/ranks:2/overlap:1", "fused"),
        ("bahrampour/imdb/grad/cpu/fused/threads:2/real_time",
         "bahrampour/imdb/grad/cpu/threads:2", "fused"),
    ]:
        check_row(rows, cases, run_name, group, variant)
    warnings = [l for l in stderr.splitlines() if "warning" in l]
    disturbed = "pair/1x320-CE-short/cpu/fused:onednn/threads:2/manual_time"
    expect(any(disturbed in l and "repetition 1" in l for l in warnings),
           f"no warning names {disturbed}, repetition 1: {warnings}")
    for run_name in cases:
        named = [l for l in warnings if run_name in l and run_name != disturbed]
        expect(not named, f"warnings name a quiet case: {named}")
    expect(any("1 of 34 repetitions" in l for l in warnings),
           f"no summary counting 1 of 34 repetitions: {warnings}")
    expect("bwd_weights/cpu/onednn/threads:2/manual_time did not run" in stderr,
           f"the case that did not run is not reported: {stderr}")
    # The chart too, where matplotlib is installed (a grid of 4 groups a row for these 17).
    if importlib.util.find_spec("matplotlib") is not None:
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "sample.png")
            p = subprocess.run([sys.executable, PLOT, SAMPLE, "--png", png], capture_output=True,
                               text=True)
            expect(p.returncode == 0 and os.path.getsize(png) > 0,
                   f"--png exited {p.returncode}: {p.stderr}")


def check_bench(bench):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        p = subprocess.run([bench, "--lstm_shape=T=4,N=2,I=3,H=5", "--lstm_threads=1",
                            "--benchmark_min_time=0.01", "--benchmark_repetitions=2",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"],
                           capture_output=True, text=True)
        expect(p.returncode == 0, f"lstm_bench exited {p.returncode}: {p.stderr}")
        if p.returncode != 0:
            return
        stdout, _ = run_plot(out)
        rows = table_rows(stdout)
        cases = json_cases(out)
        expect(len(rows) == len(cases) and cases, f"{len(rows)} rows for {len(cases)} cases")
        for run_name, its in cases.items():
            expect(all("load_avg_1m" in b for b in its), f"{run_name} has no load_avg_1m")
            parts = run_name.split("/")
            # shape/<7 shape parts>/<pass>/cpu/<variant>[/bf16]/threads:1/manual_time: a
            # precision joins the variant's label.
            label_end = 11 if parts[10] == "bf16" else 10
            check_row(rows, cases, run_name, "/".join(parts[:9] + parts[label_end:label_end + 1]),
                      "/".join(parts[9:label_end]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", help="lstm_bench to run a tiny --lstm_shape with")
    args = parser.parse_args()
    if args.bench:
        check_bench(args.bench)
    else:
        check_sample()
    for f in failures:
        print("FAILED: " + f, file=sys.stderr)
    print(f"test-plot-bench.py: {len(failures)} failure{'s' if len(failures) != 1 else ''}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
