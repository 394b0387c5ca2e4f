"""The MMEditing side of bench/mmedit.c: MMEditing 0.16.1's own
`model.train_step`, the model built by MMEditing's registry from MMEditing's
own config (shipped in the mmedit wheel) and the optimizers by
mmedit.core.build_optimizers from the config's `optimizers`, timed on the
CPU on synthetic tensors of the config's shapes. Run it in the venv of
scripts/make-mmedit-venv.sh (MMEditing 0.16.1, mmcv 1.7.2, Debian's torch
1.13); the environment changes are tests/ref/mmedit_oracle.py's (stubs for
mmcv's compiled ops, which none of these models uses).

Models (the same names as bench_mmedit's):
  srgan_full   restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py as
               shipped: MSRResNet 64x16, ModifiedVGG 64, VGG19 perceptual
               loss to conv5_4, batch 16 of 128x128 gt (samples_per_gpu,
               PairedRandomCrop's gt_patch_size), lq its 4x4 box average.
               The VGG19 is random (a torchvision vgg19() state dict saved
               to a temporary file: the config's torchvision://vgg19 would
               download ImageNet weights; the cost is the same).
  srgan_tiny   the same config shrunk to configs/srgan_x4_tiny.cfg's sizes:
               MSRResNet 32x4, ModifiedVGG 16, the small VGG [16, 16, M, 32,
               32, M, 64, 64] to layer 12, pixel weight 1.0, batch 8; the gt
               is 128x128, not the tiny config's 64 (MMEditing's ModifiedVGG
               takes 128x128 only; bench_mmedit runs duet's tiny config at
               128 too).
  deepfillv1   inpainting/deepfillv1/deepfillv1_256x256_8x2_places.py as
               shipped: DeepFillEncoderDecoder, DeepFillv1Discriminators,
               WGAN loss, gradient penalty and disc shift, disc_step 5,
               local_size 128; batch 2 (samples_per_gpu) of 256x256
               images in [-1, 1] with the bbox masks of its LoadMask
               (mmedit.core.mask.random_bbox with the config's mask_config,
               bbox2mask, masked_img = gt * (1 - mask) as GetMaskedImage).
               One train_step is one discriminator step and, every 5th,
               the generator's: time whole cycles (--steps and --warmup
               multiples of 5).
  edsr_tiny    restorers/edsr/edsr_x4c64b16_g1_300k_div2k.py shrunk to
               configs/edsr_x4_tiny.cfg's sizes: EDSR 32 channels, 4 blocks;
  rdn_tiny     restorers/rdn/rdn_x4c64b16_g1_1000k_div2k.py shrunk to
               configs/rdn_x4_tiny.cfg's: RDN 16 channels, 3 blocks of 4
               layers growing by 16; both batch 8 of 64x64 gt, lq its 4x4
               box average.
  realesrgan_tiny  restorers/real_esrgan/realesrgan_c64b23g32_12x4_lr1e-4_400k_df2k_ost.py
               shrunk to configs/realesrgan_x4_tiny.cfg: RRDBNet 16x2 growth
               8, U-Net discriminator 16, the tiny VGG's layer 12, no
               sharpened GT; batch 8 of 64x64 gt
  pconv_tiny   inpainting/partial_conv/pconv_256x256_stage1_8x1_places.py
               shrunk to configs/pconv_tiny.cfg: 4 layers, BN for SyncBN,
               no perceptual loss; batch 4 of 64x64 in [-1, 1] with bbox
               masks (random_bbox: 32x32 at most, delta 8, margin 8).

One process calls model.train_step(data, optimizers) itself (MMEditing's
single-process loop wraps the model in MMDataParallel, which on the CPU
hands the batch straight to it). N processes wrap the model as MMEditing's
DistributedDataParallelWrapper.to_ddp does, each part with trainable
parameters in mmcv's MMDistributedDataParallel (broadcast_buffers False,
find_unused_parameters False, the config's), on the CPU over gloo instead
of on CUDA (the wrapper itself calls .cuda()). Each process has its own
batch (rank-seeded), the same every step.

Usage (mmedit venv python): mmedit_step.py --model NAME [--nproc N]
    [--threads T] [--steps S] [--warmup W] [--profile ROWS] | --info
--profile ROWS: one process, the timed steps under torch.profiler; prints
the ROWS operators with the most self CPU time instead of the JSON line.
Prints one JSON line {"framework": "mmedit", "model", "nproc", "batch",
"step_s", "images_per_s", "peak_rss_mb", "cpu_s_per_step"} (step_s: the
mean of the timed steps; peak_rss_mb: the largest process's ru_maxrss;
cpu_s_per_step: user + system CPU seconds per timed step, summed over the
processes).
"""
import argparse
import datetime
import json
import os
import resource
import sys
import tempfile
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))

