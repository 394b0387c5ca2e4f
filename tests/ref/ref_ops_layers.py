"""PyTorch references for the layer ops, read by tests/unit/test_ref_ops_layers.c.

ops_layers.safetensors holds, per case, the inputs (float32), the upstream
gradient r of the output (the C test backpropagates L = sum(out * r)), and
PyTorch's output and gradients, computed in float64 from the float32 inputs:

conv3.*    conv2d 3x3 stride 1 padding 1 with bias
conv4.*    conv2d 4x4 stride 2 padding 1 with bias
conv4nb.*  conv2d 4x4 stride 2 padding 1 without bias, odd input size
lin.*      linear with bias
bntrain.*  batch_norm training mode: output, gradients, and the running
           statistics and num_batches_tracked after the update
bneval.*   batch_norm eval mode with given running statistics
pool.*     max_pool2d 2x2 stride 2
"""
import os

import torch
import torch.nn.functional as F

import st


def _leaf(t):
    return t.detach().to(torch.float64).requires_grad_(True)


def _grads(out, r, *inputs):
    (out * r.to(torch.float64)).sum().backward()
    return [i.grad for i in inputs]


def _conv(d, name, g, n, c, h, o, k, s, p, bias):
    x = torch.randn(n, c, h, h, generator=g)
    w = torch.randn(o, c, k, k, generator=g) * 0.3
    b = torch.randn(o, generator=g) if bias else None
    xl, wl = _leaf(x), _leaf(w)
    bl = _leaf(b) if bias else None
    y = F.conv2d(xl, wl, bl, stride=s, padding=p)
    r = torch.randn(y.shape, generator=g)
    grads = _grads(y, r, *([xl, wl, bl] if bias else [xl, wl]))
    d.update({f"{name}.x": x, f"{name}.w": w, f"{name}.r": r, f"{name}.y": y,
              f"{name}.dx": grads[0], f"{name}.dw": grads[1]})
    if bias:
        d.update({f"{name}.b": b, f"{name}.db": grads[2]})


def main(outdir):
    g = torch.Generator().manual_seed(20261202)
    d = {}
    _conv(d, "conv3", g, 2, 3, 8, 4, 3, 1, 1, True)
    _conv(d, "conv4", g, 2, 4, 10, 5, 4, 2, 1, True)
    _conv(d, "conv4nb", g, 2, 3, 9, 4, 4, 2, 1, False)

    x = torch.randn(3, 7, generator=g)
    w = torch.randn(5, 7, generator=g)
    b = torch.randn(5, generator=g)
    xl, wl, bl = _leaf(x), _leaf(w), _leaf(b)
    y = F.linear(xl, wl, bl)
    r = torch.randn(y.shape, generator=g)
    dx, dw, db = _grads(y, r, xl, wl, bl)
    d.update({"lin.x": x, "lin.w": w, "lin.b": b, "lin.r": r, "lin.y": y,
              "lin.dx": dx, "lin.dw": dw, "lin.db": db})

    for mode in ("train", "eval"):
        name = "bn" + mode
        x = torch.randn(4, 3, 5, 5, generator=g) * 2.0 + 1.5
        w = torch.rand(3, generator=g) + 0.5
        b = torch.randn(3, generator=g)
        rm = torch.randn(3, generator=g) * 0.5
        rv = torch.rand(3, generator=g) + 0.5
        bn = torch.nn.BatchNorm2d(3, eps=1e-5, momentum=0.1).to(torch.float64)
        with torch.no_grad():
            bn.weight.copy_(w)
            bn.bias.copy_(b)
            bn.running_mean.copy_(rm)
            bn.running_var.copy_(rv)
            bn.num_batches_tracked.fill_(5)
        bn.train(mode == "train")
        xl = _leaf(x)
        y = bn(xl)
        r = torch.randn(y.shape, generator=g)
        dx, dw, db = _grads(y, r, xl, bn.weight, bn.bias)
        d.update({f"{name}.x": x, f"{name}.w": w, f"{name}.b": b, f"{name}.rm": rm,
                  f"{name}.rv": rv, f"{name}.r": r, f"{name}.y": y, f"{name}.dx": dx,
                  f"{name}.dw": dw, f"{name}.db": db,
                  f"{name}.rm_after": bn.running_mean, f"{name}.rv_after": bn.running_var,
                  f"{name}.nb_after": bn.num_batches_tracked.clone()})

    x = torch.randn(2, 3, 8, 8, generator=g)
    xl = _leaf(x)
    y = F.max_pool2d(xl, 2, 2)
    r = torch.randn(y.shape, generator=g)
    (dx,) = _grads(y, r, xl)
    d.update({"pool.x": x, "pool.r": r, "pool.y": y, "pool.dx": dx})

    st.save(d, os.path.join(outdir, "ops_layers.safetensors"))
