#!/usr/bin/env python3
"""Writes the PyTorch fixtures of tests/io_test.cpp and tests/tool_test.cpp into this folder.

CI only reads the committed files; regenerating them needs PyTorch (`pip install torch`); the
files are written by scripts/safetensors_io.py, so the `safetensors` package is not needed. Run
from anywhere:

    python3 tests/data/make_fixtures.py            # every case
    python3 tests/data/make_fixtures.py NAME ...   # only the named cases

Parameters and inputs come out identical on every run (fixed seeds); the expected results may
differ in their last bits under another PyTorch version. The earlier cases were written with
safetensors.torch (another tensor order in the file), so regenerate only the cases you add or
change, which keeps the committed files as they are.

For each LSTM case NAME it writes
  NAME.params.safetensors    lstm.state_dict() of a torch.nn.LSTM (F32): what users export
                             from PyTorch (with bias=False and proj_size as the case sets)
  NAME.inputs.safetensors    x, lengths (I64 or I32), h0, c0 (when the case has them), and the
                             output gradients dy, dhn, dcn of a random linear functional; h0,
                             dhn and each direction's part of dy have proj_size features when
                             the case sets it, c0 and dcn hidden_size
  NAME.expected.safetensors  what PyTorch computes in float32: y, hn, cn, dx, dh0, dc0 and
                             grad.<parameter name>
  NAME.expected64.safetensors  the same computed in float64 from the same (fp32-valued) params
                             and inputs, so the double path can be checked to ~1e-12

Variable lengths run through pack_padded_sequence(enforce_sorted=False) and
pad_packed_sequence; hn/cn are then each sequence's last valid step, as in the library. The
gradients are those of sum(dy * y) + sum(dhn * hn) + sum(dcn * cn) by torch.autograd; dy is
random at padded positions too, which PyTorch ignores (as must we).

For each CTC case NAME it writes NAME.inputs.safetensors (F32 logits or log_probs, targets,
input_lengths, target_lengths) and NAME.expected.safetensors with loss.<key> and grad.<key> for
key in none, sum, mean, each also with ".zero_infinity", computed by
torch.nn.functional.ctc_loss in float64 from the float32 inputs (grad.none is the gradient of
the sum of the per-sample losses; no gradient is stored for an infinite loss). For logits the
gradient is logits.grad after ctc_loss(logits.log_softmax(-1), ...).backward(); for log_probs it
is the true derivative -posterior (PyTorch's own log_probs.grad adds exp(log_probs), see
docs/interop.md), checked here against finite differences.

The cross-entropy case ce_options writes ce_options.inputs.safetensors (F32 logits (M, C), I64
targets with ignored rows, F32 weight (C)) and ce_options.expected.safetensors with loss.<key>
and grad.<key> for key = <reduction>.<weight: none or given>.<ignore_index>.<label_smoothing>,
computed by torch.nn.functional.cross_entropy in float64 from the float32 inputs (grad.none.* is
the gradient of the sum of the per-row losses).
"""

import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# Debian's python3-torch comes without the `safetensors` package; the repository's own writer
# needs nothing but torch.
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from safetensors_io import save_file  # noqa: E402

META = {"generator": "tests/data/make_fixtures.py", "torch": torch.__version__}


def save(tensors, name, extra=None):
    meta = dict(META)
    meta.update(extra or {})
    path = os.path.join(HERE, name)
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, meta)
    os.chmod(path, 0o644)


def run_lstm(lstm, x, lengths, h0, c0):
    """y (T, N, D*H) zero-padded, hn, cn at each sequence's last valid step."""
    hx = None if h0 is None else (h0, c0)
    if lengths is None:
        y, (hn, cn) = lstm(x, hx)
        return y, hn, cn
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, (hn, cn) = lstm(packed, hx)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    return y, hn, cn


