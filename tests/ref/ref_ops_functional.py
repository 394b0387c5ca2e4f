"""PyTorch references for the functional ops (element-wise, activations,
resampling, shape, reductions, losses): ops_functional.safetensors, read by
tests/unit/test_ref_ops_functional.c.

For every case NAME: NAME.in0, NAME.in1, ... the inputs; NAME.out the output;
NAME.r a fixed random upstream gradient of the output's shape; NAME.grad<i>
d sum(out * r) / d in<i> for each differentiable input (its presence tells the
C test to set requires_grad). Scalars (loss weight, slope, factor) are fixed
in both files by case name."""
import os

import torch
import torch.nn.functional as F

import st


def case(out, name, fn, inputs, grad_mask, gen):
    """Runs fn(*inputs) with requires_grad per grad_mask and stores
    inputs, output, upstream and input gradients under `name`."""
    xs = [x.clone().requires_grad_(g) for x, g in zip(inputs, grad_mask)]
    y = fn(*xs)
    if y.dim() == 0:
        y = y.reshape(1)
    r = torch.randn(y.shape, generator=gen)
    (y * r).sum().backward()
    for i, x in enumerate(xs):
        out[f"{name}.in{i}"] = x.detach()
        if grad_mask[i]:
            out[f"{name}.grad{i}"] = x.grad
    out[f"{name}.out"] = y.detach()
    out[f"{name}.r"] = r


def away_from_zero(x, margin=0.05):
    """Pushes values off the kink of relu / leaky_relu / |.|."""
    return torch.where(x >= 0, x + margin, x - margin)


def mmedit_flow_warp(x, flow, padding_mode="zeros"):
    """MMEditing 0.16.1's flow_warp (mmedit/models/common/flow_warp.py),
    copied: flow (n, h, w, 2) in pixels, bilinear, align_corners=True."""
    _, _, h, w = x.size()
    grid_y, grid_x = torch.meshgrid(torch.arange(0, h, dtype=x.dtype),
                                    torch.arange(0, w, dtype=x.dtype), indexing="ij")
    grid = torch.stack((grid_x, grid_y), 2)
    grid_flow = grid + flow
    grid_flow_x = 2.0 * grid_flow[:, :, :, 0] / max(w - 1, 1) - 1.0
    grid_flow_y = 2.0 * grid_flow[:, :, :, 1] / max(h - 1, 1) - 1.0
    grid_flow = torch.stack((grid_flow_x, grid_flow_y), dim=3)
    return F.grid_sample(x, grid_flow, mode="bilinear", padding_mode=padding_mode,
                         align_corners=True)


