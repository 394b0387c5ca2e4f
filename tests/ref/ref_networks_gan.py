"""PyTorch references for the image-to-image GAN networks
(networks_gan.safetensors): UnetGenerator, PatchDiscriminator and
ResnetGenerator from tests/ref/mmedit_gan_torch.py, in training mode.

For every case NAME: NAME.sd.<key> the state dict before the forward
(generation_init_weights with gain 0.02, torch's RNG), NAME.nparams the
parameter count, NAME.x the input, NAME.out the output, NAME.r a random
upstream gradient, NAME.grad.x and NAME.grad.<param> the gradients of
sum(out * r), NAME.after.<buffer> the BatchNorm buffers after the forward.
The forward and backward run in float64. Dropout masks come from duet's RNG
with seed 1234, stream 0. The constructor arguments are fixed by case name here and in
tests/unit/test_ref_networks_gan.c."""
import os

import torch

import mmedit_gan_torch as mg
import st
from duet_rng import DuetRng

DROPOUT_SEED = 1234

# name -> (constructor, kwargs, input shape)
CASES = {
    "unet_bn_dropout": (mg.UnetGenerator, dict(in_channels=3, out_channels=3, num_down=6,
                                               base_channels=4, norm_cfg=dict(type='BN'),
                                               use_dropout=True), (2, 3, 64, 64)),
    "unet_in": (mg.UnetGenerator, dict(in_channels=2, out_channels=3, num_down=5,
                                       base_channels=4, norm_cfg=dict(type='IN')),
                (2, 2, 32, 32)),
    "patch_bn": (mg.PatchDiscriminator, dict(in_channels=6, base_channels=8, num_conv=3,
                                             norm_cfg=dict(type='BN')), (2, 6, 32, 32)),
    "patch_in": (mg.PatchDiscriminator, dict(in_channels=3, base_channels=4, num_conv=2,
                                             norm_cfg=dict(type='IN')), (1, 3, 24, 24)),
    "resnet_in_dropout": (mg.ResnetGenerator, dict(in_channels=3, out_channels=3,
                                                   base_channels=4, num_blocks=2,
                                                   norm_cfg=dict(type='IN'), use_dropout=True),
                          (2, 3, 16, 16)),
    "resnet_bn": (mg.ResnetGenerator, dict(in_channels=3, out_channels=2, base_channels=4,
                                           num_blocks=1, norm_cfg=dict(type='BN')),
                  (1, 3, 12, 12)),
}


def main(outdir):
    torch.manual_seed(20261204)
    gen = torch.Generator().manual_seed(20261205)
    out = {}
    for name, (ctor, kwargs, xshape) in CASES.items():
        kw = dict(kwargs)
        if kw.get("use_dropout"):
            kw["dropout_rng"] = DuetRng(DROPOUT_SEED, 0)
        net = ctor(**kw)
        mg.generation_init_weights(net, 0.02)
        net.train()
        for k, v in net.state_dict().items():
            out[f"{name}.sd.{k}"] = v.clone()
        out[f"{name}.nparams"] = torch.tensor([sum(p.numel() for p in net.parameters())],
                                              dtype=torch.int64)
        # float64 from the float32 weights and input, so the reference
        # carries no float32 rounding of its own.
        net.double()
        x = torch.randn(xshape, generator=gen).double().requires_grad_(True)
        y = net(x)
        r = torch.randn(y.shape, generator=gen)
        (y * r).sum().backward()
        out[f"{name}.x"] = x.detach()
        out[f"{name}.out"] = y.detach()
        out[f"{name}.r"] = r
        out[f"{name}.grad.x"] = x.grad
        for k, p in net.named_parameters():
            out[f"{name}.grad.{k}"] = p.grad
        for k, b in net.named_buffers():
            out[f"{name}.after.{k}"] = b.clone()
    st.save(out, os.path.join(outdir, "networks_gan.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
