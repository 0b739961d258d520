#!/usr/bin/env python3
"""The summary table of scripts/gpu-check.sh, from the files it leaves in its output folder.

    gpu_check_summary.py --out DIR --phases PHASES.tsv --info INFO.txt [--rehearsal]

Reads DIR/cases.tsv and DIR/memcheck.tsv (name, status, seconds, worst, detail per case) and
DIR/bench.log (Google Benchmark's console output, possibly cut short), prints the summary and
exits 0 only when every case that ran passed, memcheck found nothing and no benchmark errored.
With --rehearsal (a run on a machine without a GPU, scripts/gpu-check-rehearsal.sh), a case
skipped for want of a device is the expected outcome: it exits 0 when there were cases and each
was skipped or passed (benchmarks error without a device and are not counted).
Python 3 standard library only: it runs on the bare GPU machine.
"""

import argparse
import collections
import os
import re
import sys

STATUSES = ["passed", "failed", "crashed", "timed_out", "memcheck_errors", "skipped", "not_run"]
# Column headings for STATUSES, in the same order.
HEADINGS = ["passed", "failed", "crashed", "timeout", "memcheck", "skipped", "not_run"]
# The first family whose pattern a case name matches (case-sensitive: the Braun shape named
# "4x320-CTC-long" is an LSTM case). Variant names come first, so a cuDNN CTC case counts as cudnn
# and a model step with a CTC head counts as its variant.
FAMILIES = [
    ("cudnn", r"cudnn"),
    ("nccl", r"nccl"),
    ("fused", r"\bfused\b"),
    ("basic", r"\bbasic\b"),
    ("ctc", r"\bctc\b"),
    ("cross-entropy", r"cross.entropy"),
    ("dense/optim/head", r"Dense|optimizer|sequence|head|model|checkpoint"),
]
BENCH_LINE = re.compile(
    r"^(?P<name>\S+?)(?:/manual_time)?\s+(?P<ms>[0-9.]+) ms\s+[0-9.]+ ms\s+(?P<iters>\d+)")
BENCH_ERROR = re.compile(r"^(?P<name>\S+?)(?:/manual_time)?\s+ERROR OCCURRED: '(?P<msg>.*)'")
CASE_NAME = re.compile(r"^(?P<scenario>.+)/cuda/(?P<variant>[^/]+)$")


def family(name):
    for label, pattern in FAMILIES:
        if re.search(pattern, name):
            return label
    return "other"