def lstm_case(name, input_size, hidden, layers, bidirectional, seq_len, batch, lengths,
              with_state, lengths_dtype=torch.int64, seed=0, proj_size=0, bias=True):
    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(input_size, hidden, layers, bias=bias, bidirectional=bidirectional,
                         proj_size=proj_size)
    cells = layers * (2 if bidirectional else 1)
    state = proj_size if proj_size > 0 else hidden  # features of h; c keeps hidden
    x = torch.randn(seq_len, batch, input_size)
    h0 = torch.randn(cells, batch, state) if with_state else None
    c0 = torch.randn(cells, batch, hidden) if with_state else None
    dy = torch.randn(seq_len, batch, state * (2 if bidirectional else 1))
    dhn = torch.randn(cells, batch, state)
    dcn = torch.randn(cells, batch, hidden)
    lens = None if lengths is None else torch.tensor(lengths, dtype=torch.int64)

    inputs = {"x": x, "dy": dy, "dhn": dhn, "dcn": dcn}
    if lens is not None:
        inputs["lengths"] = lens.to(lengths_dtype)
    if with_state:
        inputs["h0"], inputs["c0"] = h0, c0
    config = {"input_size": str(input_size), "hidden_size": str(hidden),
              "num_layers": str(layers), "bidirectional": str(bidirectional).lower(),
              "proj_size": str(proj_size), "bias": str(bias).lower()}
    save(dict(lstm.state_dict()), f"{name}.params.safetensors", config)
    save(inputs, f"{name}.inputs.safetensors", config)

    for dtype, suffix in ((torch.float32, ""), (torch.float64, "64")):
        model = copy.deepcopy(lstm).to(dtype)
        xs = x.detach().to(dtype, copy=True).requires_grad_()
        states = [None, None]
        if with_state:
            states = [h0.detach().to(dtype, copy=True).requires_grad_(),
                      c0.detach().to(dtype, copy=True).requires_grad_()]
        y, hn, cn = run_lstm(model, xs, lens, *states)
        loss = (y * dy.to(dtype)).sum() + (hn * dhn.to(dtype)).sum() + (cn * dcn.to(dtype)).sum()
        loss.backward()
        out = {"y": y.detach(), "hn": hn.detach(), "cn": cn.detach(), "dx": xs.grad}
        if with_state:
            out["dh0"], out["dc0"] = states[0].grad, states[1].grad
        for pname, p in model.named_parameters():
            out["grad." + pname] = p.grad
        save(out, f"{name}.expected{suffix}.safetensors", config)


def ctc_case(name, seq_len, batch, classes, target_lengths, input_lengths, blank, given,
             concatenated, seed=0):
    torch.manual_seed(seed)
    logits = torch.randn(seq_len, batch, classes) * 2
    max_s = max(target_lengths)
    labels = [c for c in range(classes) if c != blank]
    targets = torch.zeros(batch, max(max_s, 1), dtype=torch.int64)
    for n, s in enumerate(target_lengths):
        # Repeated labels (which need a blank between them) appear on purpose.
        seq = [labels[torch.randint(len(labels), (1,)).item()] for _ in range(s)]
        if s >= 2:
            seq[1] = seq[0]
        targets[n, :s] = torch.tensor(seq, dtype=torch.int64)
    t_lens = torch.tensor(target_lengths, dtype=torch.int64)
    i_lens = torch.tensor(input_lengths, dtype=torch.int64)
    flat = torch.cat([targets[n, :s] for n, s in enumerate(target_lengths)])
    tgt = flat if concatenated else targets

    source = logits if given == "logits" else logits.log_softmax(-1)
    inputs = {given: source, "input_lengths": i_lens.to(torch.int32),
              "target_lengths": t_lens.to(torch.int32), "targets": tgt}
    meta = {"blank": str(blank)}
    save(inputs, f"{name}.inputs.safetensors", meta)

    # Expected values in float64 from the (float32-valued) inputs, so that they are exact to
    # ~1e-15 and any error measured is the library's.
    expected = {}
    valid = (torch.arange(seq_len)[:, None] < i_lens[None, :]).to(torch.float64)[:, :, None]
    for reduction in ("none", "sum", "mean"):
        for zero_infinity in (False, True):
            leaf = source.detach().to(torch.float64, copy=True).requires_grad_()
            log_probs = leaf.log_softmax(-1) if given == "logits" else leaf
            loss = torch.nn.functional.ctc_loss(log_probs, tgt, i_lens, t_lens, blank=blank,
                                                reduction=reduction, zero_infinity=zero_infinity)
            key = reduction + (".zero_infinity" if zero_infinity else "")
            expected["loss." + key] = loss.detach()
            per_sample = torch.nn.functional.ctc_loss(log_probs.detach(), tgt, i_lens, t_lens,
                                                      blank=blank, reduction="none")
            feasible = torch.isfinite(per_sample)
            if not (feasible.all() or zero_infinity):
                continue  # PyTorch's gradient of an infinite loss is not defined
            (loss.sum() if reduction == "none" else loss).backward()
            grad = leaf.grad
            if given == "log_probs":
                # PyTorch returns exp(log_probs) - posterior for log_probs (right only after a
                # log_softmax backward); the derivative w.r.t. log_probs itself is -posterior,
                # which is what the library (and lstm_tool) returns for a log_probs input.
                scale = torch.ones(batch, dtype=torch.float64)
                if reduction == "mean":
                    scale = 1.0 / (batch * t_lens.clamp(min=1).to(torch.float64))
                mask = valid * feasible.to(torch.float64)[None, :, None]
                grad = grad - scale[None, :, None] * leaf.detach().exp() * mask
                check_log_probs_gradient(leaf.detach(), tgt, i_lens, t_lens, blank, reduction,
                                         zero_infinity, grad)
            expected["grad." + key] = grad
    save(expected, f"{name}.expected.safetensors", meta)


