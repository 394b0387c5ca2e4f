"""PyTorch reference for WGAN-GP's gradient penalty and a DeepFillv1-style
discriminator step (mmedit/models/inpaintors/deepfillv1.py's train_step,
losses of mmedit/models/losses/gan_loss.py): gradient_penalty.safetensors.

The discriminator, TinyDisc of tests/testutil_gan.c: conv1 Conv2d(3, 4, 5,
stride 2, padding 2) + ELU, conv2 Conv2d(4, 8, 5, stride 2, padding 2) +
ELU, flatten, fc Linear(8*2*2, 1), LeakyReLU(0.2); input (2, 3, 8, 8).
Its parameters init.<name>, real, fake, mask (2, 1, 8, 8) of 0/1 and alpha
(2). For each case (nomask, mask), with interp = alpha real + (1 - alpha)
fake a new leaf:

  g = autograd.grad(disc(interp), interp, ones, create_graph=True)
  [g = g * mask]
  penalty = 10 * mean((g.norm(2, dim=1) - 1)^2) [/ mean(mask)]
  total = -mean(disc(real)) + mean(disc(fake)) + penalty
          + 0.001 * mean(disc(real)^2)                 (DiscShiftLoss)

<case>.penalty, <case>.total, and after total.backward(): the gradient of
every parameter (<case>.grad.<name>) and of the inputs real, fake and
interp (<case>.grad_input.<name>).

The penalty and the shift loss are MMEditing's own GradientPenaltyLoss and
DiscShiftLoss when the mmedit venv (scripts/make-mmedit-venv.sh;
DUET_MMEDIT_VENV or ~/.cache/duet/mmedit-venv) has gan_loss.py: its one
import beyond torch, `from ..registry import LOSSES` (a registering
decorator), is given a stand-in package, and alpha is seeded so that its
torch.rand(N, 1, 1, 1) draws the fixture's alpha. Without the venv, the
formula below; with it, both are computed and must agree.
"mmedit" (1 or 0) says which one wrote the file."""
import glob
import importlib.util
import os
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

import st


class TinyDisc(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(4, 8, 5, stride=2, padding=2)
        self.fc = nn.Linear(8 * 2 * 2, 1)

    def forward(self, x):
        h = F.elu(self.conv1(x))
        h = F.elu(self.conv2(h))
        return F.leaky_relu(self.fc(h.flatten(1)), 0.2)


def mmedit_gan_loss():
    venv = os.environ.get("DUET_MMEDIT_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "duet", "mmedit-venv")
    hits = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "mmedit", "models",
                                  "losses", "gan_loss.py"))
    if not hits:
        return None
    for name in ("duet_mmedit_stub", "duet_mmedit_stub.losses"):
        pkg = types.ModuleType(name)
        pkg.__path__ = []
        sys.modules[name] = pkg
    reg = types.ModuleType("duet_mmedit_stub.registry")
    reg.LOSSES = types.SimpleNamespace(register_module=lambda *a, **k: (lambda cls: cls))
    sys.modules["duet_mmedit_stub.registry"] = reg
    spec = importlib.util.spec_from_file_location("duet_mmedit_stub.losses.gan_loss", hits[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def own_penalty(disc, real, fake, alpha, m):
    a = alpha.view(-1, 1, 1, 1)
    interp = (a * real + (1.0 - a) * fake).requires_grad_(True)
    score = disc(interp)
    grad = autograd.grad(score, interp, torch.ones_like(score), create_graph=True,
                         retain_graph=True, only_inputs=True)[0]
    if m is not None:
        grad = grad * m
    penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    if m is not None:
        penalty = penalty / m.mean()
    return penalty * 10.0


def main(outdir):
    gl = mmedit_gan_loss()
    g = torch.Generator().manual_seed(31)
    disc = TinyDisc()
    d = {}
    with torch.no_grad():
        for name, p in disc.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            d[f"init.{name}"] = p.detach().clone()
    real = torch.randn(2, 3, 8, 8, generator=g)
    fake = torch.randn(2, 3, 8, 8, generator=g)
    mask = (torch.rand(2, 1, 8, 8, generator=g) > 0.5).float()
    alpha = torch.rand(2, generator=g)
    d.update(real=real, fake=fake, mask=mask, alpha=alpha)
    for case, m in (("nomask", None), ("mask", mask)):
        disc.zero_grad()
        r = real.clone().requires_grad_(True)
        f = fake.clone().requires_grad_(True)
        # interp's gradient: a hook on the leaf the penalty makes.
        seen = {}
        orig_pre = disc.forward

        def forward(x, _seen=seen):
            if x.requires_grad and x.grad_fn is None and "interp" not in _seen:
                _seen["interp"] = x
            return orig_pre(x)
        disc.forward = forward
        if gl is not None:
            torch.manual_seed(5)
            drawn = torch.rand(2, 1, 1, 1)
            # The fixture's alpha is what MMEditing's draw gives.
            alpha_case = drawn.view(2)
            torch.manual_seed(5)
            penalty = gl.GradientPenaltyLoss(loss_weight=10.0)(disc, real, fake, mask=m)
            check = own_penalty(disc, real, fake, alpha_case, m)
            assert torch.allclose(penalty, check, rtol=1e-5, atol=1e-6), (penalty, check)
            shift = gl.DiscShiftLoss(loss_weight=0.001)
        else:
            alpha_case = alpha
            penalty = own_penalty(disc, real, fake, alpha_case, m)
            shift = lambda p: 0.001 * (p ** 2).mean()  # noqa: E731
        disc.forward = orig_pre
        interp = seen["interp"]
        pred_real = disc(r)
        pred_fake = disc(f)
        total = -pred_real.mean() + pred_fake.mean() + penalty + shift(pred_real)
        disc.zero_grad()
        total.backward()
        d[f"{case}.alpha"] = alpha_case.clone()
        d[f"{case}.penalty"] = penalty.detach().reshape(1)
        d[f"{case}.total"] = total.detach().reshape(1)
        for name, p in disc.named_parameters():
            d[f"{case}.grad.{name}"] = p.grad.clone()
        d[f"{case}.grad_input.real"] = r.grad.clone()
        d[f"{case}.grad_input.fake"] = f.grad.clone()
        d[f"{case}.grad_input.interp"] = interp.grad.clone()
    d["mmedit"] = torch.tensor([1.0 if gl is not None else 0.0])
    st.save(d, os.path.join(outdir, "gradient_penalty.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
