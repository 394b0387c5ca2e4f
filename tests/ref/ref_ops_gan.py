"""PyTorch references for the image-to-image GAN ops (conv_transpose2d,
instance_norm2d, reflection_pad2d, dropout): ops_gan.safetensors.

Same layout as ref_ops_functional.py: for every case NAME, NAME.in<i> the inputs, NAME.out
the output, NAME.r a random upstream gradient, NAME.grad<i> d sum(out * r) /
d in<i> for each differentiable input. The op's constants (stride, padding,
eps, p, rng seed) are fixed by case name here and in
tests/unit/test_ref_ops_gan.c. Dropout masks come from duet's RNG replayed
in Python (duet_rng.py), so the reference is F.dropout's formula x * mask /
(1 - p) on the very mask duet draws."""
import os

import torch
import torch.nn.functional as F

import st
from duet_rng import DuetRng


def case(out, name, fn, inputs, grad_mask, gen):
    xs = [x.clone().requires_grad_(g) for x, g in zip(inputs, grad_mask)]
    y = fn(*xs)
    r = torch.randn(y.shape, generator=gen)
    (y * r).sum().backward()
    for i, x in enumerate(xs):
        out[f"{name}.in{i}"] = x.detach()
        if grad_mask[i]:
            out[f"{name}.grad{i}"] = x.grad
    out[f"{name}.out"] = y.detach()
    out[f"{name}.r"] = r


# name -> (x shape, C_out, (KH, KW), stride, padding, output_padding, bias)
TCONV = {
    "tconv_unet": ((2, 3, 4, 5), 4, (4, 4), 2, 1, 0, True),      # UnetSkipConnectionBlock up
    "tconv_resnet": ((2, 4, 3, 4), 2, (3, 3), 2, 1, 1, True),    # ResnetGenerator upsampling
    "tconv_s1_nobias": ((1, 2, 5, 3), 3, (3, 2), 1, 0, 0, False),
    "tconv_s3_p2_op2": ((1, 2, 3, 4), 3, (5, 5), 3, 2, 2, True),
}

# name -> (left, right, top, bottom, x shape)
PAD = {
    "pad_3": ((3, 3, 3, 3), (2, 2, 5, 6)),
    "pad_asym": ((1, 2, 0, 3), (1, 3, 4, 5)),
}

# name -> (p, seed, stream, counter, shape)
DROPOUT = {
    "dropout_p05": (0.5, 7, 0, 0, (2, 3, 4, 5)),
    "dropout_p02": (0.2, 11, 3, 100, (1, 2, 3, 7)),
}


def main(outdir):
    gen = torch.Generator().manual_seed(20261203)

    def randn(*shape, scale=1.0):
        return torch.randn(shape, generator=gen) * scale

    out = {}
    for name, (xs, co, (kh, kw), s, p, op, bias) in TCONV.items():
        ins = [randn(*xs), randn(xs[1], co, kh, kw, scale=0.3)]
        if bias:
            ins.append(randn(co))
        case(out, name,
             lambda *a, s=s, p=p, op=op: F.conv_transpose2d(*a, stride=s, padding=p,
                                                            output_padding=op),
             ins, [True] * len(ins), gen)

    # instance norm: shifted, scaled planes so the statistics matter
    x = randn(2, 3, 4, 5, scale=2.0) + 0.5
    case(out, "inorm_affine",
         lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-5),
         [x, randn(3) + 1.0, randn(3)], [True, True, True], gen)
    case(out, "inorm_plain", lambda x: F.instance_norm(x, eps=1e-5),
         [randn(2, 4, 3, 3, scale=3.0) - 1.0], [True], gen)
    case(out, "inorm_eps", lambda x: F.instance_norm(x, eps=1e-1), [randn(1, 2, 2, 3) * 0.1],
         [True], gen)

    for name, (pad, xs) in PAD.items():
        case(out, name, lambda x, pad=pad: F.pad(x, pad, mode="reflect"), [randn(*xs)], [True],
             gen)

    for name, (p, seed, stream, counter, xs) in DROPOUT.items():
        # The kept value is what F.dropout itself gives a kept element.
        kept = F.dropout(torch.ones(4096), p, training=True)
        assert torch.all((kept == 0) | (kept == 1.0 / (1.0 - p))), name
        factor = DuetRng(seed, stream, counter).dropout_factor(xs, p)
        case(out, name, lambda x, factor=factor: x * factor, [randn(*xs)], [True], gen)
        out[f"{name}.factor"] = factor

    st.save(out, os.path.join(outdir, "ops_gan.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