def check_log_probs_gradient(log_probs, targets, i_lens, t_lens, blank, reduction, zero_infinity,
                             grad, eps=1e-6):
    """Asserts `grad` equals central finite differences of the loss w.r.t. log_probs."""
    def loss_at(lp):
        loss = torch.nn.functional.ctc_loss(lp, targets, i_lens, t_lens, blank=blank,
                                            reduction=reduction, zero_infinity=zero_infinity)
        return loss.sum().item()
    flat = log_probs.reshape(-1)
    for k in range(flat.numel()):
        plus, minus = flat.clone(), flat.clone()
        plus[k] += eps
        minus[k] -= eps
        fd = (loss_at(plus.view_as(log_probs)) - loss_at(minus.view_as(log_probs))) / (2 * eps)
        assert abs(fd - grad.reshape(-1)[k].item()) < 1e-6, (k, fd, grad.reshape(-1)[k].item())


# name -> a function writing that case's files.
CASES = {
    "lstm_uni1": lambda: lstm_case("lstm_uni1", 3, 4, 1, False, 5, 2, None, True, seed=1),
    "lstm_bi1_varlen": lambda: lstm_case("lstm_bi1_varlen", 3, 4, 1, True, 6, 3, [6, 2, 4],
                                         False, torch.int32, seed=2),
    "lstm_uni2_varlen": lambda: lstm_case("lstm_uni2_varlen", 2, 3, 2, False, 5, 3, [3, 5, 1],
                                          True, seed=3),
    "lstm_bi2_varlen": lambda: lstm_case("lstm_bi2_varlen", 3, 5, 2, True, 4, 3, [4, 1, 3],
                                         True, seed=4),
    # Equal lengths, so that variants without per-sequence lengths run a deep bidirectional case.
    "lstm_bi2_full": lambda: lstm_case("lstm_bi2_full", 4, 3, 2, True, 4, 2, None, True, seed=8),
    # LSTMP: layer 1 takes the 2 * proj_size wide output of layer 0, h0/hn are proj_size wide.
    "lstm_proj_bi2_varlen": lambda: lstm_case("lstm_proj_bi2_varlen", 3, 5, 2, True, 4, 3,
                                              [4, 1, 3], True, seed=9, proj_size=2),
    # bias=False: no bias_ih/bias_hh tensors at all.
    "lstm_nobias_uni2": lambda: lstm_case("lstm_nobias_uni2", 3, 4, 2, False, 5, 2, None, True,
                                          seed=10, bias=False),
    "lstm_proj_nobias_uni1": lambda: lstm_case("lstm_proj_nobias_uni1", 2, 6, 1, False, 5, 2,
                                               [5, 3], False, seed=11, proj_size=3, bias=False),

    # Class weights, ignored rows (-100 and a class index) and label smoothing, every reduction.
    "ce_options": lambda: ce_case("ce_options", 12, 6, seed=12),

    "ctc_logits_padded": lambda: ctc_case("ctc_logits_padded", 8, 3, 5, [3, 1, 2], [8, 5, 6], 0,
                                          "logits", False, seed=5),
    "ctc_logprobs_concat": lambda: ctc_case("ctc_logprobs_concat", 7, 3, 4, [2, 3, 1],
                                            [7, 7, 3], 3, "log_probs", True, seed=6),
    # Sample 1's target "a a b" needs 4 frames (a blank must separate the repeated a) but has
    # 3: infeasible, its loss is +inf (zero under zero_infinity).
    "ctc_infeasible": lambda: ctc_case("ctc_infeasible", 6, 2, 4, [2, 3], [6, 3], 0, "logits",
                                       False, seed=7),
}


def ce_case(name, rows, classes, seed=0):
    torch.manual_seed(seed)
    logits = torch.randn(rows, classes) * 3
    weight = torch.rand(classes) * 2 + 0.25
    targets = torch.randint(classes, (rows,))
    targets[1::4] = -100  # PyTorch's default ignore_index
    targets[2::5] = 2  # the class the cases with ignore_index 2 leave out
    save({"logits": logits, "targets": targets, "weight": weight},
         f"{name}.inputs.safetensors")
    expected = {}
    for reduction in ("none", "sum", "mean"):
        for weighted in (False, True):
            for ignore_index in (-100, 2):
                for smoothing in (0.0, 0.3):
                    # With ignore_index 2 the -100 rows are out of range: PyTorch would refuse
                    # them, so those rows take class 0 there.
                    tgt = targets if ignore_index == -100 else targets.clamp(min=0)
                    leaf = logits.to(torch.float64).requires_grad_()
                    loss = torch.nn.functional.cross_entropy(
                        leaf, tgt, weight=weight.to(torch.float64) if weighted else None,
                        ignore_index=ignore_index, reduction=reduction,
                        label_smoothing=smoothing)
                    (loss.sum() if reduction == "none" else loss).backward()
                    key = (f"{reduction}.{'given' if weighted else 'none'}.{ignore_index}."
                           f"{smoothing}")
                    expected["loss." + key] = loss.detach()
                    expected["grad." + key] = leaf.grad
    save(expected, f"{name}.expected.safetensors")


def main(names):
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    for name in names or CASES:
        CASES[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
