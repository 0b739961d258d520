#!/usr/bin/env python3
"""Moves spoken-digit models between this library and PyTorch, and compares their outputs.

A development-time tool (it needs PyTorch; the library, its tests and CI never do). It reads the
file spoken_digits_train writes with --export (both splits' features and labels, and the
library's held-out outputs) and a model as a safetensors state dict: a checkpoint of
spoken_digits_train, or what `train` below writes. Models are a 2-layer bidirectional nn.LSTM
(member `lstm`) and an nn.Linear (member `fc`): on the mean of each utterance's outputs for the
isolated task, on every frame for the connected one (CTC, blank = the last class).

  compare EXPORT MODEL       evaluates MODEL in PyTorch on EXPORT's held-out features and
                             compares with the library's outputs stored in EXPORT: predicted
                             labels (argmax, or greedy CTC decoding) that agree, largest logit
                             difference, and both frameworks' accuracy or label error rate.
  train EXPORT OUT           trains the same model in PyTorch on EXPORT's training features with
                             the recipe of spoken_digits_train (AdamW, warm-up + cosine, clipping,
                             dropout, length-bucketed batches), writes its state dict to OUT and
                             prints its held-out score. Then
                               spoken_digits_train DATA --task T --import OUT --epochs 0 \\
                                   --export EXPORT2
                             evaluates it in the library and `compare EXPORT2 OUT` compares.

    python3 examples/spoken_digits/pytorch_crosscheck.py compare /tmp/x.safetensors \\
        /tmp/digits/spoken_digits_isolated_fused.safetensors
"""

import argparse
import math
import os
import random
import sys
import time

# PyTorch's own threads (--threads) do the parallel work; a threaded BLAS underneath (Debian's
# PyTorch calls the system's, often OpenBLAS with a thread per core) would oversubscribe the
# cores: a connected-digit batch took 8.4 s instead of 1.3 s. Read when the BLAS loads, so set
# before torch is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from safetensors_io import load_file, save_file  # noqa: E402

MEL_BANDS = 40
# spoken_digits_train's recipe (train_digits.cpp and options.cpp), so that a model trained here
# is trained as the library trains it.
RECIPE = dict(lr=3e-3, weight_decay=1e-2, warmup_start=0.1, end_factor=1e-2, clip=1.0,
              dropout=0.3, batch=16)


class Model(torch.nn.Module):
    def __init__(self, hidden, layers, classes, dropout=0.0):
        super().__init__()
        self.lstm = torch.nn.LSTM(MEL_BANDS, hidden, layers, bidirectional=True, dropout=dropout)
        self.fc = torch.nn.Linear(2 * hidden, classes)

    def forward(self, x, lengths, pooled):
        """x (T, N, 40) padded time-major, lengths (N) -> (N, C) when pooled, else (T, N, C)."""
        if bool((lengths == x.shape[0]).all()):
            y, _ = self.lstm(x)  # no padding: packing would only cost time
        else:
            packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
            y, _ = self.lstm(packed)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[0])
        if pooled:
            return self.fc(y.sum(0) / lengths.to(y.dtype).unsqueeze(1))
        return self.fc(y)


def split(tensors, name):
    """The utterances of one split: lists of (frames, 40) features and of label tensors."""
    lengths = tensors[name + ".lengths"].tolist()
    label_lengths = tensors[name + ".label_lengths"].tolist()
    features = list(torch.split(tensors[name + ".features"], lengths))
    labels = list(torch.split(tensors[name + ".labels"], label_lengths))
    return features, labels


