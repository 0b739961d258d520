#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Plain Python (json + struct), no PyTorch.
- safetensors_fuzz: small valid files of every dtype and rank, an nn.LSTM state_dict
  (bidirectional, two layers, also under a module prefix), and near misses that each trip one
  check of the reader, so the fuzzer starts next to every branch.
- ctc_fuzz: valid CTC problems in the target's byte layout (tests/fuzz/ctc_fuzz.cpp): logits and
  log-probs, padded and concatenated targets, float and double, one with NaN on a valid frame.
- tool_fuzz: lstm_tool runs on the test fixtures of tests/data (the target's layout: a command
  byte, the first file's length in two bytes, the two files).
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
DATA = os.path.join(HERE, "..", "data")
SIZES = {"F32": 4, "F64": 8, "I32": 4, "I64": 8}
FORMATS = {"F32": "f", "F64": "d", "I32": "i", "I64": "q"}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def build(tensors, metadata=None):
    """tensors: list of (name, dtype, shape); values are 0, 1, 2, ... of that dtype."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        count = numel(shape)
        blob = struct.pack("<%d%s" % (count, FORMATS[dtype]), *range(count))
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw(header_text, data=b"", length=None):
    text = header_text.encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def lstm(input_size, hidden, layers, bidirectional, prefix=""):
    out = []
    for layer in range(layers):
        for suffix in ("", "_reverse") if bidirectional else ("",):
            width = input_size if layer == 0 else hidden * (2 if bidirectional else 1)
            out += [(f"{prefix}weight_ih_l{layer}{suffix}", "F32", [4 * hidden, width]),
                    (f"{prefix}weight_hh_l{layer}{suffix}", "F32", [4 * hidden, hidden]),
                    (f"{prefix}bias_ih_l{layer}{suffix}", "F32", [4 * hidden]),
                    (f"{prefix}bias_hh_l{layer}{suffix}", "F32", [4 * hidden])]
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "empty": build([]),
        "dtypes": build([("a", "F32", [2, 3]), ("b", "F64", [3]), ("c", "I32", [1, 1, 2]),
                         ("d", "I64", [2])]),
        "scalar_and_empty": build([("s", "F64", []), ("e", "F32", [0, 4])]),
        "metadata": build([("x", "F32", [2])], {"format": "pt", "k": "v"}),
        "lstm_bi2": build(lstm(2, 1, 2, True)),
        "lstm_prefixed": build(lstm(3, 2, 1, False, "lstm.") + [("fc.weight", "F32", [2, 2])]),
        "lstm_missing": build(lstm(2, 1, 2, False)[:-1]),
        "bad_dtype": raw('{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4),
        "bad_count": raw('{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', b"\0" * 20),
        "overlap": raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                       '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', b"\0" * 12),
        "gap": raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                   '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', b"\0" * 12),
        "duplicate": raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                         '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
        "long_header": raw("{}", b"", length=1 << 40),
        "huge_shape": raw('{"a":{"dtype":"F64","shape":[4294967296,4294967296],'
                          '"data_offsets":[0,8]}}', b"\0" * 8),
        "empty_huge": raw('{"a":{"dtype":"F32","shape":[4294967296,4294967296,0],'
                          '"data_offsets":[0,0]}}'),
        "deep": raw('{"a":{"shape":[[[[1]]]]}}'),
    }
    write("safetensors_fuzz", {name + ".safetensors": blob for name, blob in seeds.items()})
    write("ctc_fuzz", ctc_seeds())
    write("tool_fuzz", tool_seeds())


def write(target, seeds):
    folder = os.path.join(OUT, target)
    os.makedirs(folder, exist_ok=True)
    for name, blob in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(blob)


def ctc_problem(flags, double, frames, input_lengths, target_lengths, classes, targets,
                stride=0, poison=None):
    """ctc_fuzz's layout: flags, kind, T, N, C, blank 0, the lengths as small signed bytes, the
    padded stride (or any byte, then the concatenated count), the labels, one byte per input
    value (bytes >= 6 map to (b - 128) / 8)."""
    batch = len(input_lengths)
    out = [flags, 1 if double else 0, frames, batch, classes, 0]
    out += input_lengths + target_lengths
    out += [stride] if flags & 2 else [0, len(targets)]
    out += targets
    values = [(37 * k + 11) % 120 + 70 for k in range(frames * batch * classes)]
    if poison is not None:
        values[poison] = 0  # NaN
    return bytes(out + values)


def ctc_seeds():
    logits, padded, grad = 1, 2, 8
    return {
        "padded_logits_f32": ctc_problem(logits | padded | grad, False, 5, [5, 4], [2, 1], 4,
                                         [1, 2, 0, 3, 0, 0], stride=3),
        "concat_logprobs_f64": ctc_problem(grad | 0x20, True, 6, [6, 3, 5], [3, 1, 0], 5,
                                           [1, 1, 2, 4]),
        "mean_zero_infinity": ctc_problem(logits | padded | grad | 4 | 0x20, False, 4, [4, 2],
                                          [3, 2], 3, [1, 2, 1, 2, 2, 0], stride=3),
        "nan_on_valid_frame": ctc_problem(logits | grad, True, 3, [3], [1], 3, [2], poison=4),
        # Found by the fuzzer (2026-12-05): double log-probs, empty targets, the blank's log-prob
        # DBL_MAX on two frames and -inf on the third; the sum overflowed to +inf and met the
        # -inf as NaN instead of a zero probability (loss +inf).
        "overflow_then_impossible_f64": bytes.fromhex(
            "0a27050402010301020100000000030b05bb040400010504a50"
            "20103030203010402010203020201020202020202020150435f"),
    }


def tool_seeds():
    def read(name):
        with open(os.path.join(DATA, name + ".safetensors"), "rb") as f:
            return f.read()

    def run(choice, first, second):
        return bytes([choice, len(first) >> 8, len(first) & 0xFF]) + first + second

    params, inputs = read("lstm_uni1.params"), read("lstm_uni1.inputs")
    varlen_params, varlen_inputs = read("lstm_bi2_varlen.params"), read("lstm_bi2_varlen.inputs")
    return {
        "info": run(0, b"", params),
        "ctc_padded_mean": run(1 | 0x20, b"", read("ctc_logits_padded.inputs")),
        "ctc_concat_blank3_none": run(1 | (3 << 2), b"", read("ctc_logprobs_concat.inputs")),
        "ctc_infeasible_zero_infinity": run(1 | 0x40, b"", read("ctc_infeasible.inputs")),
        "lstm_basic_forward": run(2, params, inputs),
        "lstm_fused_backward": run(2 | 4 | 0x10, params, inputs),
        "lstm_bi2_varlen_backward": run(2 | 0x10, varlen_params, varlen_inputs),
    }


if __name__ == "__main__":
    main()
