#!/usr/bin/env python3
"""On-paper scaling model for data-parallel training of Braun 2018's workloads.

Usage: python3 tools/scaling_model.py                      # markdown tables on stdout
       python3 tools/scaling_model.py --png scaling.png    # and a plot (needs matplotlib)
       python3 tools/scaling_model.py --step-ms 4x320-CE-long=500   # your own compute time

Prints the tables of docs/distributed.md: gradient bytes per step of each Braun shape, ring
allreduce times on 25, 100 and 400 Gb/s networks, and the speed-up of data-parallel training
from 2 to 512 ranks, weak and strong scaling, without and with overlap of the allreduce with the
backward pass. Everything here is computed from the constants below (shapes, networks) and the
assumptions stated in docs/distributed.md; the only measured inputs are the per-step compute times (STEP_MS), copied
from docs/benchmarks.md with their source. Plain Python 3 standard library (matplotlib only for
--png). A development-time helper: the library, its tests and CI never run it.
"""
import argparse
import math
import sys
import textwrap

# --- The workloads. This table mirrors bench/braun.hpp (braun_scenarios() and the constants
# above it) and bench/braun_bench.cpp's model_config (dense head without bias; the LSTM keeps
# PyTorch's two bias vectors). Change both together.
INPUT_SIZE = 123
HIDDEN = 320
CTC_BATCH, CTC_SHORTEST, CTC_LONGEST = 32, 500, 1000
SCENARIOS = [
    # name,            layers, bidirectional, batch N, T,    lengths,        head,      classes
    ("1x320-CE-short", 1, False, 64, 100, "all_full", "ce_last_step", 10),
    ("1x320-CE-long", 1, False, 32, 1000, "all_full", "ce_last_step", 10),
    ("4x320-CE-long", 4, True, 32, 1000, "all_full", "ce_last_step", 10),
    ("4x320-CTC-long", 4, True, CTC_BATCH, CTC_LONGEST, "ctc_linspace", "ctc", 59),
]
LSTM_BIAS = True   # lstm::Config's default: bias_ih and bias_hh per cell, as torch.nn.LSTM
DENSE_BIAS = False  # model_config(): m.dense_bias = false

# --- Measured compute time of one whole training step (ms), one rank. From docs/benchmarks.md,
# section "Measured": 2-vCPU Intel Xeon development VM (AVX-512), variant fused, threads:2,
# runs of 2026-12-02 11:59-12:03 UTC, medians (the 4x320 cases: one timed step each).
STEP_MS = {
    "1x320-CE-short": 72.0,
    "1x320-CE-long": 357.0,
    "4x320-CE-long": 5134.0,
    "4x320-CTC-long": 3858.0,
}
STEP_SOURCE = ("docs/benchmarks.md, \"Measured\": fused, threads:2, 2-vCPU Intel Xeon VM, "
               "2026-12-02 11:59-12:03 UTC")

# --- Networks: line rate (Gb/s, 1e9 bit/s) and per-message latency alpha (us). ASSUMPTIONS,
# not measurements: a few us for RDMA-class fabrics (InfiniBand, RoCE), tens of us for TCP.
NETWORKS = [
    ("25 Gb/s TCP", 25.0, 25.0),
    ("100 Gb/s RDMA", 100.0, 3.0),
    ("400 Gb/s RDMA", 400.0, 2.0),
]
RANKS = [2 ** k for k in range(1, 10)]  # 2 .. 512
BYTES_PER_VALUE = 4  # fp32 gradients
EFFICIENCY_FLOOR = 0.5  # "stops scaling" below this parallel efficiency


def ctc_lengths():
    """np.linspace(500, 1000, 32) truncated to integers, as bench/braun.hpp computes it."""
    step = (CTC_LONGEST - CTC_SHORTEST) / (CTC_BATCH - 1)
    out = [int(CTC_SHORTEST + step * k) for k in range(CTC_BATCH)]
    out[-1] = CTC_LONGEST
    assert sum(out) == 23985, "Braun's CTC lengths must sum to 23,985"
    return out


