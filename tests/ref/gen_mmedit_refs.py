"""Reference files from MMEditing 0.16.1 itself (issue 19), for the CTest
tests labelled `mmedit`: each model is built by MMEditing's registry from
MMEditing's own config (shipped in the mmedit wheel), shrunk through the
config dict as our tiny configs shrink it, and trained for a few steps by
MMEditing's own train_step with optimizers from mmcv's build_optimizers.
The files have the names, keys and layout of those that tests/ref/ref_*.py
write (see each), so the same C tests compare duet against them, pointed at
this directory:

  srgan.safetensors    SRGAN from srgan_x4c64b16_g1_1000k_div2k.py
  esrgan.safetensors   ESRGAN from esrgan_x4c64b23g32_g1_400k_div2k.py
  pix2pix.safetensors  Pix2Pix from pix2pix_vanilla_unet_bn_1x1_80k_facades.py
  cyclegan.safetensors CycleGAN from cyclegan_lsgan_resnet_in_1x1_80k_facades.py

Initial weights are MMEditing's own initialisation (its init_weights, from
torch.manual_seed), written as init.*; duet loads them. What the test
harness changes in MMEditing's environment is all in mmedit_oracle.py.

Usage (in the venv of scripts/make-mmedit-venv.sh): gen_mmedit_refs.py OUTDIR
"""
import os
import sys
import tempfile

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

import mmedit_oracle as mo  # noqa: E402  (installs the mmcv.ops stubs first)
import st  # noqa: E402

TINY_VGG = [8, 8, 'M', 16, 16]


def record(d, model, step, log):
    for k, v in model.state_dict().items():
        d[f"step{step}.{k}"] = v.clone()
    for k, v in log.items():
        d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
    for k, p in model.named_parameters():
        if p.grad is not None:
            d[f"grad{step}.{k}"] = p.grad.clone()


def logit_means(disc):
    """The discriminator's outputs of each train_step, in call order: duet
    also logs the means of the real and the fake logits (the last two
    calls, real_d_pred and fake_d_pred in MMEditing's train_step)."""
    calls = []
    disc.register_forward_hook(lambda m, i, o: calls.append(o.detach().mean().item()))
    return calls


def sr_gan(cfg_path, generator, seed, batch_seed, tmp):
    """SRGAN or ESRGAN from MMEditing's config, with the tiny generator
    `generator`, ModifiedVGG mid 8 (MMEditing's takes 128x128 only) and
    PerceptualLoss over the tiny VGG (layer '7', the last conv before its
    ReLU), two train_steps on one batch of 4."""
    cfg = mo.config(cfg_path)
    cfg.model.generator.update(generator)
    cfg.model.discriminator.mid_channels = 8
    cfg.model.perceptual_loss.vgg_type = "duet_tiny_vgg"
    cfg.model.perceptual_loss.layer_weights = {'7': 1.0}
    cfg.model.perceptual_loss.pretrained = mo.add_tiny_vgg(
        "duet_tiny_vgg", TINY_VGG, os.path.join(tmp, "tiny_vgg.pth"), seed + 1)
    torch.manual_seed(seed)
    model = mo.build(cfg)
    model.train()
    opt = mo.optimizers(model, cfg)
    g = torch.Generator().manual_seed(batch_seed)
    lq = torch.rand(4, 3, 32, 32, generator=g)
    gt = torch.rand(4, 3, 128, 128, generator=g)
    d = {f"init.{k}": v.clone() for k, v in model.state_dict().items()}
    d["lq"], d["gt"] = lq, gt
    calls = logit_means(model.discriminator)
    return model, opt, d, {'lq': lq, 'gt': gt}, calls


def srgan(outdir, tmp):
    model, opt, d, batch, calls = sr_gan(
        "restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py",
        dict(mid_channels=16, num_blocks=2), 20261219, 7, tmp)
    for step in (1, 2):
        log = model.train_step(batch, opt)['log_vars']
        log['real_logit_mean'], log['fake_logit_mean'] = calls[-2], calls[-1]
        record(d, model, step, log)
    st.save(d, os.path.join(outdir, "srgan.safetensors"),
            metadata={"oracle": "mmedit 0.16.1 SRGAN.train_step"})


MODELS = {"srgan": srgan}


def main():
    outdir = sys.argv[1]
    only = sys.argv[2:] or list(MODELS)
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for name in only:
            MODELS[name](outdir, tmp)
            print(f"gen_mmedit_refs: {name} done", flush=True)


if __name__ == "__main__":
    main()
