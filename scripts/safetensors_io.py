"""Read and write safetensors files with PyTorch alone (no `safetensors` package needed).

Debian ships python3-torch but not the `safetensors` package, and pip refuses system-wide
installs there; this module is the small route the docs use instead. The format: an 8-byte
little-endian header length, a JSON header mapping each tensor name to its dtype, shape and
byte range in the data that follows (and an optional "__metadata__" map of strings), then the
data, little-endian, row-major.

    import sys; sys.path.insert(0, "scripts")
    from safetensors_io import load_file, save_file
    model.load_state_dict(load_file("model.safetensors"), strict=False)
    save_file(lstm.state_dict(), "model.safetensors")
"""

import json
import struct

import torch

_DTYPES = {
    "F32": torch.float32,
    "F64": torch.float64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def load_file(path, with_metadata=False):
    """The tensors of `path` as a dict of name -> CPU tensor (and the metadata dict if asked)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    if header_len > len(blob) - 8:
        raise ValueError(f"{path}: header length {header_len} exceeds the file")
    header = json.loads(blob[8 : 8 + header_len])
    data = memoryview(blob)[8 + header_len :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name!r} lies outside the data")
        dtype = _DTYPES[entry["dtype"]]
        raw = bytearray(data[begin:end])  # a writable copy the tensor can own
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"]).clone()
    return (tensors, metadata) if with_metadata else tensors


def save_file(tensors, path, metadata=None):
    """Writes a dict of name -> tensor (any device; saved contiguous, on the CPU) to `path`."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, tensor in tensors.items():
        t = tensor.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in chunks:
            f.write(raw)