def main(outdir):
    gen = torch.Generator().manual_seed(20261202)

    def randn(*shape, scale=1.0):
        return torch.randn(shape, generator=gen) * scale

    def rand(*shape):
        return torch.rand(shape, generator=gen)

    out = {}
    x4 = (2, 3, 4, 5)

    # activations
    case(out, "relu", F.relu, [away_from_zero(randn(*x4))], [True], gen)
    case(out, "leaky_relu", lambda x: F.leaky_relu(x, 0.2),
         [away_from_zero(randn(*x4))], [True], gen)
    case(out, "sigmoid", torch.sigmoid, [randn(*x4, scale=4.0)], [True], gen)
    case(out, "tanh", torch.tanh, [randn(*x4, scale=2.0)], [True], gen)
    case(out, "elu", F.elu, [away_from_zero(randn(*x4, scale=2.0))], [True], gen)
    case(out, "elu_a03", lambda x: F.elu(x, 0.3), [away_from_zero(randn(*x4))], [True], gen)

    # element-wise
    case(out, "add", torch.add, [randn(*x4), randn(*x4)], [True, True], gen)
    case(out, "sub", torch.sub, [randn(*x4), randn(*x4)], [True, True], gen)
    case(out, "mul", torch.mul, [randn(*x4), randn(*x4)], [True, True], gen)
    case(out, "scale", lambda x: x * -1.7, [randn(*x4)], [True], gen)
    mean = torch.tensor([0.485, 0.456, 0.406])
    std = torch.tensor([0.229, 0.224, 0.225])
    case(out, "channel_affine",
         lambda x: x * (1.0 / std).view(1, 3, 1, 1) + (-mean / std).view(1, 3, 1, 1),
         [rand(*x4)], [True], gen)
    out["channel_affine.scale"] = 1.0 / std
    out["channel_affine.shift"] = -mean / std

    # resampling: small odd sizes, so that both edges clamp
    case(out, "pixel_shuffle_r2", lambda x: F.pixel_shuffle(x, 2), [randn(2, 8, 3, 5)], [True],
         gen)
    case(out, "pixel_shuffle_r3", lambda x: F.pixel_shuffle(x, 3), [randn(1, 18, 3, 4)], [True],
         gen)
    for f, shape in ((2, (2, 3, 5, 7)), (3, (1, 2, 3, 5)), (4, (1, 3, 5, 3)), (3, (1, 1, 1, 4)),
                     (3, (1, 2, 33, 47))):
        name = f"bilinear_x{f}_{shape[2]}x{shape[3]}"
        case(out, name,
             lambda x, f=f: F.interpolate(x, scale_factor=f, mode="bilinear",
                                          align_corners=False),
             [randn(*shape)], [True], gen)

    # video: SPyNet's pyramid and the flow warp of BasicVSR (flow (n, 2, h, w),
    # displacements up to a few pixels, so that samples leave the image)
    case(out, "avg_pool_k2s2", lambda x: F.avg_pool2d(x, 2, 2), [randn(2, 3, 6, 8)], [True], gen)
    case(out, "avg_pool_k3s2", lambda x: F.avg_pool2d(x, 3, 2), [randn(1, 2, 7, 9)], [True], gen)
    for mode in ("zeros", "border"):
        case(out, f"flow_warp_{mode}",
             lambda x, f, mode=mode: mmedit_flow_warp(x, f.permute(0, 2, 3, 1), mode),
             [randn(2, 3, 5, 7), randn(2, 2, 5, 7, scale=1.5)], [True, True], gen)

    # shape
    case(out, "flatten", lambda x: torch.flatten(x, 1), [randn(*x4)], [True], gen)
    case(out, "reshape", lambda x: x.reshape(6, 20), [randn(*x4)], [True], gen)
    case(out, "concat", lambda a, b, c: torch.cat([a, b, c], dim=1),
         [randn(2, 1, 3, 4), randn(2, 3, 3, 4), randn(2, 2, 3, 4)], [True, False, True], gen)

    # reductions
    case(out, "sum", torch.sum, [randn(*x4)], [True], gen)
    case(out, "mean", torch.mean, [randn(*x4)], [True], gen)

    # losses (weights fixed here and in the C test)
    p = randn(*x4)
    case(out, "l1", lambda a, b: F.l1_loss(a, b) * 0.5, [p, p + away_from_zero(randn(*x4))],
         [True, True], gen)
    case(out, "mse", lambda a, b: F.mse_loss(a, b) * 2.0, [randn(*x4), randn(*x4)],
         [True, True], gen)
    logits = randn(*x4, scale=5.0)
    logits.view(-1)[:8] = torch.tensor([50.0, -50.0, 50.0, -50.0, 49.0, -49.5, 30.0, -30.0])
    case(out, "bce", lambda a, b: F.binary_cross_entropy_with_logits(a, b) * 0.7,
         [logits, rand(*x4)], [True, False], gen)
    big = torch.tensor([50.0, -50.0, 50.0, -50.0, 0.5, -2.0]).view(2, 3)
    case(out, "bce_big", lambda a, b: F.binary_cross_entropy_with_logits(a, b),
         [big, torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]).view(2, 3)], [True, False], gen)
    for tv in (1.0, 0.0):
        name = f"bce_const_{int(tv)}"
        case(out, name,
             lambda a, tv=tv: F.binary_cross_entropy_with_logits(a, torch.full_like(a, tv)) * 1.3,
             [logits], [True], gen)

    st.save(out, os.path.join(outdir, "ops_functional.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
