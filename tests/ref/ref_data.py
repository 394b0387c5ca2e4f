"""Reference for duet's MATLAB bicubic imresize: a port of BasicSR's
`imresize` / `calculate_weights_indices` (basicsr/utils/matlab_functions.py,
itself a port of MATLAB's imresize with antialiasing), in float32 torch as
BasicSR computes it.

Writes data_imresize.safetensors:
  f_<case>_in  (C, H, W) float input in [0, 1]
  f_<case>_out (C, OH, OW) BasicSR imresize(in, scale)
  u_<case>_in  (C, H, W) uint8 values 0..255 (stored as float)
  u_<case>_out (C, OH, OW) round(clip(imresize(in, scale), 0, 255))
with metadata "<case>_scale" holding the scale as text ("0.25", ...)."""
import math
import os

import numpy as np
import torch

import st


def cubic(x):
    """Keys' cubic kernel, a = -0.5."""
    ax = torch.abs(x)
    ax2 = ax * ax
    ax3 = ax2 * ax
    inner = (1.5 * ax3 - 2.5 * ax2 + 1) * (ax <= 1).to(x.dtype)
    outer = (-0.5 * ax3 + 2.5 * ax2 - 4 * ax + 2) * ((ax > 1) & (ax <= 2)).to(x.dtype)
    return inner + outer


def weights_indices(in_len, out_len, scale, kernel_width=4.0, antialiasing=True):
    """BasicSR's calculate_weights_indices: (weights (out, P), indices (out, P)
    into the symmetrically padded input, pad before, pad after)."""
    aa = scale < 1 and antialiasing
    if aa:
        kernel_width = kernel_width / scale
    x = torch.linspace(1, out_len, out_len)
    u = x / scale + 0.5 * (1 - 1 / scale)
    left = torch.floor(u - kernel_width / 2)
    p = math.ceil(kernel_width) + 2
    idx = left.view(out_len, 1) + torch.linspace(0, p - 1, p).view(1, p)
    dist = u.view(out_len, 1) - idx
    w = scale * cubic(dist * scale) if aa else cubic(dist)
    w = w / w.sum(1, keepdim=True)
    # BasicSR's trimming, with its narrow() lengths: a zero in the first
    # column keeps columns 1 .. p-2 (dropping the last as well), a zero in the
    # last keeps the first p-2. Both end columns are always all zero (the
    # support is narrower than p-1 taps), so the result is columns 1 .. p-2.
    zeros = (w == 0).sum(0)
    if zeros[0] != 0:
        idx, w = idx.narrow(1, 1, p - 2), w.narrow(1, 1, p - 2)
    if zeros[-1] != 0:
        idx, w = idx.narrow(1, 0, p - 2), w.narrow(1, 0, p - 2)
    pad_s = int(-idx.min() + 1)
    pad_e = int(idx.max() - in_len)
    idx = idx + pad_s - 1
    return w.contiguous(), idx.long().contiguous(), pad_s, pad_e


def sym_pad(img, dim, pad_s, pad_e):
    """Mirror pad_s/pad_e entries (edge repeated) on both ends of dim."""
    parts = []
    if pad_s > 0:
        parts.append(img.narrow(dim, 0, pad_s).flip(dim))
    parts.append(img)
    if pad_e > 0:
        n = img.shape[dim]
        parts.append(img.narrow(dim, n - pad_e, pad_e).flip(dim))
    return torch.cat(parts, dim)


def imresize(img, scale):
    """BasicSR imresize on a (C, H, W) float32 tensor: rows then columns."""
    c, h, w = img.shape
    oh, ow = math.ceil(h * scale), math.ceil(w * scale)
    wh, ih, hs, he = weights_indices(h, oh, scale)
    ww, iw, ws, we = weights_indices(w, ow, scale)
    aug = sym_pad(img, 1, hs, he)
    out1 = torch.empty(c, oh, w)
    kh = wh.shape[1]
    for i in range(oh):
        start = int(ih[i][0])
        out1[:, i, :] = torch.einsum("ckw,k->cw", aug[:, start:start + kh, :], wh[i])
    aug = sym_pad(out1, 2, ws, we)
    out2 = torch.empty(c, oh, ow)
    kw = ww.shape[1]
    for i in range(ow):
        start = int(iw[i][0])
        out2[:, :, i] = torch.einsum("chk,k->ch", aug[:, :, start:start + kw], ww[i])
    return out2


# (name, channels, height, width, scale): downscales by 4, 3, 2 with sizes
# that are and are not multiples of the factor, and two upscales.
CASES = [
    ("x4", 3, 32, 24, 0.25),
    ("x4odd", 3, 30, 21, 0.25),
    ("x3", 3, 27, 18, 1 / 3),
    ("x3odd", 3, 25, 20, 1 / 3),
    ("x2", 3, 16, 22, 0.5),
    ("x2odd", 1, 17, 13, 0.5),
    ("up2", 3, 7, 9, 2.0),
    ("up1_5", 2, 6, 5, 1.5),
]


def main(outdir):
    g = torch.Generator().manual_seed(1234)
    tensors = {}
    meta = {}
    for name, c, h, w, scale in CASES:
        x = torch.rand(c, h, w, generator=g)
        tensors[f"f_{name}_in"] = x
        tensors[f"f_{name}_out"] = imresize(x, scale)
        # A smooth-ish uint8 image (a gradient plus noise), as photos are.
        yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        base = (yy * 7 + xx * 5).float().unsqueeze(0).expand(c, h, w)
        noise = torch.randint(0, 60, (c, h, w), generator=g).float()
        u = torch.remainder(base + noise, 256.0)
        tensors[f"u_{name}_in"] = u
        out = imresize(u, scale).numpy()
        tensors[f"u_{name}_out"] = torch.from_numpy(np.clip(np.round(out), 0, 255))
        meta[f"{name}_scale"] = repr(scale)
    st.save(tensors, os.path.join(outdir, "data_imresize.safetensors"), meta)


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
