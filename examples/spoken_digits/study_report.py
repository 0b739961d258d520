#!/usr/bin/env python3
"""Turns the output folder of study.sh into the consistency tables (markdown, on stdout) and a
plot of the held-out curves (PNG, with --plot; needs matplotlib).

    python3 examples/spoken_digits/study_report.py /tmp/study --plot docs/spoken_digits.png

Drift between two trained models a and b is ||a - b|| / ((||a|| + ||b||) / 2) over all their
parameters (LSTM and dense), L2: 0 for identical models, about 1.4 for unrelated ones of equal
norm. A development-time tool (it reads safetensors through scripts/safetensors_io.py, which
needs PyTorch).
"""

import argparse
import csv
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from safetensors_io import load_file  # noqa: E402

TASKS = ("isolated", "connected")
SCORE = {"isolated": "accuracy", "connected": "ler"}


def runs(out_dir, task):
    """The trained runs of a task present in out_dir, in a fixed order."""
    names = [n for n in ("basic", "fused", "onednn", "fused_padded", "pytorch")
             if os.path.exists(os.path.join(out_dir, f"{task}_{n}.safetensors"))]
    return names


def read_text(path):
    return open(path).read() if os.path.exists(path) else ""


def final_line(out_dir, task, name):
    log = read_text(os.path.join(out_dir, f"{task}_{name}.log"))
    m = re.search(r"final held-out (?:accuracy|label error rate) ([0-9.]+)", log)
    return float(m.group(1)) if m else None


def curve(out_dir, task, name):
    path = os.path.join(out_dir, f"{task}_{name}.tsv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def compare(out_dir, task, name):
    log = read_text(os.path.join(out_dir, f"{task}_{name}_compare.log"))
    agree = re.search(r"predictions agree on (\d+)/(\d+)", log)
    diff = re.search(r"largest logit difference ([0-9.e+-]+)", log)
    torch_score = re.search(r"PyTorch (?:accuracy|label error rate) ([0-9.]+)", log)
    if not agree:
        return "", "", ""
    return (f"{agree.group(1)}/{agree.group(2)}", diff.group(1) if diff else "",
            torch_score.group(1) if torch_score else "")


def parameters(out_dir, task, name):
    import torch
    tensors = load_file(os.path.join(out_dir, f"{task}_{name}.safetensors"))
    keys = sorted(k for k in tensors if k.startswith(("lstm.", "fc.")))
    return torch.cat([tensors[k].double().flatten() for k in keys])


def pytorch_score(out_dir, task):
    log = read_text(os.path.join(out_dir, f"{task}_pytorch_eval.log"))
    m = re.search(r"final held-out (?:accuracy|label error rate) ([0-9.]+)", log)
    return float(m.group(1)) if m else None


def batches_of(name):
    if name == "fused_padded":
        return "padded length buckets"
    if name == "pytorch":
        return "one exact length (PyTorch's own init and dropout)"
    return "one exact length"


def table(out_dir, task):
    names = runs(out_dir, task)
    label = "accuracy" if task == "isolated" else "label error rate"
    print(f"\n### {task.capitalize()} digits\n")
    # Times are left out: a study runs many jobs, usually side by side, so its clocks are not
    # quiet; time single runs on an idle machine instead.
    print(f"| run | batches | held-out {label} | PyTorch agrees | largest logit difference |")
    print("|---|---|---|---|---|")
    for name in names:
        score = pytorch_score(out_dir, task) if name == "pytorch" else final_line(out_dir, task, name)
        agree, diff, _ = compare(out_dir, task, name)
        print(f"| {name} | {batches_of(name)} | {'' if score is None else f'{score:.4f}'} | "
              f"{agree} | {diff} |")
    params = {n: parameters(out_dir, task, n) for n in names}
    print(f"\nDrift of the trained parameters ({task}):\n")
    print("| | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for a in names:
        cells = []
        for b in names:
            d = float((params[a] - params[b]).norm() / ((params[a].norm() + params[b].norm()) / 2))
            cells.append("0" if a == b else f"{d:.3f}")
        print(f"| {a} | " + " | ".join(cells) + " |")


def plot(out_dir, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, task in zip(axes, TASKS):
        for name in runs(out_dir, task):
            rows = curve(out_dir, task, name)
            if rows:
                ax.plot([int(r["epoch"]) for r in rows], [float(r[SCORE[task]]) for r in rows],
                        label=name, marker=".")
        ax.set_xlabel("epoch")
        ax.set_ylabel("held-out accuracy" if task == "isolated" else "held-out label error rate")
        ax.set_title(f"{task} digits")
        if task == "connected":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"\nplot written to {path}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--plot")
    args = parser.parse_args()
    for task in TASKS:
        if runs(args.out_dir, task):
            table(args.out_dir, task)
    if args.plot:
        plot(args.out_dir, args.plot)


if __name__ == "__main__":
    main()
