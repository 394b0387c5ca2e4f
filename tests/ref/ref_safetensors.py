"""Reference safetensors files written by Python, read by
tests/unit/test_ref_safetensors.c:

safetensors_dtypes.safetensors  every dtype duet converts (F32, F16, BF16,
    F64, I64, I32, U8), written by a local writer with the JSON keys in an
    order different from the data order, plus metadata;
safetensors_expect.safetensors  the same values converted to float32 by
    torch (st.py), the answers for the C reader;
safetensors_state.safetensors   a PyTorch state dict with MMEditing-style
    names (generator.conv_first.weight, discriminator.bn.num_batches_tracked
    as a 0-d I64), written by st.py, for duet's checkpoint loader."""
import json
import os
import struct

import torch

import st

_DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8",
}


def _raw_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: take the bits
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def _save_any(tensors, path, metadata):
    """Like st.save but keeps every dtype, and writes the JSON keys in
    reverse order (the format allows any order)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = _raw_bytes(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    ordered = {"__metadata__": metadata}
    for name in reversed(list(header)):
        ordered[name] = header[name]
    raw = json.dumps(ordered).encode()  # default separators: spaces too
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


class _Gen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_first = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.upsample = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 3, padding=1),
                                            torch.nn.PixelShuffle(2))


class _Disc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv0_0 = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn0_0 = torch.nn.BatchNorm2d(4)
        self.linear1 = torch.nn.Linear(8, 2)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = _Gen()
        self.discriminator = _Disc()


def main(outdir):
    g = torch.Generator().manual_seed(1234)
    base = torch.randn(2, 3, 5, generator=g) * 3
    values = {
        "f32": base.clone(),
        # Values exactly representable in half, plus rounding cases.
        "f16": torch.cat([base.flatten(), torch.tensor([65504.0, 2.0 ** -24, -0.0, 1e-3])]
                         ).to(torch.float16),
        "bf16": (base * 100).to(torch.bfloat16),
        "f64": base.to(torch.float64) / 7,
        "i64": torch.tensor([[0, -1, 2 ** 40], [7, -(2 ** 33), 123456789]], dtype=torch.int64),
        "i32": torch.tensor([-2147483648, 0, 2147483647, 5], dtype=torch.int32),
        "u8": torch.arange(0, 256, 17, dtype=torch.uint8).reshape(4, 4)[:, :3].contiguous(),
        "scalar": torch.tensor(42, dtype=torch.int64),
    }
    _save_any(values, os.path.join(outdir, "safetensors_dtypes.safetensors"),
              {"format": "pt", "note": "written by ref_safetensors.py \u00e9"})
    expect = {k: v.to(torch.float32) for k, v in values.items()}
    expect["i64_raw"] = values["i64"]
    st.save(expect, os.path.join(outdir, "safetensors_expect.safetensors"))

    torch.manual_seed(5)
    model = _Model()
    bn = model.discriminator.bn0_0
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.num_batches_tracked.fill_(17)
    st.save(model.state_dict(), os.path.join(outdir, "safetensors_state.safetensors"),
            metadata={"iteration": 300, "framework": "pytorch"})
