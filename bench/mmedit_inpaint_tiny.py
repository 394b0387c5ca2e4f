"""MMEditing's own training of a tiny inpainting config: does the model
learn on this data at all, independently of duet?

Reads one of duet's inpainting configs (libconfig, e.g.
configs/deepfillv1_tiny.cfg), turns it into the MMEditing 0.16.1 config it
stands for (the same model dict with train_cfg / test_cfg moved out, the
same dataset and pipeline, the same optimizers and lr policy), and trains
MMEditing's own model, built by MMEditing's registry, on MMEditing's own
data pipeline (ImgInpaintingDataset, LoadMask, Crop, Resize, Flip,
Normalize, GetMaskedImage), one process with the global batch of duet's
2-process run (2 x samples_per_gpu), calling model.train_step through
mmcv's MMDataParallel as MMEditing's single-process loop does. The lr
policy (Fixed or Step) is applied before each iteration as mmcv's
LrUpdaterHook does. Then it evaluates the final generator on the val set
with MMEditing's forward_test (psnr / ssim of the filled image, l1 in the
hole) and the same psnr / ssim of the masked input itself, over the val
set's first mask draw (what `duet test` reports) and over --draws mask
draws per image (a steadier estimate), and writes forward_test's
pictures (gt | masked | mask | output | filled) to --out.

What differs from duet's run: MMEditing's random streams (numpy's for the
masks and crops, torch's for the init), so the holes are not duet's; a
SyncBN norm_cfg becomes BN (one process); duet's encdec.init_cfg.gain
(the standard deviation MMEditing's DeepFillEncoderDecoder.init_weights
hard-codes as 0.02) is applied after the build with mmcv's normal_init on
every generator convolution, as init_weights does. Everything else is
MMEditing's.

Usage (the mmedit venv of scripts/make-mmedit-venv.sh, from the repository
root so that the config's relative paths resolve):
  ~/.cache/duet/mmedit-venv/bin/python bench/mmedit_inpaint_tiny.py \\
      configs/deepfillv1_tiny.cfg [--iters N] [--seed S] [--set KEY=VALUE ...] \\
      [--out DIR] [--draws D] [--threads T]
--set takes duet's --set syntax for the few keys it needs (a dotted path
and a libconfig value: model.train_cfg.disc_step=1). Prints the log every
--log iterations and one final JSON line {"psnr", "psnr_input", ...}.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))


# ---- a small libconfig reader (the subset duet's configs use) ----------

_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*|//[^\n]*|/\*.*?\*/)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[Ll]?)
  | (?P<name>[A-Za-z_*][-A-Za-z0-9_*]*)
  | (?P<punct>[=:;,{}()\[\]])
""", re.S | re.X)


