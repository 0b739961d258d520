#!/usr/bin/env python3
"""Turns lstm_bench JSON into a docs table and a bar chart like Braun 2018's figures.

Usage: build/bench/lstm_bench --benchmark_filter='braun/' --benchmark_repetitions=5 \\
           --benchmark_enable_random_interleaving=true \\
           --benchmark_out=run.json --benchmark_out_format=json
       python3 scripts/plot-bench.py run.json --png docs/benchmarks-cpu.png > table.md

Reads every case lstm_bench (and lstm_dist_bench) names: braun/, pair/, deepbench/, shape/,
bahrampour/, loss/ctc/, kernels/activations/. A case name is split into the variant (the part
after its device, cpu or cuda, or else the last part that is not KEY:VALUE) and its group (the
rest), so the variants of one scenario, pass and thread count share a group.

Prints a markdown table (group, variant, median ms, mean +- standard deviation, GFLOP/s,
peak_frac where a case has it, the pair ratio with its extremes for pair/ cases, ratio to the
fastest variant of the group) and, with --png, draws one group of bars per group, variants side by
side, mean with standard-deviation error bars. Needs matplotlib only for --png (a
development-time helper: the library and CI never run it; scripts/test-plot-bench.py tests it).

Disturbed repetitions: each case records the machine's 1-minute load average when its timed loop
ends (the `load_avg_1m` counter). A quiet machine running the bench shows about the bench's own
threads (the largest threads:K of the file, since the 1-minute average still carries earlier
cases and the start-up peak measurement runs K threads) plus --lstm_busy_processes. A repetition
whose load exceeds that by more than 0.5 per CPU (half the machine busy with something else for
most of a minute) is named on stderr with a warning; so is a run whose load was that high before
its first case (the context's load_avg). The table is printed either way.
"""
import argparse
import json
import math
import re
import statistics
import sys
from collections import OrderedDict

# Google Benchmark's own suffixes, which say how a case was run, not which case it is.
GB_SUFFIX = re.compile(r"^(real_time|manual_time|process_time|"
                       r"(repeats|iterations|min_time|min_warmup_time):.*)$")
DEVICES = ("cpu", "cuda")
# The compute precisions a case name may give after the variant (lstm::Precision; full is
# never named).
PRECISIONS = ("bf16",)
# A part that names a size or a count (H:512, threads:2), not a variant.
KEY_VALUE = re.compile(r"^[A-Za-z_]+:\d+$")
# Load above the bench's own threads and busy processes that counts as disturbed, per CPU.
EXTRA_LOAD_PER_CPU = 0.5
TIME_SCALE_MS = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}


def case_parts(name):
    """The case name's parts without Google Benchmark's suffixes."""
    return [p for p in name.split("/") if not GB_SUFFIX.match(p)]


def parse_name(name):
    """<case name> -> (group, variant label); the variant is removed from the group."""
    parts = case_parts(name)
    device = max((i for i, p in enumerate(parts) if p in DEVICES), default=None)
    if device is not None and device + 1 < len(parts) and not KEY_VALUE.match(parts[device + 1]):
        variant = device + 1
    else:
        # No variant after a device (loss/ctc/cpu/threads:K, kernels/activations/AVX3): the last
        # part that is not KEY:VALUE stands for it.
        plain = [i for i, p in enumerate(parts) if not KEY_VALUE.match(p)]
        variant = plain[-1] if plain else len(parts) - 1
    label = parts[variant]
    # lstm_bench --lstm_all_paths=1 names a variant's path right after it (fused/path:avx512): the
    # paths of one variant are variants of the group too.
    end = variant + 1
    if end < len(parts) and parts[end].startswith("path:"):
        label += "/" + parts[end][len("path:"):]
        end += 1
    # And a compute precision other than full after it (fused/bf16, docs/precision.md): the
    # precisions of one variant are variants of the group too.
    if end < len(parts) and parts[end] in PRECISIONS:
        label += "/" + parts[end]
        end += 1
    group = parts[:variant] + parts[end:]
    return "/".join(group), label


