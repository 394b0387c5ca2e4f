"""The PyTorch side of bench/networks.c: MMEditing's MSRResNet generator and
ModifiedVGG discriminator, timed pass by pass on one thread.

Usage: networks_torch.py [--config tiny|full] [--batch N] [--reps R]
                         [--warmup W] [--only CASE]

Cases (the same in bench/networks.c):
  g_fwd       generator forward under no_grad (validation, inference)
  g_fwdbwd    generator forward + backward of mean(out) to its parameters
  d_fwdbwd    discriminator (train mode) forward + backward of the BCE loss
              against "real" to its parameters; the input needs no gradient
              (the discriminator step)
  d_fwdbwd_x  the same with the discriminator frozen and the gradient going
              to the input only (how the generator step goes through it)

Prints one JSON line per case: {"framework": "torch", "config", "case",
"batch", "cpu_ms", "wall_ms"}; cpu_ms is the median of this thread's CPU time
over the repetitions (less disturbed by other processes on the cores than the
wall clock), wall_ms the median wall time.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

# The shared MMEditing modules (tests/ref/mmedit_torch.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
from mmedit_torch import ModifiedVGG, MSRResNet  # noqa: E402

# The sizes of configs/srgan_x4_tiny.cfg and configs/srgan_x4c64b16_div2k.cfg
# (and of bench/train_torch.py): lq is the generator's input side, the
# discriminator sees gt = 4 * lq.
CONFIGS = {
    "tiny": dict(mid=32, blocks=4, dmid=16, lq=16, batch=8),
    "full": dict(mid=64, blocks=16, dmid=64, lq=32, batch=16),
}
CASES = ["g_fwd", "g_fwdbwd", "d_fwdbwd", "d_fwdbwd_x"]


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def time_case(fn, reps, warmup, before=None):
    cpu, wall = [], []
    for i in range(warmup + reps):
        if before is not None:
            before()
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        c1, w1 = time.thread_time(), time.perf_counter()
        if i >= warmup:
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
    return 1e3 * median(cpu), 1e3 * median(wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=0, help="0: the config's batch")
    ap.add_argument("--reps", type=int, default=0, help="0: 20 tiny, 5 full")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="", help="one case name")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = CONFIGS[args.config]
    batch = args.batch or cfg["batch"]
    reps = args.reps or (20 if args.config == "tiny" else 5)
    gt = 4 * cfg["lq"]

    # PyTorch's default init, MMEditing's in-place activations.
    g = MSRResNet(3, 3, cfg["mid"], cfg["blocks"], 4, mmedit_init=False).train()
    d = ModifiedVGG(3, cfg["dmid"], gt).train()
    lq = torch.rand(batch, 3, cfg["lq"], cfg["lq"])
    img = torch.rand(batch, 3, gt, gt)
    real = torch.ones(batch, 1)

    def g_fwd():
        with torch.no_grad():
            g(lq)

    def g_fwdbwd():
        g(lq).mean().backward()

    def d_fwdbwd():
        F.binary_cross_entropy_with_logits(d(img), real).backward()

    img_x = img.clone().requires_grad_(True)

    def d_fwdbwd_x():
        F.binary_cross_entropy_with_logits(d(img_x), real).backward()

    def zero_g():
        g.zero_grad(set_to_none=True)

    def zero_d():
        d.zero_grad(set_to_none=True)
        for p in d.parameters():
            p.requires_grad_(True)

    def freeze_d():
        img_x.grad = None
        for p in d.parameters():
            p.requires_grad_(False)

    table = {
        "g_fwd": (g_fwd, None),
        "g_fwdbwd": (g_fwdbwd, zero_g),
        "d_fwdbwd": (d_fwdbwd, zero_d),
        "d_fwdbwd_x": (d_fwdbwd_x, freeze_d),
    }
    for case in CASES:
        if args.only and case != args.only:
            continue
        fn, before = table[case]
        cpu_ms, wall_ms = time_case(fn, reps, args.warmup, before)
        print(json.dumps({"framework": "torch", "config": args.config, "case": case,
                          "batch": batch, "cpu_ms": round(cpu_ms, 3),
                          "wall_ms": round(wall_ms, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
