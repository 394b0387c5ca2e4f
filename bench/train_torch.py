"""The PyTorch side of bench/train.c: MMEditing's SRGAN training step
(MSRResNet generator, ModifiedVGG discriminator, L1 pixel + VGG perceptual +
vanilla GAN losses, one Adam per network) with one DistributedDataParallel per
network (broadcast_buffers=False, as MMEditing's
DistributedDataParallelWrapper), over gloo on N CPU processes, one torch
thread each.

Usage: train_torch.py --model tiny|full --nproc N [--steps S] [--warmup W]
Prints one JSON line: {"framework": "torch", "model", "nproc", "batch",
"step_s", "images_per_s", "peak_rss_mb"} (peak resident memory: the largest
over the processes).
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

# The same sizes as bench/train.c's (and configs/srgan_x4_tiny.cfg /
# srgan_x4c64b16_div2k.cfg). vgg: torchvision-style cfg (0 = max pool) and
# the feature layer of the perceptual loss.
VGG19 = [64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0,
         512, 512, 512, 512, 0]
MODELS = {
    "tiny": dict(mid=32, blocks=4, dmid=16, crop=64, batch=8, vgg=[16, 16, 0, 32, 32, 0, 64, 64],
                 layer=12),
    "full": dict(mid=64, blocks=16, dmid=64, crop=128, batch=16, vgg=VGG19, layer=34),
}


class ResidualBlockNoBN(nn.Module):
    def __init__(self, mid):
        super().__init__()
        self.conv1 = nn.Conv2d(mid, mid, 3, 1, 1)
        self.conv2 = nn.Conv2d(mid, mid, 3, 1, 1)

    def forward(self, x):
        return x + self.conv2(F.relu(self.conv1(x)))


class PixelShufflePack(nn.Module):
    def __init__(self, cin, cout, scale):
        super().__init__()
        self.scale = scale
        self.upsample_conv = nn.Conv2d(cin, cout * scale * scale, 3, 1, 1)

    def forward(self, x):
        return F.pixel_shuffle(self.upsample_conv(x), self.scale)


class MSRResNet(nn.Module):
    def __init__(self, mid, blocks):
        super().__init__()
        self.conv_first = nn.Conv2d(3, mid, 3, 1, 1)
        self.trunk_net = nn.Sequential(*[ResidualBlockNoBN(mid) for _ in range(blocks)])
        self.upsample1 = PixelShufflePack(mid, mid, 2)
        self.upsample2 = PixelShufflePack(mid, mid, 2)
        self.conv_hr = nn.Conv2d(mid, mid, 3, 1, 1)
        self.conv_last = nn.Conv2d(mid, 3, 3, 1, 1)

    def forward(self, x):
        lrelu = lambda t: F.leaky_relu(t, 0.1)
        out = self.trunk_net(lrelu(self.conv_first(x)))
        out = self.upsample2(self.upsample1(out))
        out = self.conv_last(lrelu(self.conv_hr(out)))
        return out + F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)


class ModifiedVGG(nn.Module):
    def __init__(self, mid, size):
        super().__init__()
        chans = [mid, mid * 2, mid * 4, mid * 8, mid * 8]
        self.conv0_0 = nn.Conv2d(3, mid, 3, 1, 1)
        cin = mid
        for i, c in enumerate(chans):
            if i > 0:
                setattr(self, f"conv{i}_0", nn.Conv2d(cin, c, 3, 1, 1, bias=False))
                setattr(self, f"bn{i}_0", nn.BatchNorm2d(c))
            setattr(self, f"conv{i}_1", nn.Conv2d(c, c, 4, 2, 1, bias=False))
            setattr(self, f"bn{i}_1", nn.BatchNorm2d(c))
            cin = c
        self.linear1 = nn.Linear(mid * 8 * (size // 32) ** 2, 100)
        self.linear2 = nn.Linear(100, 1)

    def forward(self, x):
        lrelu = lambda t: F.leaky_relu(t, 0.2)
        x = lrelu(self.conv0_0(x))
        x = lrelu(self.bn0_1(self.conv0_1(x)))
        for i in range(1, 5):
            x = lrelu(getattr(self, f"bn{i}_0")(getattr(self, f"conv{i}_0")(x)))
            x = lrelu(getattr(self, f"bn{i}_1")(getattr(self, f"conv{i}_1")(x)))
        return self.linear2(lrelu(self.linear1(x.flatten(1))))


class PerceptualVGG(nn.Module):
    """torchvision's VGG features truncated after `layer`, frozen, with
    ImageNet input normalisation (MMEditing's PerceptualVGG)."""

    def __init__(self, cfg, layer):
        super().__init__()
        mods, cin = [], 3
        for c in cfg:
            if c == 0:
                mods.append(nn.MaxPool2d(2, 2))
            else:
                mods += [nn.Conv2d(cin, c, 3, 1, 1), nn.ReLU(inplace=False)]
                cin = c
        self.vgg_layers = nn.Sequential(*mods[: layer + 1])
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        for p in self.parameters():
            p.requires_grad = False

    def forward(self, x):
        return self.vgg_layers((x - self.mean) / self.std)


def worker(rank, world, model_name, steps, warmup, initfile, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank, world_size=world)
    m = MODELS[model_name]
    torch.manual_seed(0)
    gen = MSRResNet(m["mid"], m["blocks"])
    disc = ModifiedVGG(m["dmid"], m["crop"])
    vgg = PerceptualVGG(m["vgg"], m["layer"])
    gen = nn.parallel.DistributedDataParallel(gen, broadcast_buffers=False)
    disc = nn.parallel.DistributedDataParallel(disc, broadcast_buffers=False)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.9, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.9, 0.999))
    g = torch.Generator().manual_seed(1 + rank)
    b, crop = m["batch"], m["crop"]
    gt = torch.rand(b, 3, crop, crop, generator=g)
    lq = F.avg_pool2d(gt, 4)
    bce = nn.BCEWithLogitsLoss()

    def step():
        # Generator: pixel + perceptual + GAN losses, discriminator frozen.
        for p in disc.parameters():
            p.requires_grad = False
        fake = gen(lq)
        loss_pix = 1e-2 * F.l1_loss(fake, gt)
        loss_per = F.l1_loss(vgg(fake), vgg(gt).detach())
        pred = disc(fake)
        loss_gan = 5e-3 * bce(pred, torch.ones_like(pred))
        opt_g.zero_grad()
        (loss_pix + loss_per + loss_gan).backward()
        opt_g.step()
        # Discriminator: real, then fake (detached), one step.
        for p in disc.parameters():
            p.requires_grad = True
        opt_d.zero_grad()
        real = disc(gt)
        bce(real, torch.ones_like(real)).backward()
        fpred = disc(fake.detach())
        bce(fpred, torch.zeros_like(fpred)).backward()
        opt_d.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    dt = (time.perf_counter() - t0) / steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t = torch.tensor([dt, rss], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put((t[0].item(), t[1].item()))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fd, initfile = tempfile.mkstemp(prefix="duet_bench_gloo_")
    os.close(fd)
    os.unlink(initfile)
    try:
        mp.start_processes(worker, args=(a.nproc, a.model, a.steps, a.warmup, initfile, queue),
                           nprocs=a.nproc, join=True, start_method="spawn")
    finally:
        if os.path.exists(initfile):
            os.unlink(initfile)
    step_s, rss = queue.get()
    batch = MODELS[a.model]["batch"] * a.nproc
    print(json.dumps({"framework": "torch", "model": a.model, "nproc": a.nproc, "batch": batch,
                      "step_s": step_s, "images_per_s": batch / step_s, "peak_rss_mb": rss}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
