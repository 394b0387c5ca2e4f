"""Loads a duet checkpoint exported by scripts/export-pth.py into MMEditing
0.16.1's own model and compares (tests/e2e/test_export_pth_mmedit.sh):

  export_check.py MODEL CKPT.safetensors CKPT.pth INPUT.png DUET_OUTPUT.png

MODEL is one of msrresnet, srgan, esrgan, edsr, rdn, pix2pix, cyclegan: MMEditing's own
config for it, scaled down to the duet config the test trained (the
overrides below). Checks, failing with a message:
  1. mmcv's load_checkpoint(model, CKPT.pth, strict=True) takes the file:
     every key of MMEditing's state dict is there with its shape, no other;
  2. every tensor MMEditing then holds equals duet's (the safetensors file)
     bit for bit;
  3. MMEditing's generator on INPUT.png (SR: RGB / 255; translation: then
     normalised to [-1, 1], as the configs' pipelines do) gives the image
     duet infer wrote, within one 8-bit level (both round after clamping);
     prints the largest difference and the mean one.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import mmedit_oracle as mo  # noqa: E402  (MMEditing with its environment adjusted)
from mmcv.runner import load_checkpoint  # noqa: E402

TINY_VGG = [8, 8, 'M', 16, 16]


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    kinds = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, e in header.items():
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=kinds[e["dtype"]]).reshape(
            e["shape"])
    return out


def read_png(path):
    import cv2
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    assert img is not None, path
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def model_cfg(name, tmp):
    if name in ("msrresnet", "srgan"):
        cfg = mo.config("restorers/srresnet_srgan/" + (
            "msrresnet_x4c64b16_g1_1000k_div2k.py" if name == "msrresnet"
            else "srgan_x4c64b16_g1_1000k_div2k.py"))
        cfg.model.generator.update(mid_channels=32, num_blocks=4)
    elif name == "esrgan":
        cfg = mo.config("restorers/esrgan/esrgan_x4c64b23g32_g1_400k_div2k.py")
        cfg.model.generator.update(mid_channels=16, num_blocks=2, growth_channels=8)
    elif name == "edsr":
        cfg = mo.config("restorers/edsr/edsr_x4c64b16_g1_300k_div2k.py")
        cfg.model.generator.update(mid_channels=32, num_blocks=4)
    elif name == "rdn":
        cfg = mo.config("restorers/rdn/rdn_x4c64b16_g1_1000k_div2k.py")
        cfg.model.generator.update(mid_channels=16, num_blocks=3, num_layers=4, channel_growth=16)
    elif name == "pix2pix":
        cfg = mo.config("synthesizers/pix2pix/pix2pix_vanilla_unet_bn_1x1_80k_facades.py")
        cfg.model.generator.update(num_down=6, base_channels=16, use_dropout=False)
        cfg.model.discriminator.update(base_channels=16, num_conv=3)
    elif name == "cyclegan":
        cfg = mo.config("synthesizers/cyclegan/cyclegan_lsgan_resnet_in_1x1_80k_facades.py")
        cfg.model.generator.update(base_channels=16, num_blocks=3)
        cfg.model.discriminator.update(base_channels=16, num_conv=3)
    else:
        raise SystemExit("export_check: unknown model " + name)
    if name in ("srgan", "esrgan"):
        cfg.model.discriminator.mid_channels = 16
        cfg.model.perceptual_loss.vgg_type = "duet_tiny_vgg"
        cfg.model.perceptual_loss.layer_weights = {'7': 1.0}
        cfg.model.perceptual_loss.pretrained = mo.add_tiny_vgg(
            "duet_tiny_vgg", TINY_VGG, os.path.join(tmp, "tiny_vgg.pth"), 0)
    return cfg


def main():
    name, st_path, pth_path, inp, duet_out = sys.argv[1:6]
    tmp = os.path.dirname(os.path.abspath(pth_path))
    model = mo.build(model_cfg(name, tmp))
    load_checkpoint(model, pth_path, map_location="cpu", strict=True)  # raises on a mismatch
    duet = read_safetensors(st_path)
    sd = model.state_dict()
    for k, v in sd.items():
        assert k in duet, "MMEditing's %s is not in duet's checkpoint" % k
        d = duet[k]
        assert tuple(d.shape) == tuple(v.shape), (k, d.shape, tuple(v.shape))
        assert np.array_equal(v.numpy().astype(d.dtype), d), "%s differs after loading" % k
    x = torch.from_numpy(read_png(inp).astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    translation = name in ("pix2pix", "cyclegan")
    gen = model.generators["a"] if name == "cyclegan" else model.generator
    model.eval()
    if name == "pix2pix":
        gen.train()  # MMEditing's Pix2Pix.forward_test runs in train mode (BN batch stats)
    with torch.no_grad():
        y = gen((x - 0.5) / 0.5 if translation else x)
    if translation:
        y = (y + 1) / 2
    ours = np.rint(y.clamp(0, 1)[0].permute(1, 2, 0).numpy() * 255.0)
    theirs = read_png(duet_out).astype(np.float64)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    diff = np.abs(ours - theirs)
    print("export_check: %s: load_checkpoint(strict=True) took %d tensors, all equal to duet's; "
          "generator output vs duet infer: max %.0f, mean %.4f levels (of 255) over %d values"
          % (name, len(sd), diff.max(), diff.mean(), diff.size))
    assert diff.max() <= 1.0, "outputs differ by %.0f levels" % diff.max()


if __name__ == "__main__":
    main()
