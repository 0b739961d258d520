#!/usr/bin/env python3
"""Turns lstm_bench JSON into a docs table and a bar chart like Braun 2018's figures.

Usage: build/bench/lstm_bench --benchmark_filter='braun/' --benchmark_repetitions=5 \\
           --benchmark_enable_random_interleaving=true \\
           --benchmark_out=run.json --benchmark_out_format=json
       python3 scripts/plot-bench.py run.json --png docs/benchmarks-cpu.png > table.md

Prints a markdown table (scenario, variant, median ms, mean +- standard deviation, GFLOP/s, ratio
to the fastest variant of the scenario) and, with --png, draws one group of bars per scenario,
variants side by side, mean with standard-deviation error bars. Needs matplotlib only for --png
(a development-time helper: the library, its tests and CI never run it).
"""
import argparse
import json
import statistics
import sys
from collections import OrderedDict


def parse_name(name):
    """braun/<scenario>/<device>/<variant>/threads:K[/real_time] -> (group, variant label)."""
    parts = [p for p in name.split("/") if p != "real_time"]
    if parts[0] == "braun" and len(parts) >= 5:
        return f"{parts[1]} ({parts[2]}, {parts[4]})", parts[3]
    return "/".join(parts[:-1]), parts[-1]


def load(path):
    """Per (group, variant): the list of per-repetition times in ms and GFLOP/s."""
    with open(path) as f:
        data = json.load(f)
    runs, order = {}, {}
    for i, b in enumerate(data["benchmarks"]):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b["time_unit"]]
        key = parse_name(b["run_name"])
        entry = runs.setdefault(key, {"ms": [], "gflops": []})
        entry["ms"].append(b["real_time"] * scale)
        if "GFLOP/s" in b:
            entry["gflops"].append(b["GFLOP/s"])
        # Registration order, so that --benchmark_enable_random_interleaving (which shuffles the
        # repetitions in the file) still gives the table and the bars in the bench's order.
        order.setdefault(key, (b.get("family_index", i), b.get("per_family_instance_index", 0)))
    ordered = OrderedDict((k, runs[k]) for k in sorted(runs, key=order.get))
    return data.get("context", {}), ordered


def table(runs):
    lines = ["| scenario | variant | median ms | mean ± sd ms | GFLOP/s | ratio to fastest |",
             "|---|---|---|---|---|---|"]
    fastest = {}
    for (group, _), r in runs.items():
        fastest[group] = min(fastest.get(group, float("inf")), statistics.median(r["ms"]))
    for (group, variant), r in runs.items():
        ms = r["ms"]
        sd = statistics.stdev(ms) if len(ms) > 1 else 0.0
        gf = f"{statistics.median(r['gflops']):.1f}" if r["gflops"] else ""
        lines.append(f"| {group} | {variant} | {statistics.median(ms):.1f} | "
                     f"{statistics.mean(ms):.1f} ± {sd:.1f} | {gf} | "
                     f"{statistics.median(ms) / fastest[group]:.2f} |")
    return "\n".join(lines)


def plot(runs, path, context):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(OrderedDict.fromkeys(g for g, _ in runs))
    variants = list(OrderedDict.fromkeys(v for _, v in runs))
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        names, means, sds = [], [], []
        for v in variants:
            r = runs.get((group, v))
            if not r:
                continue
            names.append(v)
            means.append(statistics.mean(r["ms"]))
            sds.append(statistics.stdev(r["ms"]) if len(r["ms"]) > 1 else 0.0)
        ax.bar(names, means, yerr=sds, capsize=4, color=["C%d" % variants.index(n) for n in names])
        ax.set_title(group, fontsize=9)
        ax.set_ylabel("ms per batch")
    fig.suptitle(f"lstm_bench, {context.get('date', '')}, {context.get('num_cpus', '?')} CPUs",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--png", help="write the bar chart here")
    args = parser.parse_args()
    context, runs = load(args.json)
    if not runs:
        sys.exit("no timed repetitions in " + args.json)
    print(table(runs))
    if args.png:
        plot(runs, args.png, context)


if __name__ == "__main__":
    main()