def batches(lengths, size, rng, exact):
    """Indices bucketed by length as spoken_digits_train does: sorted by (length, index), cut
    every `size` (and at every length change when exact), the batches' order shuffled."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out = []
    for i in order:
        if (not out or len(out[-1]) == size
                or (exact and lengths[i] != lengths[out[-1][-1]])):
            out.append([])
        out[-1].append(i)
    rng.shuffle(out)
    return out


def pad(features, idx):
    x = torch.nn.utils.rnn.pad_sequence([features[i] for i in idx])
    return x, torch.tensor([features[i].shape[0] for i in idx])


def greedy_decode(frames, blank):
    """frames (T, C) -> the best path with repeats merged and blanks dropped."""
    best = frames.argmax(1).tolist()
    out, previous = [], None
    for c in best:
        if c != blank and c != previous:
            out.append(c)
        previous = c
    return out


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                           diagonal + (a[i - 1] != b[j - 1]))
    return row[-1]


def describe(meta):
    return int(meta["hidden"]), int(meta["layers"]), int(meta["classes"]), int(meta["blank"])


def evaluate(model, features, labels, task, blank, batch=64):
    """Per utterance: (C) logits for isolated digits, (frames, C) for strings; and the score."""
    model.eval()
    logits = [None] * len(features)
    with torch.no_grad():
        order = sorted(range(len(features)), key=lambda i: features[i].shape[0])
        for b in range(0, len(order), batch):
            idx = order[b:b + batch]
            x, lengths = pad(features, idx)
            out = model(x, lengths, task == "isolated")
            for n, i in enumerate(idx):
                logits[i] = out[n] if task == "isolated" else out[:lengths[n], n]
    return logits, score(logits, labels, task, blank)


def predictions(logits, task, blank):
    if task == "isolated":
        return [[int(l.argmax())] for l in logits]
    return [greedy_decode(l, blank) for l in logits]


def score(logits, labels, task, blank):
    hyps = predictions(logits, task, blank)
    refs = [l.tolist() for l in labels]
    if task == "isolated":
        return sum(h == r for h, r in zip(hyps, refs)) / len(refs)
    return sum(edit_distance(h, r) for h, r in zip(hyps, refs)) / sum(len(r) for r in refs)


def load_model(path, meta):
    hidden, layers, classes, _ = describe(meta)
    model = Model(hidden, layers, classes)
    state = {k: v for k, v in load_file(path).items() if k.startswith(("lstm.", "fc."))}
    model.load_state_dict(state, strict=True)
    return model


def compare(args):
    tensors, meta = load_file(args.export, with_metadata=True)
    task, blank = meta["task"], describe(meta)[3]
    features, labels = split(tensors, "heldout")
    model = load_model(args.model, meta)
    if args.double:
        model = model.double()
        features = [f.double() for f in features]
    torch_logits, torch_score = evaluate(model, features, labels, task, blank)
    ours = tensors["heldout.logits"]
    if task == "isolated":
        ours = list(ours)
    else:
        ours = list(torch.split(ours, tensors["heldout.lengths"].tolist()))
    ours_score = score(ours, labels, task, blank)
    agree = sum(a == b for a, b in zip(predictions(ours, task, blank),
                                       predictions(torch_logits, task, blank)))
    diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(ours, torch_logits))
    scale = max(float(a.abs().max()) for a in ours)
    name = "accuracy" if task == "isolated" else "label error rate"
    print(f"{task} digits, {len(labels)} held-out utterances, model {args.model}, "
          f"PyTorch in {'float64' if args.double else 'float32'}")
    print(f"  library {name} {ours_score:.4f}, PyTorch {name} {torch_score:.4f}")
    print(f"  predictions agree on {agree}/{len(labels)} utterances "
          f"({100.0 * agree / len(labels):.2f}%)")
    print(f"  largest logit difference {diff:.3g} (largest |logit| {scale:.3g})")
    return 0 if agree == len(labels) or agree / len(labels) >= args.min_agreement else 1


def lr_at(step, steps_per_epoch, total):
    """spoken_digits_train's WarmupCosineLr as a factor of the base rate."""
    r = RECIPE
    if step < steps_per_epoch:
        return r["warmup_start"] + (1 - r["warmup_start"]) * step / steps_per_epoch
    t_max = max(1, total - steps_per_epoch - 1)
    phase = math.pi * min(step - steps_per_epoch, t_max) / t_max
    return r["end_factor"] + (1 - r["end_factor"]) * (1 + math.cos(phase)) / 2


def train(args):
    tensors, meta = load_file(args.export, with_metadata=True)
    task = meta["task"]
    hidden, layers, classes, blank = describe(meta)
    hidden = args.hidden or hidden
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    features, labels = split(tensors, "train")
    held_features, held_labels = split(tensors, "heldout")
    lengths = [f.shape[0] for f in features]
    model = Model(hidden, layers, classes, RECIPE["dropout"])
    opt = torch.optim.AdamW(model.parameters(), lr=RECIPE["lr"],
                            weight_decay=RECIPE["weight_decay"])
    steps_per_epoch = len(batches(lengths, RECIPE["batch"], random.Random(0), args.exact_lengths))
    total = args.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, steps_per_epoch, total))
    ctc = torch.nn.CTCLoss(blank=blank, reduction="mean")
    print(f"PyTorch {torch.__version__}: {task} digits, {len(features)} training utterances, "
          f"hidden {hidden}, {args.epochs} epochs of {steps_per_epoch} steps, "
          f"{args.threads} threads")
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        epoch_start, loss_sum = time.time(), 0.0
        for idx in batches(lengths, RECIPE["batch"], rng, args.exact_lengths):
            x, xl = pad(features, idx)
            if task == "isolated":
                loss = torch.nn.functional.cross_entropy(
                    model(x, xl, True), torch.cat([labels[i] for i in idx]))
            else:
                log_probs = model(x, xl, False).log_softmax(2)
                targets = torch.cat([labels[i] for i in idx])
                target_lengths = torch.tensor([len(labels[i]) for i in idx])
                loss = ctc(log_probs, targets, xl, target_lengths)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["clip"])
            opt.step()
            sched.step()
            loss_sum += float(loss) * len(idx)
        _, held = evaluate(model, held_features, held_labels, task, blank)
        print(f"epoch {epoch + 1:3d}/{args.epochs}: loss {loss_sum / len(features):.4f}, "
              f"held-out {'accuracy' if task == 'isolated' else 'label error rate'} "
              f"{held:.4f}, {time.time() - epoch_start:.1f} s", flush=True)
    save_file(model.state_dict(), args.out, metadata={"trained_by": f"PyTorch {torch.__version__}"})
    print(f"final held-out score {held:.4f} after {time.time() - start:.0f} s; "
          f"state dict {args.out}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("export")
    c.add_argument("model")
    c.add_argument("--double", action="store_true", help="evaluate in float64 in PyTorch")
    c.add_argument("--min-agreement", type=float, default=0.999,
                   help="exit 1 when fewer predictions agree (default 0.999)")
    t = sub.add_parser("train")
    t.add_argument("export")
    t.add_argument("out")
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--exact-lengths", action="store_true")
    t.add_argument("--hidden", type=int, default=0,
                   help="LSTM hidden size (default: that of the model in EXPORT)")
    args = parser.parse_args()
    return compare(args) if args.command == "compare" else train(args)


if __name__ == "__main__":
    sys.exit(main())
