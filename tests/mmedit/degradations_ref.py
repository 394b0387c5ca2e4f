"""Reference file for tests/mmedit/test_ref_degradations.c: MMEditing
0.16.1's own Real-ESRGAN degradation steps (RandomBlur and the kernels of
blur_kernels.py, UnsharpMasking, RandomNoise's Gaussian and Poisson noise,
RandomJPEGCompression, Quantize) on one synthetic image, with the random
draws each step made recorded beside its output (the kernel functions and
np.random.randn / np.random.poisson are wrapped to see the values they were
called with and returned), so that duet's functions can be run on the same
input with the same draws.

Usage (in the venv of scripts/make-mmedit-venv.sh):
  degradations_ref.py OUTDIR   -> OUTDIR/degradations.safetensors
"""
import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "ref"))

import mmedit_oracle as mo  # noqa: E402,F401  (the mmcv.ops stubs first)
import st  # noqa: E402
from mmedit.datasets.pipelines import blur_kernels  # noqa: E402
from mmedit.datasets.pipelines.augmentation import Quantize, UnsharpMasking  # noqa: E402
from mmedit.datasets.pipelines.random_degradations import (  # noqa: E402
    RandomBlur, RandomJPEGCompression, RandomNoise, RandomResize)

H, W = 64, 72


def image(seed):
    """An (H, W, 3) float32 image in [0, 1]: smooth waves, edges and noise."""
    g = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    img = np.stack([0.5 + 0.3 * np.sin(x / (4 + c) + y / (7 - c)) for c in range(3)], -1)
    img[(x > 20) & (x < 40) & (y > 10)] += 0.15
    img += 0.05 * g.standard_normal(img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.float64)))


def record(module, name, log):
    """Wraps module.name so that each call's arguments and result go to log."""
    orig = getattr(module, name)

    def wrapped(*a, **k):
        r = orig(*a, **k)
        log.append((a, k, r))
        return r
    setattr(module, name, wrapped)
    return orig


RESIZE_KINDS = ["bilinear", "bicubic", "area"]  # duet__resize_kind's order
RESIZE_CASES = [("bilinear", (29, 41)), ("bilinear", (90, 101)), ("bilinear", (32, 36)),
                ("bicubic", (29, 41)), ("bicubic", (90, 101)), ("area", (29, 41)),
                ("area", (32, 36)), ("area", (16, 24)), ("area", (90, 101)),
                ("area", (70, 50))]