class Case:
    def __init__(self, row, step_ms):
        (self.name, self.layers, self.bidirectional, self.batch, self.seq_len, lengths,
         self.head, self.classes) = row
        self.dirs = 2 if self.bidirectional else 1
        self.lengths = ctc_lengths() if lengths == "ctc_linspace" else [self.seq_len] * self.batch
        self.step_ms = step_ms

    def layer_input(self, layer):
        return INPUT_SIZE if layer == 0 else self.dirs * HIDDEN

    def cell_params(self, layer):
        """PyTorch's layout: 4H x in_l + 4H x H (+ 2 x 4H biases) per layer per direction."""
        gates = 4 * HIDDEN
        return gates * self.layer_input(layer) + gates * HIDDEN + (2 * gates if LSTM_BIAS else 0)

    def layer_params(self, layer):
        return self.dirs * self.cell_params(layer)

    def lstm_params(self):
        return sum(self.layer_params(l) for l in range(self.layers))

    def dense_params(self):
        return self.dirs * HIDDEN * self.classes + (self.classes if DENSE_BIAS else 0)

    def params(self):
        return self.lstm_params() + self.dense_params()

    def grad_bytes(self):
        return BYTES_PER_VALUE * self.params()

    def layer_flops(self, layer):
        """Forward GEMM FLOPs of one layer (both directions), docs/benchmarks.md's convention."""
        return self.dirs * 2 * 4 * HIDDEN * (self.layer_input(layer) + HIDDEN) * sum(self.lengths)

    def step_gflop(self):
        return 3 * sum(self.layer_flops(l) for l in range(self.layers)) / 1e9

    def buckets(self):
        """Gradient buckets in the order backward completes them, as (fraction of the backward
        done when the bucket is ready, bytes). The top layer's gradient is complete first; the
        dense head's (ready before any LSTM layer) rides with it. A layer's share of the backward
        is its share of the GEMM FLOPs."""
        total = sum(self.layer_flops(l) for l in range(self.layers))
        done, out = 0.0, []
        for layer in reversed(range(self.layers)):
            done += self.layer_flops(layer) / total
            size = self.layer_params(layer) + (self.dense_params() if layer == self.layers - 1
                                               else 0)
            out.append((done, BYTES_PER_VALUE * size))
        return out

    def shard_share(self, p, dealt=False):
        """Fraction of the global batch's compute on the busiest rank, compute proportional to
        valid frames. Contiguous shards in batch order (rank r takes sequences [r N/p,
        (r+1) N/p)), the model's default; dealt: rank r takes sequences r, r + p, r + 2p, ...
        None when p > N (no sequence left for some rank)."""
        if p > self.batch:
            return None
        frames = sum(self.lengths)
        if dealt:
            return max(sum(self.lengths[r::p]) for r in range(p)) / frames
        bounds = [round(r * self.batch / p) for r in range(p + 1)]
        return max(sum(self.lengths[bounds[r]:bounds[r + 1]]) for r in range(p)) / frames


def ring_ms(nbytes, p, gbps, alpha_us):
    """Ring allreduce: 2(p-1)/p x bytes / bandwidth + 2(p-1) x latency."""
    if p == 1:
        return 0.0
    return (2 * (p - 1) / p * nbytes * 8 / (gbps * 1e9) + 2 * (p - 1) * alpha_us * 1e-6) * 1e3


def halving_doubling_ms(nbytes, p, gbps, alpha_us):
    """Recursive halving reduce-scatter + recursive doubling allgather (Rabenseifner), p a power
    of two: the ring's bandwidth term, 2 log2(p) latency terms."""
    if p == 1:
        return 0.0
    return (2 * (p - 1) / p * nbytes * 8 / (gbps * 1e9) + 2 * math.log2(p) * alpha_us * 1e-6) * 1e3


def step_time_ms(case, compute_ms, p, net, overlap):
    """Time of one data-parallel step on p ranks. compute_ms: one rank's forward + backward +
    update. Without overlap: compute, then one allreduce of the whole flat gradient buffer.
    With overlap: forward is 1/3 of the compute, backward 2/3 (the FLOP convention: backward =
    2 x forward); each bucket's allreduce starts when its gradient is complete and the previous
    one has finished (one network), and the step ends when both backward and the last allreduce
    have (the optimizer's time is neglected, it is inside compute_ms)."""
    _, gbps, alpha = net
    if not overlap:
        return compute_ms + ring_ms(case.grad_bytes(), p, gbps, alpha)
    forward, backward = compute_ms / 3, 2 * compute_ms / 3
    end = forward
    for ready_frac, nbytes in case.buckets():
        start = max(forward + ready_frac * backward, end)
        end = start + ring_ms(nbytes, p, gbps, alpha)
    return max(compute_ms, end)


