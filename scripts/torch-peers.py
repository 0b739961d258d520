#!/usr/bin/env python3
"""Times PyTorch's CPU code on lstm_bench's shapes, so ratios to it come from the same minutes.

Usage: scripts/torch-peers.py [--threads K] [--repetitions R] [--steps S] [--warmup W] [CASE ...]

Cases (default: all three), as docs/benchmarks.md, "The cases", defines them for the bench:
  ctc             log_softmax + ctc_loss (blank 0, batch mean) + backward on Braun's CTC shape:
                  T 1000, N 32, C 59, 100 labels per sample, input lengths linspace(500, 1000, 32),
                  logits uniform in [-1, 1) (the bench's loss/ctc/cpu)
  1x320-CE-short  one training step: nn.LSTM(123, 320) over T 100, N 64, a dense 320 -> 10 without
                  bias on the last step, cross-entropy (batch mean), backward, Adam (lr 1e-3)
  1x320-CE-long   the same with T 1000, N 32

Prints a markdown table: per case, the median over repetitions of each repetition's median step,
and the fastest and slowest of those medians. PyTorch is a development-time peer only: nothing in
the library, its tests or CI needs it. Debian's python3-torch computes its GEMMs with whatever
libblas.so.3 is installed (the reference BLAS runs at a few GFLOP/s), so the header names the BLAS
library the process loaded; install libopenblas0-pthread before timing.
"""
import argparse
import os
import statistics
import time

# Debian's PyTorch runs its own loops on an OpenMP team and its GEMMs on OpenBLAS's threads. With
# OpenMP's default active wait, the idle team spins on the cores that OpenBLAS's threads need:
# on a 2-vCPU EPYC Zen 4 (2026-12-05) the CE-short step took 650-810 ms that way and 177-192 ms
# with a passive wait (CTC 113 ms either way). So the wait is passive unless the caller says.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import torch  # noqa: E402 (after the environment it reads at load)

INPUT, HIDDEN, CLASSES = 123, 320, 10
SCENARIOS = {"1x320-CE-short": (100, 64), "1x320-CE-long": (1000, 32)}  # name: (T, N)
CTC_T, CTC_N, CTC_C, CTC_L = 1000, 32, 59, 100


def ctc_call():
    """Returns one call of PyTorch's CTC loss and its gradient on fixed data."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.rand(CTC_T, CTC_N, CTC_C, generator=gen) * 2 - 1).requires_grad_()
    # numpy's linspace(500, 1000, 32) truncated to integers, as the bench computes its lengths.
    lengths = torch.linspace(500, 1000, CTC_N, dtype=torch.float64).long()
    labels = torch.randint(1, CTC_C, (CTC_N, CTC_L), generator=gen)
    label_lengths = torch.full((CTC_N,), CTC_L, dtype=torch.long)

    def call():
        logits.grad = None
        loss = torch.nn.functional.ctc_loss(logits.log_softmax(2), labels, lengths,
                                            label_lengths, blank=0, reduction="mean")
        loss.backward()

    return call


def ce_step(name):
    """Returns one training step of a Braun 1x320 cross-entropy scenario."""
    steps, batch = SCENARIOS[name]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(steps, batch, INPUT, generator=gen) * 2 - 1
    target = torch.randint(0, CLASSES, (batch,), generator=gen)
    lstm = torch.nn.LSTM(INPUT, HIDDEN)
    head = torch.nn.Linear(HIDDEN, CLASSES, bias=False)
    params = list(lstm.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)

    def step():
        opt.zero_grad()
        out, _ = lstm(x)
        torch.nn.functional.cross_entropy(head(out[-1]), target).backward()
        opt.step()

    return step


def time_case(call, repetitions, steps, warmup):
    """Medians of `steps` timed calls after `warmup` untimed ones, one per repetition, in ms."""
    medians = []
    for _ in range(repetitions):
        for _ in range(warmup):
            call()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times) * 1e3)
    return medians


def loaded_blas():
    """The BLAS and LAPACK shared objects this process has mapped (after a GEMM has run)."""
    torch.randn(64, 64) @ torch.randn(64, 64)
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in path or "lapack" in path or "mkl" in path:
                names.add(path.rsplit("/", 1)[-1])
    return ", ".join(sorted(names)) or "none found (a BLAS linked in statically)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", default=["ctc", *SCENARIOS])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    unknown = [c for c in args.cases if c != "ctc" and c not in SCENARIOS]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; expected ctc or one of {list(SCENARIOS)}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # get_cpu_capability (the ATen kernels' instruction set) is newer than Debian's 1.13.
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, "
          f"BLAS loaded: {loaded_blas()}, ATen CPU capability: "
          f"{capability() if capability else 'not reported by this version'}")
    print()
    print("| case | median ms | fastest | slowest | repetitions x steps |")
    print("|---|---|---|---|---|")
    for case in args.cases:
        call = ctc_call() if case == "ctc" else ce_step(case)
        ms = time_case(call, args.repetitions, args.steps, args.warmup)
        print(f"| {case} | {statistics.median(ms):.1f} | {min(ms):.1f} | {max(ms):.1f} | "
              f"{args.repetitions} x {args.steps} |", flush=True)


if __name__ == "__main__":
    main()
