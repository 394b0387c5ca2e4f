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

--profile ROWS: one process, the same steps under torch.profiler; prints
the ROWS operators with the most self CPU time (docs/performance.md's
per-op profile) instead of the JSON line.
"""
import argparse
import contextlib
import datetime
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

# The shared MMEditing modules (tests/ref/mmedit_torch.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
from mmedit_torch import ModifiedVGG, MSRResNet, PerceptualVGG  # noqa: E402

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


def worker(rank, world, model_name, steps, warmup, initfile, queue, threads, bf16=False,
           profile=0):
    torch.set_num_threads(threads)
    # A rendezvous that does not complete fails in a minute instead of
    # leaving bench_train to its 20-minute child timeout (seen once in ~10
    # runs at --nproc 2, both ranks asleep in gloo's connect).
    dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    m = MODELS[model_name]
    torch.manual_seed(0)
    # PyTorch's default init, out-of-place activations (as this bench always had).
    gen = MSRResNet(3, 3, m["mid"], m["blocks"], 4, mmedit_init=False, inplace=False)
    disc = ModifiedVGG(3, m["dmid"], m["crop"], inplace=False)
    layer = str(m["layer"])
    percep = PerceptualVGG(m["vgg"], [layer], inplace=False)
    vgg = lambda x: percep(x)[layer]
    gen = nn.parallel.DistributedDataParallel(gen, broadcast_buffers=False)
    disc = nn.parallel.DistributedDataParallel(disc, broadcast_buffers=False)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.9, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.9, 0.999))
    g = torch.Generator().manual_seed(1 + rank)
    b, crop = m["batch"], m["crop"]
    gt = torch.rand(b, 3, crop, crop, generator=g)
    lq = F.avg_pool2d(gt, 4)
    bce = nn.BCEWithLogitsLoss()

    # --bf16: PyTorch's CPU mixed precision around the forwards and losses
    # (weights, gradients and Adam stay float32), as a user turns it on.
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step():
        # Generator: pixel + perceptual + GAN losses, discriminator frozen.
        for p in disc.parameters():
            p.requires_grad = False
        with amp():
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
        with amp():
            real = disc(gt)
            loss_real = bce(real, torch.ones_like(real))
        loss_real.backward()
        with amp():
            fpred = disc(fake.detach())
            loss_fake = bce(fpred, torch.zeros_like(fpred))
        loss_fake.backward()
        opt_d.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    if profile > 0:
        from torch.profiler import ProfilerActivity
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        print(f"torch {torch.__version__}, {model_name}, {steps} steps, {threads} thread(s)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=profile))
        queue.put((0.0, 0.0))
        return
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
    # No destroy_process_group(): now and then one rank stayed in it after
    # the other had left (both done, the parent waiting on join for ever);
    # the process's exit closes gloo's connections as well.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast('cpu', dtype=torch.bfloat16) around forwards and losses")
    ap.add_argument("--profile", type=int, default=0, metavar="ROWS",
                    help="one process under torch.profiler: print the ROWS costliest ops")
    ap.add_argument("--info", action="store_true",
                    help="print torch's version and CPU kernel path as JSON and exit")
    a = ap.parse_args()
    if a.info:
        cfg = torch.__config__.show()
        isa = [l.strip() for l in cfg.splitlines() if "CPU capability" in l]
        dnn = [l.strip(" -*") for l in cfg.splitlines() if "oneDNN" in l or "MKL-DNN" in l]
        print(json.dumps({"torch": torch.__version__,
                          "mkldnn": torch.backends.mkldnn.is_available(),
                          "onednn": dnn[0] if dnn else None,
                          "cpu_capability": isa[0] if isa else None,
                          "threads": torch.get_num_threads()}))
        return
    # gloo on the loopback: one host, and no dependence on how the host name
    # resolves (an address that does not answer leaves the connect waiting).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fd, initfile = tempfile.mkstemp(prefix="duet_bench_gloo_")
    os.close(fd)
    os.unlink(initfile)
    if a.profile > 0:
        a.nproc = 1
    try:
        mp.start_processes(worker, args=(a.nproc, a.model, a.steps, a.warmup, initfile, queue, a.threads,
                                         a.bf16, a.profile),
                           nprocs=a.nproc, join=True, start_method="spawn")
    finally:
        if os.path.exists(initfile):
            os.unlink(initfile)
    step_s, rss = queue.get()
    if a.profile > 0:
        return
    batch = MODELS[a.model]["batch"] * a.nproc
    print(json.dumps({"framework": "torch", "model": a.model, "nproc": a.nproc, "batch": batch,
                      "step_s": step_s, "images_per_s": batch / step_s, "peak_rss_mb": rss}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
