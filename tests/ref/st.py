"""Minimal safetensors writer/reader for the reference scripts (Debian has
no safetensors package). Tensors are written as F32 unless they are int64."""
import json
import struct

import torch


def save(tensors, path, metadata=None):
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.int64:
            dtype = "I64"
        else:
            t = t.to(torch.float32)
            dtype = "F32"
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def load(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64, "F16": np.float16}[info["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(body[a:b], dtype=dt).copy()).reshape(info["shape"])
    return out
