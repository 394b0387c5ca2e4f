"""PyTorch reference for spectral normalisation (torch.nn.utils.spectral_norm
on a Conv2d, as mmcv's ConvModule(with_spectral_norm=True) applies it in
DeepFillv2's SN-PatchGAN): spectral_norm.safetensors.

A Conv2d(3, 4, 5, stride 2, padding 2) under spectral_norm: its initial
bias, weight_orig, weight_u, weight_v (init.*), an input x and upstream
gradients r1, r2, r3. Steps 1 and 2 in training mode (each forward runs one
power iteration, updating u and v): stepK.out, stepK.weight_u,
stepK.weight_v, and the gradients of sum(out * rK) with respect to
weight_orig, bias and x (stepK.grad.*), gradients zeroed between the steps
and the weights left unchanged (no optimizer: the test is of the op). Step 3
in eval mode (no update): step3.out, its gradients, u and v unchanged."""
import os

import torch
import torch.nn as nn

import st


def main(outdir):
    g = torch.Generator().manual_seed(23)
    torch.manual_seed(23)
    conv = nn.utils.spectral_norm(nn.Conv2d(3, 4, 5, stride=2, padding=2), eps=1e-12)
    d = {}
    with torch.no_grad():
        conv.weight_orig.copy_(torch.randn(conv.weight_orig.shape, generator=g) * 0.3)
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) * 0.1)
    for k in ("bias", "weight_orig", "weight_u", "weight_v"):
        d[f"init.{k}"] = getattr(conv, k).detach().clone()
    x0 = torch.randn(2, 3, 9, 8, generator=g)
    d["x"] = x0
    for step, training in ((1, True), (2, True), (3, False)):
        conv.train(training)
        x = x0.clone().requires_grad_(True)
        y = conv(x)
        r = torch.randn(y.shape, generator=g)
        conv.zero_grad()
        (y * r).sum().backward()
        d[f"r{step}"] = r
        d[f"step{step}.out"] = y.detach()
        d[f"step{step}.weight_u"] = conv.weight_u.detach().clone()
        d[f"step{step}.weight_v"] = conv.weight_v.detach().clone()
        d[f"step{step}.grad.weight_orig"] = conv.weight_orig.grad.clone()
        d[f"step{step}.grad.bias"] = conv.bias.grad.clone()
        d[f"step{step}.grad.x"] = x.grad.clone()
    st.save(d, os.path.join(outdir, "spectral_norm.safetensors"))