def _tokens(text):
    pos = 0
    out = []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            line = text.count("\n", 0, pos) + 1
            raise ValueError(f"libconfig: cannot read line {line}: {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


class _Parser:
    def __init__(self, text):
        self.t = _tokens(text)
        self.i = 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self, want=None):
        tok = self.peek()
        if want is not None and tok[1] != want:
            raise ValueError(f"libconfig: expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def settings(self, end):
        d = {}
        while self.peek()[1] != end:
            kind, name = self.take()
            if kind != "name":
                raise ValueError(f"libconfig: expected a name, got {name!r}")
            self.take() if self.peek()[1] in ("=", ":") else None
            d[name] = self.value()
            if self.peek()[1] in (";", ","):
                self.take()
        return d

    def value(self):
        kind, tok = self.peek()
        if tok == "{":
            self.take()
            d = self.settings("}")
            self.take("}")
            return d
        if tok in ("(", "["):
            close = ")" if tok == "(" else "]"
            self.take()
            items = []
            while self.peek()[1] != close:
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take()
            self.take(close)
            return items
        self.take()
        if kind == "str":
            s = tok[1:-1].encode().decode("unicode_escape")
            while self.peek()[0] == "str":  # adjacent strings concatenate
                s += self.take()[1][1:-1]
            return s
        if kind == "num":
            tok = tok.rstrip("Ll")
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if kind == "name" and tok.lower() in ("true", "false"):
            return tok.lower() == "true"
        raise ValueError(f"libconfig: unexpected {tok!r}")


def read_libconfig(path):
    with open(path) as f:
        return _Parser(f.read()).settings(None)


def apply_set(cfg, assignment):
    key, _, text = assignment.partition("=")
    value = _Parser(text).value()
    parts = key.strip().split(".")
    d = cfg
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


# ---- duet's config -> MMEditing's ---------------------------------------

def _mmedit_values(x):
    """"None" strings become None, arrays of numbers tuples (as MMEditing's
    configs write them: Crop checks), SyncBN becomes BN (one process)."""
    if isinstance(x, dict):
        d = {k: _mmedit_values(v) for k, v in x.items()}
        if d.get("type") == "SyncBN":
            d["type"] = "BN"
        return d
    if isinstance(x, list):
        if x and all(isinstance(v, (int, float)) for v in x):
            return tuple(x)
        return [_mmedit_values(v) for v in x]
    if x == "None":
        return None
    return x


def to_mmedit(cfg):
    import mmcv
    model = _mmedit_values(cfg["model"])
    train_cfg = model.pop("train_cfg", None)
    test_cfg = model.pop("test_cfg", None)
    # duet's init_cfg of DeepFillEncoderDecoder (the std of its normal init,
    # which MMEditing's init_weights hard-codes as 0.02): applied after the
    # build, by MMEditing's own normal_init (init_gain below)
    init_gain = None
    encdec = model.get("encdec", {})
    if encdec.get("type") == "DeepFillEncoderDecoder" and "init_cfg" in encdec:
        init_gain = float(encdec.pop("init_cfg").get("gain", 0.02))
    data = _mmedit_values(cfg["data"])
    for part in ("train", "val"):
        data[part].pop("times", None)
    return mmcv.Config(dict(model=model, train_cfg=train_cfg, test_cfg=test_cfg, data=data,
                            optimizers=cfg["optimizers"],
                            lr_config=cfg.get("lr_config", {"policy": "Fixed"}),
                            total_iters=cfg["total_iters"], init_gain=init_gain))


def lr_factor(lr_config, it):
    """mmcv's Fixed / Step LrUpdaterHook (by_epoch False) at 0-based iteration it."""
    policy = lr_config.get("policy", "Fixed")
    if policy == "Fixed":
        return 1.0
    if policy == "Step":
        steps = lr_config["step"]
        steps = steps if isinstance(steps, list) else [steps]
        exp = len([s for s in steps if it >= s])
        return lr_config.get("gamma", 0.1) ** exp
    raise ValueError(f"lr policy {policy} not handled here")


def unwrap(item):
    """A collated batch as train_step / forward_test take it: DataContainers
    (the meta) to their first GPU's list, tensors as they are."""
    from mmcv.parallel import DataContainer
    return {k: (v.data[0] if isinstance(v, DataContainer) else v) for k, v in item.items()}


def scores(model, dataset, draws, seed, out=None):
    """MMEditing's forward_test metrics of the filled image and the same psnr /
    ssim / l1 of the masked input, over `draws` mask draws per image (numpy
    reseeded per draw, so every run sees the same holes)."""
    from mmcv.parallel import collate
    from mmedit.core.evaluation.metrics import psnr, ssim
    from mmedit.core import tensor2img
    rows = []
    for d in range(draws):
        np.random.seed(seed * 1000 + d)
        for i in range(len(dataset)):
            item = collate([dataset[i]], samples_per_gpu=1)
            data = unwrap(item)
            with torch.no_grad():
                res = model.forward_test(data["masked_img"], data["mask"], gt_img=data["gt_img"],
                                         meta=data["meta"], save_image=out is not None and d == 0,
                                         save_path=out, iteration=None)
            gt = tensor2img(data["gt_img"], min_max=(-1, 1))
            inp = tensor2img(data["masked_img"], min_max=(-1, 1))
            r = dict(res["eval_result"])
            r["psnr_input"] = psnr(inp, gt)
            r["ssim_input"] = ssim(inp, gt)
            r["draw"] = d
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--iters", type=int, default=None, help="default: the config's total_iters")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=None, help="forward_test's pictures of the first draw")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log", type=int, default=20)
    ap.add_argument("--gen-init", default=None, metavar="STD",
                    help="re-initialise every generator convolution N(0, STD), bias 0 "
                         "(DeepFillEncoderDecoder.init_weights with STD for its 0.02); "
                         "default: the config's encdec.init_cfg.gain, when it has one")
    ap.add_argument("--eval-every", type=int, default=0, metavar="N",
                    help="also print the val psnr against the masked input's every N iterations")
    ap.add_argument("--nproc-batch", type=int, default=2,
                    help="the batch is this many times samples_per_gpu (duet's -n)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    import mmedit_oracle as mo
    from mmcv.parallel import collate
    from mmedit.datasets import build_dataset

    duet_cfg = read_libconfig(a.config)
    for s in a.set:
        apply_set(duet_cfg, s)
    cfg = to_mmedit(duet_cfg)
    iters = a.iters if a.iters is not None else cfg.total_iters

    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    model = mo.build(cfg)
    gain = float(a.gen_init) if a.gen_init is not None else cfg.init_gain
    if gain is not None:
        from mmcv.cnn import normal_init
        for m in model.generator.modules():
            if isinstance(m, torch.nn.Conv2d):
                normal_init(m, 0, gain)
    model.train()
    optimizers = mo.optimizers(model, cfg)
    base_lr = {k: [g["lr"] for g in o.param_groups] for k, o in optimizers.items()}
    train_set = build_dataset(cfg.data.train)
    val_set = build_dataset(cfg.data.val)
    batch = a.nproc_batch * cfg.data.samples_per_gpu
    rng = np.random.RandomState(a.seed)
    order = []
    t0 = time.time()
    for it in range(iters):
        f = lr_factor(cfg.lr_config, it)
        for k, o in optimizers.items():
            for g, lr in zip(o.param_groups, base_lr[k]):
                g["lr"] = lr * f
        idx = []
        while len(idx) < batch:
            if not order:
                order = list(rng.permutation(len(train_set)))
            idx.append(order.pop())
        item = collate([train_set[i] for i in idx], samples_per_gpu=batch)
        data = unwrap(item)
        out = model.train_step(data, optimizers)
        if a.eval_every and (it + 1) % a.eval_every == 0 and it + 1 < iters:
            model.eval()
            rs = scores(model, val_set, a.draws, a.seed)
            model.train()
            print(f"iter {it + 1}: val psnr {np.mean([r['psnr'] for r in rs]):.3f} against "
                  f"the masked input's {np.mean([r['psnr_input'] for r in rs]):.3f} "
                  f"({a.draws} draws)", flush=True)
        if (it + 1) % a.log == 0:
            logs = {k: round(float(v), 4) for k, v in out["log_vars"].items()}
            print(f"iter {it + 1}: {time.time() - t0:.0f}s {logs}", flush=True)
    model.eval()
    rows = scores(model, val_set, a.draws, a.seed, a.out)
    first = [r for r in rows if r["draw"] == 0]

    def mean(rs, k):
        return float(np.mean([r[k] for r in rs]))
    res = {"config": a.config, "iters": iters, "seed": a.seed, "set": a.set,
           "train_s": round(time.time() - t0, 1), "images": len(first)}
    for k in ("psnr", "psnr_input", "ssim", "ssim_input", "l1"):
        res[k] = round(mean(first, k), 3)
        res[k + f"_{a.draws}draws"] = round(mean(rows, k), 3)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