BLUR_CASES = [  # kind, kernel size, sigma_x, sigma_y, angle, beta_gaussian, beta_plateau, omega
    ("iso", 7, 1.3, 1.3, 0.0, 1.0, 1.0, 1.0),
    ("aniso", 13, 2.1, 0.7, 0.9, 1.0, 1.0, 1.0),
    ("generalized_iso", 9, 1.1, 1.1, 0.0, 3.2, 1.5, 1.0),
    ("generalized_aniso", 21, 2.8, 1.2, -2.3, 0.6, 1.5, 1.0),
    ("plateau_iso", 11, 1.7, 1.7, 0.0, 1.0, 1.8, 1.0),
    ("plateau_aniso", 15, 0.4, 2.5, 1.4, 1.0, 1.2, 1.0),
    ("sinc", 17, 1.0, 1.0, 0.0, 1.0, 1.0, 1.7),
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    d = {}
    img = image(20261250)
    d["image"] = t(img)

    # RandomBlur, each kernel type, every draw fixed by its range but the
    # generalized and plateau kernels' second beta draw, which is recorded.
    np.random.seed(1)
    for i, (kind, k, sx, sy, th, bg, bp, om) in enumerate(BLUR_CASES):
        calls = []
        fns = ["bivariate_gaussian", "bivariate_generalized_gaussian", "bivariate_plateau",
               "random_circular_lowpass_kernel"]
        origs = {f: record(blur_kernels, f, calls) for f in fns}
        try:
            step = RandomBlur(dict(kernel_size=[k], kernel_list=[kind], kernel_prob=[1],
                                   sigma_x=[sx, sx], sigma_y=[sy, sy], rotate_angle=[th, th],
                                   beta_gaussian=[bg, bg], beta_plateau=[bp, bp],
                                   omega=[om, om]), keys=["lq"])
            res = step(dict(lq=img.copy()))
        finally:
            for f, o in origs.items():
                setattr(blur_kernels, f, o)
        assert len(calls) == 1, calls
        a, kw, kernel = calls[0]
        # The values the kernel was made with: (kernel_size, sig_x, sig_y,
        # theta[, beta]) positionally, or sinc's (omega_range, kernel_size)
        # with omega = uniform(om, om) = om.
        if kind == "sinc":
            final = [k, 1.0, 1.0, 0.0, 1.0, om]
        else:
            beta = a[4] if len(a) > 4 else 1.0
            final = [k, a[1], a[2], a[3], beta, om]
        d[f"blur{i}.params"] = t(final)
        d[f"blur{i}.kernel"] = t(kernel)
        d[f"blur{i}.out"] = t(res["lq"])

    # UnsharpMasking as the Real-ESRGAN configs' (51, sigma 0, weight 0.5,
    # threshold 10), and a small kernel (OpenCV's fixed 7-tap table).
    for i, (k, s, w, th) in enumerate([(51, 0, 0.5, 10), (7, 0, 0.8, 5)]):
        res = UnsharpMasking(kernel_size=k, sigma=s, weight=w, threshold=th,
                             keys=["gt"])(dict(gt=img.copy()))
        d[f"unsharp{i}.params"] = t([k, s, w, th])
        d[f"unsharp{i}.out"] = t(res["gt_unsharp"])

    # RandomNoise: Gaussian and Poisson, colour and gray; the draws recorded.
    for i, (kind, gray) in enumerate([("gaussian", 0.0), ("gaussian", 1.0), ("poisson", 0.0),
                                      ("poisson", 1.0)]):
        calls = []
        orig = record(np.random, "randn" if kind == "gaussian" else "poisson", calls)
        uni = []
        orig_u = record(np.random, "uniform", uni)
        try:
            np.random.seed(10 + i)
            step = RandomNoise(dict(noise_type=[kind], noise_prob=[1], gaussian_sigma=[1, 30],
                                    gaussian_gray_noise_prob=gray, poisson_scale=[0.05, 3],
                                    poisson_gray_noise_prob=gray), keys=["lq"])
            res = step(dict(lq=img.copy()))
        finally:
            setattr(np.random, "randn" if kind == "gaussian" else "poisson", orig)
            setattr(np.random, "uniform", orig_u)
        # uniform draws: the prob check, then sigma (or scale), then gray
        level = uni[1][2]
        d[f"noise{i}.params"] = t([level / 255.0 if kind == "gaussian" else level, gray])
        d[f"noise{i}.draws"] = t(calls[0][2])
        d[f"noise{i}.out"] = t(res["lq"])

    # RandomResize at fixed target sizes (down by a non-integer factor, up,
    # 2x down: OpenCV's switch to area, integer area blocks), and one drawn
    # scale ('up' only) whose draw is recorded.
    for i, (opt, size) in enumerate(RESIZE_CASES):
        res = RandomResize(dict(resize_opt=[opt], resize_prob=[1], target_size=size),
                           keys=["lq"])(dict(lq=img.copy()))
        d[f"resize{i}.params"] = t([RESIZE_KINDS.index(opt), size[0], size[1]])
        d[f"resize{i}.out"] = t(res["lq"])
    uni = []
    orig_u = record(np.random, "uniform", uni)
    try:
        np.random.seed(5)
        res = RandomResize(dict(resize_opt=["bicubic"], resize_prob=[1],
                                resize_mode_prob=[1, 0, 0], resize_scale=[0.15, 1.5]),
                           keys=["lq"])(dict(lq=img.copy()))
    finally:
        setattr(np.random, "uniform", orig_u)
    d["resize_drawn.scale"] = t([uni[1][2]])
    d["resize_drawn.out"] = t(res["lq"])

    # RandomJPEGCompression at fixed qualities.
    for i, q in enumerate([30, 75, 95]):
        res = RandomJPEGCompression(dict(quality=[q, q]), keys=["lq"])(dict(lq=img.copy()))
        d[f"jpeg{i}.quality"] = t([q])
        d[f"jpeg{i}.out"] = t(res["lq"])

    # Quantize on values beyond [0, 1].
    wide = (img * 1.3 - 0.15).astype(np.float32)
    d["quantize.in"] = t(wide)
    d["quantize.out"] = t(Quantize(keys=["lq"])(dict(lq=wide))["lq"])

    st.save(d, os.path.join(out, "degradations.safetensors"),
            metadata={"oracle": "mmedit 0.16.1 random_degradations.py, UnsharpMasking, Quantize"})
    print(f"degradations_ref: {len(d)} entries in {out}/degradations.safetensors")


if __name__ == "__main__":
    main()
