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
interp (<case>.grad_input.<name>)."""
import os

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


def main(outdir):
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
        a = alpha.view(2, 1, 1, 1)
        interp = (a * real + (1.0 - a) * fake).requires_grad_(True)
        score = disc(interp)
        grad = autograd.grad(score, interp, torch.ones_like(score), create_graph=True,
                             retain_graph=True, only_inputs=True)[0]
        if m is not None:
            grad = grad * m
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        if m is not None:
            penalty = penalty / m.mean()
        penalty = penalty * 10.0
        pred_real = disc(r)
        pred_fake = disc(f)
        total = -pred_real.mean() + pred_fake.mean() + penalty + 0.001 * (pred_real ** 2).mean()
        total.backward()
        d[f"{case}.penalty"] = penalty.detach().reshape(1)
        d[f"{case}.total"] = total.detach().reshape(1)
        for name, p in disc.named_parameters():
            d[f"{case}.grad.{name}"] = p.grad.clone()
        d[f"{case}.grad_input.real"] = r.grad.clone()
        d[f"{case}.grad_input.fake"] = f.grad.clone()
        d[f"{case}.grad_input.interp"] = interp.grad.clone()
    st.save(d, os.path.join(outdir, "gradient_penalty.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