def case_threads(name):
    """K of a threads:K part (the CPU threads the case ran with), else 1 (a GPU case's host)."""
    for p in case_parts(name):
        m = re.match(r"^threads:(\d+)$", p)
        if m:
            return int(m.group(1))
    return 1


def new_entry():
    return {"ms": [], "gflops": [], "peak_frac": [], "ratio": [], "ratio_min": [],
            "ratio_max": [], "load": [], "aggregate": False}


def add_counters(entry, b):
    for key, name in (("gflops", "GFLOP/s"), ("peak_frac", "peak_frac"), ("ratio", "ratio"),
                      ("ratio_min", "ratio_min"), ("ratio_max", "ratio_max")):
        if name in b:
            entry[key].append(float(b[name]))


def load(path):
    """(context, runs, failed, max_threads): runs maps (group, variant) to its entry."""
    with open(path) as f:
        data = json.load(f)
    runs, order, failed = {}, {}, []
    aggregates = {}
    max_threads = 1
    for i, b in enumerate(data.get("benchmarks", [])):
        name = b.get("run_name", b.get("name", ""))
        if b.get("error_occurred"):
            if b.get("run_type", "iteration") == "iteration":
                failed.append((b.get("name", name), b.get("error_message", "")))
            continue
        key = parse_name(name)
        max_threads = max(max_threads, case_threads(name))
        # Registration order, so that --benchmark_enable_random_interleaving (which shuffles the
        # repetitions in the file) still gives the table and the bars in the bench's order.
        order.setdefault(key, (b.get("family_index", i), b.get("per_family_instance_index", 0)))
        scale = TIME_SCALE_MS.get(b.get("time_unit", "ns"), 1e-6)
        if b.get("run_type") == "aggregate":
            aggregates.setdefault(key, {})[b.get("aggregate_name", "")] = (b, scale)
            continue
        entry = runs.setdefault(key, new_entry())
        entry["ms"].append(b["real_time"] * scale)
        add_counters(entry, b)
        if "load_avg_1m" in b:
            entry["load"].append((b.get("name", name), b.get("repetition_index", 0),
                                  float(b["load_avg_1m"])))
    # A file of aggregates only (--benchmark_report_aggregates_only=true): their median, mean and
    # standard deviation stand for the repetitions the file left out.
    for key, aggs in aggregates.items():
        if key in runs or "median" not in aggs:
            continue
        entry = runs.setdefault(key, new_entry())
        entry["aggregate"] = True
        median, scale = aggs["median"]
        entry["ms"].append(median["real_time"] * scale)
        entry["mean"] = aggs.get("mean", aggs["median"])[0]["real_time"] * scale
        entry["sd"] = aggs["stddev"][0]["real_time"] * scale if "stddev" in aggs else 0.0
        add_counters(entry, median)
        if "load_avg_1m" in aggs.get("mean", aggs["median"])[0]:
            mean_run = aggs.get("mean", aggs["median"])[0]
            entry["load"].append((mean_run.get("name", ""), "mean",
                                  float(mean_run["load_avg_1m"])))
    # Each group's rows together, where its first case came.
    first = {}
    for k in sorted(runs, key=order.get):
        first.setdefault(k[0], order[k])
    ordered = OrderedDict((k, runs[k]) for k in sorted(runs, key=lambda k: (first[k[0]], order[k])))
    return data.get("context", {}), ordered, failed, max_threads


def fmt(x):
    """Milliseconds: one decimal from 10 up, else three significant digits (kernel cases)."""
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def mean_sd(entry):
    ms = entry["ms"]
    if entry["aggregate"]:
        return entry["mean"], entry["sd"]
    return statistics.mean(ms), (statistics.stdev(ms) if len(ms) > 1 else 0.0)


