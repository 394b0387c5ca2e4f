"""PyTorch references for optimizers and LR schedules: nn.safetensors.

Optimizer case NAME (torch.optim.Adam or SGD over two parameters p0 (4, 3)
and p1 (5,) for STEPS steps):
  NAME.hparams   Adam: [lr, beta1, beta2, eps, weight_decay]
                 SGD:  [lr, momentum, dampening, weight_decay, nesterov]
  NAME.p<i>.init the starting values
  NAME.p<i>.grad.s<k>  the gradient before step k (1-based); absent when the
                 parameter has no gradient (grad None) at that step
  NAME.p<i>.after.s<k> the values after step k

Schedules (lr by iteration 0..ITERS-1, base lr 1.0):
  sched_step.milestones, sched_step.gamma, sched_step.lr
  sched_cos.periods, sched_cos.weights, sched_cos.min_lr, sched_cos.lr
The Step values come from torch's MultiStepLR; the CosineRestart values from
mmcv's CosineRestartLrUpdaterHook formula (mmcv is not installed; it is
written out below and checked against torch's CosineAnnealingWarmRestarts
where both apply)."""
import math
import os

import torch

import st

STEPS = 6
ITERS = 40


def optimizer_case(out, name, make, hparams, missing, gen):
    """missing: set of (param index, step) with grad None."""
    p = [torch.randn(4, 3, generator=gen), torch.randn(5, generator=gen)]
    params = [x.clone().requires_grad_(True) for x in p]
    opt = make(params)
    out[f"{name}.hparams"] = torch.tensor(hparams, dtype=torch.float32)
    for i, x in enumerate(params):
        out[f"{name}.p{i}.init"] = x.detach().clone()
    for k in range(1, STEPS + 1):
        for i, x in enumerate(params):
            if (i, k) in missing:
                x.grad = None
            else:
                g = torch.randn(x.shape, generator=gen) * (0.5 + k)
                x.grad = g
                out[f"{name}.p{i}.grad.s{k}"] = g.clone()
        opt.step()
        for i, x in enumerate(params):
            out[f"{name}.p{i}.after.s{k}"] = x.detach().clone()


def annealing_cos(start, end, factor, weight=1.0):
    return end + 0.5 * weight * (start - end) * (math.cos(math.pi * factor) + 1)


def cosine_restart_lr(it, base_lr, periods, weights, min_lr):
    """mmcv CosineRestartLrUpdaterHook.get_lr with by_epoch=False."""
    cumulative = [sum(periods[0:i + 1]) for i in range(len(periods))]
    idx = None
    for i, c in enumerate(cumulative):
        if it < c:
            idx = i
            break
    if idx is None:  # mmcv raises here; duet holds the end of the last period
        return min_lr
    nearest_restart = 0 if idx == 0 else cumulative[idx - 1]
    alpha = min((it - nearest_restart) / periods[idx], 1)
    return annealing_cos(base_lr, min_lr, alpha, weights[idx])


def schedules(out):
    # Step: torch's MultiStepLR after `it` scheduler steps.
    milestones, gamma = [5, 12, 30], 0.5
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=gamma)
    lrs = []
    for _ in range(ITERS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    out["sched_step.milestones"] = torch.tensor(milestones, dtype=torch.float32)
    out["sched_step.gamma"] = torch.tensor([gamma])
    out["sched_step.lr"] = torch.tensor(lrs)

    # The mmcv formula agrees with torch's warm restarts for equal periods
    # and unit weights.
    opt = torch.optim.SGD([w], lr=1.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=10, eta_min=0.01)
    for it in range(ITERS):
        a = opt.param_groups[0]["lr"]
        b = cosine_restart_lr(it, 1.0, [10, 10, 10, 10], [1, 1, 1, 1], 0.01)
        assert abs(a - b) < 1e-9, (it, a, b)
        opt.step()
        sched.step()

    periods, weights, min_lr = [7, 13, 15], [1.0, 0.5, 0.25], 1e-3
    out["sched_cos.periods"] = torch.tensor(periods, dtype=torch.float32)
    out["sched_cos.weights"] = torch.tensor(weights)
    out["sched_cos.min_lr"] = torch.tensor([min_lr])
    out["sched_cos.lr"] = torch.tensor(
        [cosine_restart_lr(it, 1.0, periods, weights, min_lr) for it in range(ITERS)])


def main(outdir):
    gen = torch.Generator().manual_seed(1202)
    out = {}
    optimizer_case(out, "adam_a", lambda ps: torch.optim.Adam(ps, lr=1e-2),
                   [1e-2, 0.9, 0.999, 1e-8, 0.0], set(), gen)
    optimizer_case(out, "adam_b",
                   lambda ps: torch.optim.Adam(ps, lr=2e-3, betas=(0.5, 0.99), eps=1e-6,
                                               weight_decay=0.1),
                   [2e-3, 0.5, 0.99, 1e-6, 0.1], {(1, 1), (1, 2), (0, 4)}, gen)
    optimizer_case(out, "sgd_a",
                   lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                              weight_decay=1e-2),
                   [0.1, 0.9, 0.1, 1e-2, 0.0], {(1, 1), (1, 2), (0, 4)}, gen)
    optimizer_case(out, "sgd_b",
                   lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True),
                   [0.05, 0.8, 0.0, 0.0, 1.0], set(), gen)
    optimizer_case(out, "sgd_c", lambda ps: torch.optim.SGD(ps, lr=0.05),
                   [0.05, 0.0, 0.0, 0.0, 0.0], set(), gen)
    schedules(out)
    st.save(out, os.path.join(outdir, "nn.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
