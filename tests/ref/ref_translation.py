"""Reference for GenerationPairedDataset's pipeline (src/data/translation.c):
MMEditing 0.x's LoadPairedImageFromFile, Resize (mmcv.imresize with
interpolation='bicubic', i.e. cv2.resize INTER_CUBIC), FixedCrop at a given
crop_pos, Flip with flip_ratio 1 (always), RescaleToZeroOne, Normalize with
to_rgb and ImageToTensor, written in numpy from those classes and from
OpenCV's resize code (there is no cv2 here): interpolateCubic's float32
weights with A = -0.75, rounded to 11-bit integers (cvRound), edge pixels
repeated, integer sums shifted back by 22 bits (FixedPtCast).

Writes translation_pipeline.safetensors:
  <case>_pair  (H, 2W, 3) the RGB bytes of the A|B file (stored as float)
  <case>_a, <case>_b (3, h, w) the pipeline's img_a / img_b
The steps of each case are in CASES and in tests/unit/test_ref_translation.c."""
import os

import numpy as np
import torch

import st

# (name, pair height, half width, resize (w, h), crop (h, w), crop_pos (x, y), flip direction)
CASES = [
    ("up", 30, 20, (27, 41), (24, 27), (0, 11), "horizontal"),    # every column
    ("down", 33, 29, (13, 17), (17, 10), (3, 0), "vertical"),      # every row
]
MEAN = [0.5, 0.4, 0.3]
STD = [0.5, 0.25, 0.2]


def cubic_weights(x):
    a = np.float32(-0.75)
    one = np.float32(1)
    x = np.float32(x)
    c0 = ((a * (x + one) - np.float32(5) * a) * (x + one) + np.float32(8) * a) * (x + one) - np.float32(4) * a
    c1 = ((a + np.float32(2)) * x - (a + np.float32(3))) * x * x + one
    c2 = ((a + np.float32(2)) * (one - x) - (a + np.float32(3))) * (one - x) * (one - x) + one
    c3 = one - c0 - c1 - c2
    return np.array([c0, c1, c2, c3], np.float32)


def taps(n_in, n_out):
    """(first source index, int weights (n_out, 4)) as cv::resize computes them."""
    scale = 1.0 / (n_out / n_in)
    first = np.zeros(n_out, np.int64)
    w = np.zeros((n_out, 4), np.int64)
    for d in range(n_out):
        f = np.float32((d + 0.5) * scale - 0.5)
        fl = np.floor(f)
        first[d] = int(fl) - 1
        w[d] = np.rint(cubic_weights(f - fl) * np.float32(2048)).astype(np.int64)
    return first, w


def cv_resize_cubic(img, ow, oh):
    h, w, _ = img.shape
    xf, xw = taps(w, ow)
    yf, yw = taps(h, oh)
    xi = np.clip(xf[:, None] + np.arange(4)[None, :], 0, w - 1)  # (ow, 4)
    yi = np.clip(yf[:, None] + np.arange(4)[None, :], 0, h - 1)  # (oh, 4)
    src = img.astype(np.int64)
    rows = (src[:, xi, :] * xw[None, :, :, None]).sum(axis=2)    # (h, ow, c)
    v = (rows[yi, :, :] * yw[:, :, None, None]).sum(axis=1)      # (oh, ow, c)
    q = (v + (1 << 21)) >> 22
    return np.clip(q, 0, 255).astype(np.uint8)


def pipeline(pair_rgb, resize, crop, pos, direction):
    img = pair_rgb[:, :, ::-1]                      # mmcv.imfrombytes: BGR
    half = img.shape[1] // 2
    out = []
    for part in (img[:, :half], img[:, half:]):     # LoadPairedImageFromFile
        part = cv_resize_cubic(np.ascontiguousarray(part), *resize)   # Resize
        ch, cw = crop
        x, y = pos
        part = part[y:y + ch, x:x + cw]             # FixedCrop(crop_pos)
        part = part[:, ::-1] if direction == "horizontal" else part[::-1]  # Flip
        f = part.astype(np.float32) / 255.          # RescaleToZeroOne
        f = f[:, :, ::-1]                           # Normalize: to_rgb
        mean = np.float32(MEAN)                     # cv2.subtract: in float32
        stdinv = 1 / np.float64(np.float32(STD))    # cv2.multiply: in float64
        f = ((f - mean).astype(np.float64) * stdinv).astype(np.float32)
        out.append(torch.from_numpy(np.ascontiguousarray(f.transpose(2, 0, 1))))
    return out


def cases():
    """Each case of CASES with its A|B pair image (H, 2W, 3) RGB bytes, as
    (name, h, w, pair, resize, crop, pos, direction); gen_mmedit_refs.py
    runs MMEditing's own pipeline on the same."""
    rng = np.random.default_rng(99)
    for name, h, w, resize, crop, pos, direction in CASES:
        yy, xx = np.mgrid[0:h, 0:2 * w]
        base = (yy * 9 + xx * 4)[:, :, None] + np.array([0, 70, 140])[None, None, :]
        pair = np.remainder(base + rng.integers(0, 50, (h, 2 * w, 3)), 256)
        pair[h // 3:h // 2, :] = 255                # hard edges: overshoot is clamped
        pair[h // 2:h // 2 + 3, ::3] = 0
        yield name, h, w, pair.astype(np.uint8), resize, crop, pos, direction


def main(outdir):
    tensors = {}
    for name, h, w, pair, resize, crop, pos, direction in cases():
        a, b = pipeline(pair, resize, crop, pos, direction)
        tensors[f"{name}_pair"] = torch.from_numpy(pair.astype(np.float32))
        tensors[f"{name}_a"] = a
        tensors[f"{name}_b"] = b
    st.save(tensors, os.path.join(outdir, "translation_pipeline.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