def table(runs):
    with_peak = any(r["peak_frac"] for r in runs.values())
    with_pair = any(r["ratio"] for r in runs.values())
    head = ["group", "variant", "median ms", "mean ± sd ms", "GFLOP/s"]
    if with_peak:
        head.append("peak_frac")
    if with_pair:
        head.append("pair ratio (min-max)")
    head.append("ratio to fastest")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fastest = {}
    for (group, _), r in runs.items():
        fastest[group] = min(fastest.get(group, math.inf), statistics.median(r["ms"]))
    for (group, variant), r in runs.items():
        median = statistics.median(r["ms"])
        mean, sd = mean_sd(r)
        cells = [group, variant, fmt(median), f"{fmt(mean)} ± {fmt(sd)}",
                 f"{statistics.median(r['gflops']):.1f}" if r["gflops"] else ""]
        if with_peak:
            cells.append(f"{statistics.median(r['peak_frac']):.3f}" if r["peak_frac"] else "")
        if with_pair:
            cells.append(f"{statistics.median(r['ratio']):.3f} ({min(r['ratio_min']):.3f}-"
                         f"{max(r['ratio_max']):.3f})" if r["ratio"] else "")
        cells.append(f"{median / fastest[group]:.2f}" if fastest[group] > 0 else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_warnings(context, runs, max_threads):
    """Warning lines for the repetitions that ran beside another job (see the module doc)."""
    cpus = int(context.get("num_cpus", 0) or 0)
    busy = int(context.get("busy_processes", 0) or 0)
    if cpus <= 0:
        return ["cannot judge the load: the JSON's context has no num_cpus"]
    limit = max_threads + busy + EXTRA_LOAD_PER_CPU * cpus
    rule = (f"{limit:g} = {max_threads} bench thread{'s' if max_threads != 1 else ''} + {busy} "
            f"busy process{'es' if busy != 1 else ''} + {EXTRA_LOAD_PER_CPU} x {cpus} CPUs")
    out = []
    start = context.get("load_avg") or []
    if start and float(start[0]) > limit:
        out.append(f"the 1-minute load average was {float(start[0]):.2f} before the first case, "
                   f"above {rule}: the machine was not quiet")
    recorded = disturbed = 0
    for r in runs.values():
        high = {}
        for name, repetition, value in r["load"]:
            recorded += 1
            if value > limit:
                high.setdefault(name, []).append((repetition, value))
        for name, reps in high.items():
            disturbed += len(reps)
            out.append(f"{name}: 1-minute load average "
                       f"{', '.join(f'{v:.2f}' for _, v in reps)} at the end of repetition"
                       f"{'s' if len(reps) > 1 else ''} "
                       f"{', '.join(str(k) for k, _ in reps)}, above {limit:g}")
    if recorded == 0:
        out.append("no case recorded load_avg_1m (a bench from before 2026-12-07): cannot tell "
                   "disturbed repetitions")
    elif disturbed:
        out.append(f"{disturbed} of {recorded} repetitions ran beside another job (load above "
                   f"{rule}); rerun them on a quiet machine before comparing their times")
    return out


def plot(runs, path, context):
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot-bench.py: --png needs matplotlib (Debian: python3-matplotlib); the table "
                 "above is complete without it")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(OrderedDict.fromkeys(g for g, _ in runs))
    variants = list(OrderedDict.fromkeys(v for _, v in runs))
    # At most 4 groups a row: a whole DeepBench run has dozens of groups.
    cols = min(4, len(groups))
    rows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, group in zip(axes.flat, groups):
        names, means, sds = [], [], []
        for v in variants:
            r = runs.get((group, v))
            if not r:
                continue
            mean, sd = mean_sd(r)
            names.append(v)
            means.append(mean)
            sds.append(sd)
        ax.bar(names, means, yerr=sds, capsize=4,
               color=["C%d" % (variants.index(n) % 10) for n in names])
        ax.set_title(group, fontsize=8)
        ax.set_ylabel("ms per call or step")
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"lstm_bench, {context.get('date', '')}, {context.get('num_cpus', '?')} CPUs",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--png", help="write the bar chart here")
    args = parser.parse_args()
    context, runs, failed, max_threads = load(args.json)
    for name, why in OrderedDict.fromkeys(failed):
        print(f"plot-bench.py: {name} did not run: {why}", file=sys.stderr)
    if not runs:
        sys.exit("plot-bench.py: no timed repetitions in " + args.json)
    for line in load_warnings(context, runs, max_threads):
        print("plot-bench.py: warning: " + line, file=sys.stderr)
    print(table(runs))
    if args.png:
        plot(runs, args.png, context)


if __name__ == "__main__":
    main()
