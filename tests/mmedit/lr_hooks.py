"""duet's lr_config against mmcv's and MMEditing's own LR hooks (issue 33).

  python lr_hooks.py LR_DUMP WORKDIR      (in MMEditing 0.16.1's venv)

For each lr_config below (every policy and key MMEditing 0.16.1's configs of
duet's models use, and mmcv's warmups), builds the hook mmcv's runner
builds (mmcv's StepLrUpdaterHook, CosineRestartLrUpdaterHook, MMEditing's
LinearLrUpdaterHook), steps it over a fake iteration runner with a torch
optimizer, and compares the lr at each iteration with what duet's runner
sets (tests/mmedit/lr_dump.c reading the same keys from a .cfg): equal to
float32 rounding, at most 5e-7 relative (4 float32 ulps: duet keeps the
base lr, gamma and the result in float32; gamma=0.7 to the 9th power
alone moves 1.5e-7). Exits non-zero on a
mismatch, naming the config, the iteration and both values."""
import importlib.util
import os
import subprocess
import sys

import torch
from mmcv.runner import HOOKS  # noqa: F401 (registers mmcv's LR hooks)
from mmcv.runner.hooks import lr_updater as mmcv_lr

# MMEditing's LinearLrUpdaterHook, from its file (importing mmedit would pull
# in its models and mmcv's compiled ops, which the lite mmcv has not).
spec = importlib.util.find_spec("mmedit")
path = os.path.join(os.path.dirname(spec.origin), "core", "scheduler", "lr_updater.py")
mod_spec = importlib.util.spec_from_file_location("mmedit_lr_updater", path)
mmedit_lr = importlib.util.module_from_spec(mod_spec)
mod_spec.loader.exec_module(mmedit_lr)

HOOK_CLASSES = {"Step": mmcv_lr.StepLrUpdaterHook,
                "CosineRestart": mmcv_lr.CosineRestartLrUpdaterHook,
                "Linear": mmedit_lr.LinearLrUpdaterHook,
                "Fixed": mmcv_lr.FixedLrUpdaterHook}

TOTAL = 80
CASES = {
    # CycleGAN's configs (start 40000, interval 400 of 80000), scaled.
    "linear_cyclegan": dict(policy="Linear", by_epoch=False, target_lr=0, start=40, interval=4),
    "linear_target": dict(policy="Linear", by_epoch=False, target_lr=1e-5, start=10, interval=3),
    # SRGAN/ESRGAN's Step with milestones, gamma 0.5; and min_lr.
    "step_milestones": dict(policy="Step", by_epoch=False, step=[10, 20, 40, 60], gamma=0.5),
    "step_min_lr": dict(policy="Step", by_epoch=False, step=[10, 20, 40, 60], gamma=0.5,
                        min_lr=3e-5),
    "step_every": dict(policy="Step", by_epoch=False, step=7, gamma=0.7),
    # MSRResNet's / ESRGAN-PSNR's CosineRestart with min_lr; min_lr_ratio.
    "cosine_min_lr": dict(policy="CosineRestart", by_epoch=False, periods=[20, 20, 20, 20],
                          restart_weights=[1, 1, 1, 1], min_lr=1e-7),
    "cosine_ratio": dict(policy="CosineRestart", by_epoch=False, periods=[30, 50],
                         restart_weights=[1, 0.5], min_lr_ratio=0.05),
    # mmcv's warmups, on three policies.
    "warmup_linear": dict(policy="Step", by_epoch=False, step=[50], gamma=0.1, warmup="linear",
                          warmup_iters=15, warmup_ratio=0.001),
    "warmup_constant": dict(policy="CosineRestart", by_epoch=False, periods=[80], min_lr=0,
                            warmup="constant", warmup_iters=9, warmup_ratio=0.2),
    "warmup_exp": dict(policy="Fixed", by_epoch=False, warmup="exp", warmup_iters=12,
                       warmup_ratio=0.1),
}


class FakeRunner:
    """What an LrUpdaterHook reads from mmcv's IterBasedRunner."""

    def __init__(self, lr):
        p = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.Adam([p], lr=lr)
        self.iter, self.epoch, self.max_iters, self.max_epochs = 0, 0, TOTAL, 1


def libconfig(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, list):
        return "[" + ", ".join(libconfig(float(x) if any(isinstance(y, float) for y in v)
                                         else x) for x in v) + "]"
    if isinstance(v, float):
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    return str(v)


def main():
    dump, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    base_lr = 2e-4
    bad = 0
    for name, lc in CASES.items():
        kw = {k: v for k, v in lc.items() if k != "policy"}
        hook = HOOK_CLASSES[lc["policy"]](**kw)
        runner = FakeRunner(base_lr)
        hook.before_run(runner)
        want = []
        for it in range(TOTAL):
            runner.iter = it
            hook.before_train_iter(runner)
            want.append(runner.optimizer.param_groups[0]["lr"])
        cfg = os.path.join(work, name + ".cfg")
        with open(cfg, "w") as f:
            f.write("total_iters = %d;\nlr_config = {\n" % TOTAL)
            for k, v in lc.items():
                f.write("  %s = %s;\n" % (k, libconfig(v)))
            f.write("};\n")
        out = subprocess.run([dump, cfg, repr(base_lr)] + [str(i) for i in range(TOTAL)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print("%s: lr_dump failed: %s" % (name, out.stderr.strip()))
            bad += 1
            continue
        got = [float(line.split()[1]) for line in out.stdout.splitlines()]
        worst = 0.0
        for it, (g, w) in enumerate(zip(got, want)):
            err = abs(g - w) / max(abs(w), 1e-12)
            worst = max(worst, err)
            if err > 5e-7 and abs(g - w) > 1e-12:
                print("%s: iteration %d: duet %.9g, mmcv %.9g" % (name, it, g, w))
                bad += 1
                break
        print("%-16s %-13s %d iterations, largest relative difference %.2e" % (
            name, lc["policy"], TOTAL, worst))
    if bad:
        print("FAILED: %d lr_config(s) differ from mmcv's hooks" % bad)
        return 1
    print("all %d lr_configs equal to mmcv's / MMEditing's hooks" % len(CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