SRGAN_CFG = "restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py"
DEEPFILLV1_CFG = "inpainting/deepfillv1/deepfillv1_256x256_8x2_places.py"
TINY_VGG = [16, 16, "M", 32, 32, "M", 64, 64]  # configs/srgan_x4_tiny.cfg's cfg
MODELS = ("srgan_full", "srgan_tiny", "deepfillv1", "edsr_tiny", "rdn_tiny", "pconv_tiny",
          "realesrgan_tiny")
REALESRGAN_CFG = "restorers/real_esrgan/realesrgan_c64b23g32_12x4_lr1e-4_400k_df2k_ost.py"
PCONV_CFG = "inpainting/partial_conv/pconv_256x256_stage1_8x1_places.py"
EDSR_CFG = "restorers/edsr/edsr_x4c64b16_g1_300k_div2k.py"
RDN_CFG = "restorers/rdn/rdn_x4c64b16_g1_1000k_div2k.py"


def _pipeline_step(pipeline, type_name):
    for s in pipeline:
        if s["type"] == type_name:
            return s
    raise KeyError(f"no {type_name} in the config's train_pipeline")


def build(name, tmp, mo):
    """MMEditing's model, its config, and (batch size, a function rank ->
    data dict for train_step)."""
    if name.startswith("srgan"):
        cfg = mo.config(SRGAN_CFG)
        if name == "srgan_tiny":
            cfg.model.generator.update(mid_channels=32, num_blocks=4)
            cfg.model.discriminator.mid_channels = 16
            cfg.model.pixel_loss.loss_weight = 1.0
            cfg.model.perceptual_loss.vgg_type = "duet_tiny_vgg"
            cfg.model.perceptual_loss.layer_weights = {"12": 1.0}
            cfg.model.perceptual_loss.pretrained = mo.add_tiny_vgg(
                "duet_tiny_vgg", TINY_VGG, os.path.join(tmp, "tiny_vgg.pth"), 1)
            batch = 8
        else:
            import torchvision.models.vgg as vgg
            torch.manual_seed(1)
            path = os.path.join(tmp, "vgg19_random.pth")
            torch.save(vgg.vgg19().state_dict(), path)
            cfg.model.perceptual_loss.pretrained = path
            batch = cfg.data.train_dataloader.samples_per_gpu
        crop = _pipeline_step(cfg.train_pipeline, "PairedRandomCrop")["gt_patch_size"]
        scale = cfg.scale

        def data(rank):
            g = torch.Generator().manual_seed(1 + rank)
            gt = torch.rand(batch, 3, crop, crop, generator=g)
            return dict(lq=torch.nn.functional.avg_pool2d(gt, scale), gt=gt)
    elif name in ("edsr_tiny", "rdn_tiny"):
        if name == "edsr_tiny":
            cfg = mo.config(EDSR_CFG)
            cfg.model.generator.update(mid_channels=32, num_blocks=4)
        else:
            cfg = mo.config(RDN_CFG)
            cfg.model.generator.update(mid_channels=16, num_blocks=3, num_layers=4,
                                       channel_growth=16)
        batch, crop, scale = 8, 64, 4

        def data(rank):
            g = torch.Generator().manual_seed(1 + rank)
            gt = torch.rand(batch, 3, crop, crop, generator=g)
            return dict(lq=torch.nn.functional.avg_pool2d(gt, scale), gt=gt)
    elif name == "realesrgan_tiny":
        cfg = mo.config(REALESRGAN_CFG)
        cfg.model.generator.update(mid_channels=16, num_blocks=2, growth_channels=8)
        cfg.model.discriminator.mid_channels = 16
        cfg.model.perceptual_loss.vgg_type = "duet_tiny_vgg"
        cfg.model.perceptual_loss.layer_weights = {"12": 1.0}
        cfg.model.perceptual_loss.pretrained = mo.add_tiny_vgg(
            "duet_tiny_vgg", TINY_VGG, os.path.join(tmp, "tiny_vgg.pth"), 1)
        cfg.model.update(is_use_sharpened_gt_in_pixel=False, is_use_sharpened_gt_in_percep=False)
        cfg.train_cfg = dict()
        batch, crop, scale = 8, 64, 4

        def data(rank):
            g = torch.Generator().manual_seed(1 + rank)
            gt = torch.rand(batch, 3, crop, crop, generator=g)
            return dict(lq=torch.nn.functional.avg_pool2d(gt, scale), gt=gt)
    elif name == "pconv_tiny":
        cfg = mo.config(PCONV_CFG)
        for part in ("encoder", "decoder"):
            cfg.model.encdec[part].update(num_layers=4, norm_cfg=dict(type='BN'))
        cfg.model.loss_composed_percep = None
        cfg.model.loss_out_percep = False
        batch = 4
        mc = dict(img_shape=(64, 64), max_bbox_shape=32, max_bbox_delta=8, min_margin=8)

        def data(rank):
            import numpy as np
            from mmedit.core.mask import bbox2mask, random_bbox
            np.random.seed(1 + rank)
            g = torch.Generator().manual_seed(1 + rank)
            gt = torch.rand(batch, 3, 64, 64, generator=g) * 2 - 1
            boxes = [random_bbox(**mc) for _ in range(batch)]
            mask = torch.stack([torch.from_numpy(bbox2mask(mc["img_shape"], b)).permute(2, 0, 1)
                                for b in boxes]).float()
            return dict(gt_img=gt, mask=mask, masked_img=gt * (1.0 - mask))
    elif name == "deepfillv1":
        cfg = mo.config(DEEPFILLV1_CFG)
        batch = cfg.data.train_dataloader.samples_per_gpu
        mc = dict(_pipeline_step(cfg.train_pipeline, "LoadMask")["mask_config"])

        def data(rank):
            import numpy as np
            from mmedit.core.mask import bbox2mask, random_bbox
            np.random.seed(1 + rank)
            g = torch.Generator().manual_seed(1 + rank)
            h, w = mc["img_shape"]
            gt = torch.rand(batch, 3, h, w, generator=g) * 2 - 1
            boxes = [random_bbox(**mc) for _ in range(batch)]
            mask = torch.stack([torch.from_numpy(bbox2mask(mc["img_shape"], b)).permute(2, 0, 1)
                                for b in boxes]).float()
            return dict(gt_img=gt, mask=mask, masked_img=gt * (1.0 - mask),
                        mask_bbox=torch.tensor(boxes))
    else:
        raise ValueError(name)
    torch.manual_seed(0)
    model = mo.build(cfg)
    return model, cfg, batch, data


