#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target into tests/fuzz/corpus/.

Plain Python (json + struct), no PyTorch: small valid files of every dtype and rank, an
nn.LSTM state_dict (bidirectional, two layers, also under a module prefix), and near misses
that each trip one check of the reader, so the fuzzer starts next to every branch.
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
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
    for name, blob in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