def read_tsv(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2:
                    parts += [""] * (5 - len(parts))
                    rows.append(parts[:5])
    return rows


def worst_value(detail):
    """The fraction of tolerance leading a worst-of-tolerance detail, or None."""
    m = re.match(r"\s*([0-9.eE+-]+)", detail or "")
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def case_table(title, rows):
    print(f"\n{title}")
    if not rows:
        print("  (none ran)")
        return
    by_family = collections.OrderedDict()
    for name, status, _, worst, _ in rows:
        by_family.setdefault(family(name), []).append((status, worst))
    print(f"  {'family':<17}" + "".join(f"{h:>9}" for h in ["cases"] + HEADINGS + ["worst"]))
    for label, items in by_family.items():
        counts = collections.Counter(status for status, _ in items)
        worsts = [w for w in (worst_value(d) for s, d in items if s in ("passed", "failed"))
                  if w is not None]
        worst = f"{max(worsts):.3g}" if worsts else "-"
        print(f"  {label:<17}{len(items):>9}" + "".join(f"{counts[s]:>9}" for s in STATUSES) +
              f"{worst:>9}")
    # Skipped cases share their reason (no device), so they are counted by reason, not listed.
    skipped = collections.Counter(d for _, s, _, _, d in rows if s == "skipped")
    for reason, count in skipped.items():
        print(f"  skipped: {count} cases ({reason[:100]})")
    bad = [(n, s, d) for n, s, _, _, d in rows if s not in ("passed", "skipped")]
    if bad:
        print(f"  not passed ({len(bad)}):")
        for name, status, detail in bad[:25]:
            print(f"    {status:<10} {name}  [{detail[:110]}]")
        if len(bad) > 25:
            print(f"    ... {len(bad) - 25} more in the .tsv file")


def bench_table(path):
    """Prints the benchmark pivot table; returns the number of errored cases (None: no log)."""
    if not os.path.exists(path):
        return None
    results = collections.OrderedDict()  # scenario -> {variant: ms or error text}
    with open(path, errors="replace") as f:
        for line in f:
            for pattern in (BENCH_ERROR, BENCH_LINE):
                m = pattern.match(line)
                if not m:
                    continue
                c = CASE_NAME.match(m["name"])
                if c:
                    value = float(m["ms"]) if "ms" in m.groupdict() else "error: " + m["msg"]
                    results.setdefault(c["scenario"], {})[c["variant"]] = value
                break
    print("\nbenchmarks (ms per call or training step, CUDA events; x cudnn = time / cudnn's)")
    if not results:
        print("  (no finished case in bench.log)")
        return 0
    variants = []
    for row in results.values():
        variants += [v for v in row if v not in variants]
    print(f"  {'scenario':<40}" + "".join(f"{v:>10}" for v in variants) +
          "".join(f"{v + '/cudnn':>13}" for v in variants if v != "cudnn"))
    errors = []
    for scenario, row in results.items():
        cells, ratios = "", ""
        base = row.get("cudnn")
        for v in variants:
            value = row.get(v)
            if isinstance(value, float):
                cells += f"{value:>10.3f}"
            else:
                cells += f"{'error' if value else '-':>10}"
                if value:
                    errors.append((scenario, v, value))
            if v != "cudnn":
                ok = isinstance(value, float) and isinstance(base, float) and base > 0
                ratios += f"{value / base:>13.2f}" if ok else f"{'-':>13}"
        print(f"  {scenario:<40}{cells}{ratios}")
    for scenario, v, value in errors[:10]:
        print(f"  {scenario}/{v}: {value[:120]}")
    return len(errors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--phases", required=True)
    parser.add_argument("--info", required=True)
    parser.add_argument("--rehearsal", action="store_true",
                        help="no GPU: every case skipped is the expected outcome")
    args = parser.parse_args()

    print("gpu-check summary")
    if os.path.exists(args.info):
        with open(args.info) as f:
            print("".join("  " + line for line in f), end="")
    print("\nphases (seconds)")
    total = 0
    for row in read_tsv(args.phases):
        name, seconds, outcome = row[:3]
        total += int(seconds or 0)
        print(f"  {name:<18}{seconds:>5}  {outcome}")
    print(f"  {'total':<18}{total:>5}")

    cases = read_tsv(os.path.join(args.out, "cases.tsv"))
    memcheck = read_tsv(os.path.join(args.out, "memcheck.tsv"))
    case_table("correctness (each case in its own process; worst = largest error / tolerance)",
               cases)
    if memcheck:
        case_table("compute-sanitizer memcheck", memcheck)
    bench_errors = bench_table(os.path.join(args.out, "bench.log"))

    statuses = [row[1] for row in cases]
    verified = bool(cases) and all(row[1] == "passed" for row in cases + memcheck)
    verified = verified and not bench_errors
    if args.rehearsal:
        rehearsed = bool(cases) and all(row[1] in ("skipped", "passed") for row in cases + memcheck)
        if rehearsed:
            skipped = statuses.count("skipped")
            print(f"\ngpu-check: REHEARSAL PASSED: {len(cases)} cases ran, {skipped} skipped"
                  " (no CUDA device visible), none failed; nothing was verified on a GPU")
        else:
            print("\ngpu-check: FAILED (see the tables above, tests.log and cases.tsv)")
        return 0 if rehearsed else 1
    if verified:
        print("\ngpu-check: PASSED")
    elif "skipped" in statuses and all(s in ("skipped", "passed") for s in statuses):
        print("\ngpu-check: NOT VERIFIED: cases were skipped (no CUDA device visible)")
    else:
        print("\ngpu-check: FAILED (see the tables above, tests.log and cases.tsv)")
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