def speedup(case, p, net, overlap, weak, faster=1.0):
    """(speed-up over one rank, parallel efficiency) or None. Weak: each rank keeps Braun's batch
    (global batch p x N), speed-up in samples per second. Strong: the global batch stays Braun's
    N, each rank computes its shard in (share x one rank's step time), linear in the batch."""
    c = case.step_ms / faster
    if weak:
        t = step_time_ms(case, c, p, net, overlap)
        s = p * c / t
    else:
        share = case.shard_share(p)
        if share is None:
            return None
        t = step_time_ms(case, c * share, p, net, overlap)
        s = c / t
    return s, s / p


def para(text):
    """A paragraph of prose, wrapped as the docs are, and a blank line."""
    print(textwrap.fill(text, width=99, break_on_hyphens=False) + "\n")


def fmt_int(n):
    return f"{n:,}"


def fmt_ms(ms):
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_su(r):
    if r is None:
        return "-"
    s, e = r
    mark = "**" if e < EFFICIENCY_FLOOR else ""
    return f"{mark}{s:.1f} ({e * 100:.0f}%){mark}"


def print_bytes(cases):
    print("### Gradient bytes per step\n")
    print("| scenario | cells (layers x directions) | LSTM parameters | dense parameters | "
          "total | fp32 bytes | MiB | bf16/fp16 bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cases:
        print(f"| `{c.name}` | {c.layers} x {c.dirs} | {fmt_int(c.lstm_params())} | "
              f"{fmt_int(c.dense_params())} | {fmt_int(c.params())} | "
              f"{fmt_int(c.grad_bytes())} | {c.grad_bytes() / 2**20:.2f} | "
              f"{fmt_int(c.grad_bytes() // 2)} |")
    print()
    para("Per-layer buckets (both directions; the dense head's gradient rides with the top "
         "layer's), in the order backward completes them:")
    print("| scenario | bucket | fp32 bytes | ready after this fraction of the backward |")
    print("|---|---|---|---|")
    for c in cases:
        for i, (frac, nbytes) in enumerate(c.buckets()):
            layer = c.layers - 1 - i
            label = f"layer {layer}" + (" + dense" if layer == c.layers - 1 else "")
            print(f"| `{c.name}` | {label} | {fmt_int(nbytes)} | {frac:.3f} |")
    print()


def print_compute(cases):
    print("### Compute per step (one rank)\n")
    para(f"Measured, from {STEP_SOURCE}, unless overridden with --step-ms. GFLOP per step: the "
         "FLOP convention of docs/benchmarks.md, recomputed here.")
    print("| scenario | N | T | ms per step | GFLOP per step | GFLOP/s |")
    print("|---|---|---|---|---|---|")
    for c in cases:
        print(f"| `{c.name}` | {c.batch} | {c.seq_len} | {fmt_ms(c.step_ms)} | "
              f"{c.step_gflop():,.2f} | {c.step_gflop() / (c.step_ms / 1e3):.1f} |")
    print()


def print_allreduce(cases):
    print("### Ring allreduce time per step (ms), one allreduce of the whole gradient\n")
    print("| network | line rate | latency alpha (assumed) |")
    print("|---|---|---|")
    for name, gbps, alpha in NETWORKS:
        print(f"| {name} | {gbps:g} Gb/s = {gbps / 8:g} GB/s | {alpha:g} us |")
    print()
    shown, seen = [], set()
    for c in cases:
        if c.grad_bytes() not in seen:
            seen.add(c.grad_bytes())
            shown.append(c)
    print("| gradient | network | " + " | ".join(f"p = {p}" for p in RANKS) + " |")
    print("|---|---|" + "---|" * len(RANKS))
    for c in shown:
        label = ", ".join(f"`{o.name}`" for o in cases if o.grad_bytes() == c.grad_bytes())
        for name, gbps, alpha in NETWORKS:
            cells = " | ".join(fmt_ms(ring_ms(c.grad_bytes(), p, gbps, alpha)) for p in RANKS)
            print(f"| {label}: {c.grad_bytes() / 1e6:.2f} MB | {name} | {cells} |")
    print()
    para("Ring against recursive halving-doubling at p = 512 (ms): the same bandwidth term, "
         "2 log2(p) = 18 latency terms instead of 2(p-1) = 1022:")
    print("| gradient | network | ring | halving-doubling | latency share of the ring |")
    print("|---|---|---|---|---|")
    p = 512
    for c in shown:
        for net in NETWORKS:
            _, gbps, alpha = net
            ring = ring_ms(c.grad_bytes(), p, gbps, alpha)
            hd = halving_doubling_ms(c.grad_bytes(), p, gbps, alpha)
            lat = 2 * (p - 1) * alpha * 1e-3
            print(f"| {c.grad_bytes() / 1e6:.2f} MB | {net[0]} | {fmt_ms(ring)} | {fmt_ms(hd)} | "
                  f"{lat / ring * 100:.0f}% |")
    print()


def print_speedup(cases):
    for c in cases:
        for weak in (True, False):
            kind = ("weak scaling: per-rank batch {}, global batch p x {}".format(c.batch, c.batch)
                    if weak else
                    f"strong scaling: global batch {c.batch}, per-rank batch {c.batch}/p")
            print(f"### `{c.name}`, {kind}\n")
            para("Speed-up over one rank (parallel efficiency); bold: efficiency below "
                 f"{EFFICIENCY_FLOOR:.0%}.")
            header = "| ranks p |"
            rule = "|---|"
            for name, _, _ in NETWORKS:
                header += f" {name} | {name}, overlap |"
                rule += "---|---|"
            print(header)
            print(rule)
            for p in RANKS:
                if not weak and p > c.batch:
                    continue
                row = f"| {p} |"
                for net in NETWORKS:
                    for overlap in (False, True):
                        row += f" {fmt_su(speedup(c, p, net, overlap, weak))} |"
                print(row)
            if not weak and c.batch < RANKS[-1]:
                print(f"| > {c.batch} | no sequence left for some ranks |" + " |" * 5)
            print()


def last_scaling(c, net, overlap, weak, faster=1.0):
    """Largest p in RANKS with efficiency >= the floor, up to the first p below it."""
    best = None
    for p in RANKS:
        r = speedup(c, p, net, overlap, weak, faster)
        if r is None:
            break
        if r[1] < EFFICIENCY_FLOOR:
            return best, p, r
        best = (p, r)
    return best, None, None


def print_summary(cases):
    print("### Where it stops scaling\n")
    para(f"Largest p (powers of two up to 512; strong scaling up to p = N) whose efficiency is "
         f"at least {EFFICIENCY_FLOOR:.0%}, with its efficiency, then the efficiency at the next "
         "p, where it falls below (\"never below\": up to 512; \"p = N\": one sequence per rank, "
         "no further p).")
    print("| scenario | network | weak | weak, overlap | strong | strong, overlap |")
    print("|---|---|---|---|---|---|")
    for c in cases:
        for net in NETWORKS:
            cells = []
            for weak in (True, False):
                for overlap in (False, True):
                    best, fail, r = last_scaling(c, net, overlap, weak)
                    if best is None:
                        text = f"none ({r[1]:.0%} at {fail})"
                    else:
                        text = f"{best[0]} ({best[1][1]:.0%})"
                        if fail is not None:
                            text += f", {r[1]:.0%} at {fail}"
                        elif best[0] == c.batch and not weak:
                            text += ", p = N"
                        else:
                            text += ", never below"
                    cells.append(text)
            print(f"| `{c.name}` | {net[0]} | " + " | ".join(cells) + " |")
    print()


def print_imbalance(cases):
    print("### Shard imbalance (strong scaling, variable lengths)\n")
    para("Share of the global batch's valid frames on the busiest rank, and the efficiency "
         "bound it sets alone (1 / (p x share)), contiguous shards against dealt ones (rank r "
         "takes sequences r, r + p, ...). Only `4x320-CTC-long` has unequal lengths.")
    print("| scenario | p | contiguous share | bound | dealt share | bound |")
    print("|---|---|---|---|---|---|")
    for c in cases:
        if len(set(c.lengths)) == 1:
            continue
        for p in RANKS:
            if p > c.batch:
                break
            a, b = c.shard_share(p), c.shard_share(p, dealt=True)
            print(f"| `{c.name}` | {p} | {a:.4f} | {1 / (p * a):.0%} | {b:.4f} | "
                  f"{1 / (p * b):.0%} |")
    print()


def print_faster_ranks(cases):
    print("### If a rank were faster\n")
    para("The same model with every per-step compute time divided by k (a hypothetical rank k "
         "times faster than the measured 2-vCPU VM on the same step; nothing here is "
         "measured). Weak scaling: the largest p with efficiency at least "
         f"{EFFICIENCY_FLOOR:.0%} (all: up to 512) and the efficiency at 512 ranks, without / "
         "with overlap.")
    print("| scenario | network | k = 10 | k = 30 | k = 100 |")
    print("|---|---|---|---|---|")
    for c in cases:
        for net in NETWORKS:
            cells = []
            for k in (10.0, 30.0, 100.0):
                parts = []
                for overlap in (False, True):
                    best, fail, _ = last_scaling(c, net, overlap, True, k)
                    last = "none" if best is None else ("all" if fail is None else str(best[0]))
                    e512 = speedup(c, RANKS[-1], net, overlap, True, k)[1]
                    parts.append(f"{last} ({e512:.0%})")
                cells.append(" / ".join(parts))
            print(f"| `{c.name}` | {net[0]} | " + " | ".join(cells) + " |")
    print()


def print_break_even(cases):
    print("### Break-even compute time (weak scaling, no overlap)\n")
    para("Efficiency is C / (C + A(p)): it is 50% where the per-rank step time C equals the "
         "allreduce time A(p). Below: A(p) in ms, and the GEMM rate (GFLOP/s, the FLOP "
         "convention) at which one rank would run Braun's step in that time; a rank faster than "
         "that is below 50% at p ranks.")
    header = "| scenario | p |"
    rule = "|---|---|"
    for name, _, _ in NETWORKS:
        header += f" {name}: A(p) ms | GFLOP/s |"
        rule += "---|---|"
    print(header)
    print(rule)
    for c in cases:
        for p in (8, 64, 512):
            row = f"| `{c.name}` | {p} |"
            for _, gbps, alpha in NETWORKS:
                a = ring_ms(c.grad_bytes(), p, gbps, alpha)
                row += f" {fmt_ms(a)} | {c.step_gflop() / (a / 1e3):,.0f} |"
            print(row)
    print()


def plot(cases, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(cases), figsize=(3.6 * len(cases), 6.4), squeeze=False,
                             sharey=True)
    colors = ["tab:red", "tab:blue", "tab:green"]
    for col, c in enumerate(cases):
        for row, weak in enumerate((True, False)):
            ax = axes[row][col]
            ps = [p for p in RANKS if weak or p <= c.batch]
            for net, color in zip(NETWORKS, colors):
                for overlap, ls in ((False, "-"), (True, "--")):
                    ys = [100 * speedup(c, p, net, overlap, weak)[1] for p in ps]
                    label = net[0] + (", overlap" if overlap else "")
                    ax.plot(ps, ys, color=color, linestyle=ls, marker=".", label=label)
            ax.axhline(100 * EFFICIENCY_FLOOR, color="grey", linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 105)
            ax.set_title(f"{c.name}, " + ("weak" if weak else "strong"), fontsize=9)
            ax.set_xlabel("ranks p")
            if col == 0:
                ax.set_ylabel("parallel efficiency %")
            ax.grid(True, which="both", alpha=0.3)
    axes[1][0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Data-parallel efficiency on paper (tools/scaling_model.py); per-step compute "
                 "measured on a 2-vCPU Intel VM, 2026-12-02", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--png", help="also draw the speed-up curves into this PNG (matplotlib)")
    ap.add_argument("--step-ms", action="append", default=[], metavar="SCENARIO=MS",
                    help="replace a scenario's measured per-step compute time (repeatable)")
    args = ap.parse_args()
    step_ms = dict(STEP_MS)
    for item in args.step_ms:
        name, _, value = item.partition("=")
        if name not in step_ms:
            sys.exit(f"unknown scenario {name!r}; one of {', '.join(step_ms)}")
        step_ms[name] = float(value)
    cases = [Case(row, step_ms[row[0]]) for row in SCENARIOS]
    print_bytes(cases)
    print_compute(cases)
    print_allreduce(cases)
    print_speedup(cases)
    print_summary(cases)
    print_imbalance(cases)
    print_break_even(cases)
    print_faster_ranks(cases)
    if args.png:
        plot(cases, args.png)


if __name__ == "__main__":
    main()