def to_ddp_cpu(model):
    """mmedit.core.DistributedDataParallelWrapper.to_ddp without .cuda():
    every top-level part with trainable parameters in its own
    MMDistributedDataParallel."""
    from mmcv.parallel import MMDistributedDataParallel
    for name, module in list(model._modules.items()):
        params = list(module.parameters())
        if params and any(p.requires_grad for p in params):
            model._modules[name] = MMDistributedDataParallel(
                module, broadcast_buffers=False, find_unused_parameters=False)


def cpu_seconds():
    """User + system CPU seconds of this process so far (all its threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker(rank, world, a, initfile, queue):
    torch.set_num_threads(a.threads)
    import mmedit_oracle as mo
    import torch.distributed as dist
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
    with tempfile.TemporaryDirectory(prefix="duet_bench_mmedit_") as tmp:
        model, cfg, batch, data = build(a.model, tmp, mo)
    model.train()
    if world > 1:
        to_ddp_cpu(model)
    optimizers = mo.optimizers(model, cfg)
    batch_data = data(rank)
    for _ in range(a.warmup):
        model.train_step(batch_data, optimizers)
    if world > 1:
        dist.barrier()
    if a.profile > 0:
        from torch.profiler import ProfilerActivity
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(a.steps):
                model.train_step(batch_data, optimizers)
        print(f"torch {torch.__version__}, MMEditing {a.model}, {a.steps} steps, "
              f"{a.threads} thread(s)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile))
        queue.put((0.0, 0.0, 0.0, batch))
        return
    t0, c0 = time.perf_counter(), cpu_seconds()
    for _ in range(a.steps):
        model.train_step(batch_data, optimizers)
    cpu = (cpu_seconds() - c0) / a.steps
    if world > 1:
        dist.barrier()
    dt = (time.perf_counter() - t0) / a.steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t = torch.tensor([dt, rss], dtype=torch.float64)
    c = torch.tensor([cpu], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(c, op=dist.ReduceOp.SUM)
    if rank == 0:
        queue.put((t[0].item(), t[1].item(), c[0].item(), batch))


def info():
    import mmedit_oracle as mo  # noqa: F401  (checks mmedit 0.16.1)
    import mmcv
    import mmedit
    cfg = torch.__config__.show()
    isa = [l.strip() for l in cfg.splitlines() if "CPU capability" in l]
    dnn = [l.strip(" -*") for l in cfg.splitlines() if "oneDNN" in l or "MKL-DNN" in l]
    import re
    blas = re.findall(r"BLAS_INFO=([^,\s]+)", cfg)
    print(json.dumps({"torch": torch.__version__, "mmedit": mmedit.__version__,
                      "mmcv": mmcv.__version__, "onednn": dnn[0] if dnn else None,
                      "cpu_capability": isa[0] if isa else None,
                      "blas_info": blas[0] if blas else None, "threads": torch.get_num_threads()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=MODELS, default="srgan_tiny")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, metavar="ROWS",
                    help="one process, the timed steps under torch.profiler: print the ROWS "
                         "operators with the most self CPU time instead of the JSON line")
    ap.add_argument("--info", action="store_true",
                    help="print torch's, MMEditing's and mmcv's versions and kernels as JSON")
    a = ap.parse_args()
    if a.info:
        info()
        return
    if a.steps < 1 or a.warmup < 0 or a.nproc < 1 or a.threads < 1:
        ap.error("--steps, --nproc and --threads must be >= 1, --warmup >= 0")
    if a.profile > 0:
        a.nproc = 1
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fd, initfile = tempfile.mkstemp(prefix="duet_bench_mmedit_gloo_")
    os.close(fd)
    os.unlink(initfile)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        if a.nproc == 1:
            worker(0, 1, a, initfile, queue)
        else:
            mp.start_processes(worker, args=(a.nproc, a, initfile, queue), nprocs=a.nproc,
                               join=True, start_method="spawn")
    finally:
        if os.path.exists(initfile):
            os.unlink(initfile)
    step_s, rss, cpu, batch = queue.get()
    if a.profile > 0:
        return
    print(json.dumps({"framework": "mmedit", "model": a.model, "nproc": a.nproc,
                      "batch": batch * a.nproc, "step_s": step_s,
                      "images_per_s": batch * a.nproc / step_s, "peak_rss_mb": rss,
                      "cpu_s_per_step": cpu}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
