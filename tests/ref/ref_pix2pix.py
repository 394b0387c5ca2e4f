"""PyTorch reference for Pix2Pix's train_step (pix2pix.safetensors): the
model written from MMEditing's mmedit/models/synthesizers/pix2pix.py over the
networks of mmedit_gan_torch.py, tiny: UnetGenerator(3, 3, num_down 6, base
4, BN, dropout from duet's RNG seed 77), PatchDiscriminator(6, base 4,
num_conv 3, BN), vanilla GAN loss, L1 pixel loss weight 100, Adam lr 2e-4
betas (0.5, 0.999) for both, two steps on one batch of two 64x64 pairs,
in float64 from float32 weights.

Keys: init.<state>, img_a, img_b; for step s in 1, 2: log<s>.<key>,
grad<s>.<param> (each parameter's gradient used by that step's update),
step<s>.<state>."""
import os

import torch
import torch.nn as nn

import mmedit_gan_torch as mg
import st
from duet_rng import DuetRng


class GANLoss(nn.Module):
    """MMEditing's GANLoss, gan_type 'vanilla', loss_weight 1."""

    def __init__(self):
        super().__init__()
        self.loss = nn.BCEWithLogitsLoss()

    def forward(self, input, target_is_real, is_disc=False):
        target = input.new_ones(input.size()) * (1.0 if target_is_real else 0.0)
        return self.loss(input, target)


def set_requires_grad(net, requires_grad):
    for p in net.parameters():
        p.requires_grad = requires_grad


class Pix2Pix(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = mg.UnetGenerator(3, 3, num_down=6, base_channels=4, use_dropout=True,
                                          dropout_rng=DuetRng(77, 0))
        self.discriminator = mg.PatchDiscriminator(6, base_channels=4, num_conv=3)
        mg.generation_init_weights(self.generator, 0.02)
        mg.generation_init_weights(self.discriminator, 0.02)
        self.gan_loss = GANLoss()
        self.pixel_loss = nn.L1Loss()
        self.pixel_weight = 100.0
        self.disc_steps = 1
        self.disc_init_steps = 0
        self.step_counter = 0

    @staticmethod
    def parse_losses(losses):
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        log_vars['loss'] = loss
        return loss, {k: v.item() for k, v in log_vars.items()}

    def backward_discriminator(self, outputs):
        losses = dict()
        fake_ab = torch.cat((outputs['real_a'], outputs['fake_b']), 1)
        fake_pred = self.discriminator(fake_ab.detach())
        losses['loss_gan_d_fake'] = self.gan_loss(fake_pred, target_is_real=False, is_disc=True)
        real_ab = torch.cat((outputs['real_a'], outputs['real_b']), 1)
        real_pred = self.discriminator(real_ab)
        losses['loss_gan_d_real'] = self.gan_loss(real_pred, target_is_real=True, is_disc=True)
        loss_d, log_vars_d = self.parse_losses(losses)
        loss_d *= 0.5
        loss_d.backward()
        return log_vars_d

    def backward_generator(self, outputs):
        losses = dict()
        fake_ab = torch.cat((outputs['real_a'], outputs['fake_b']), 1)
        fake_pred = self.discriminator(fake_ab)
        losses['loss_gan_g'] = self.gan_loss(fake_pred, target_is_real=True, is_disc=False)
        losses['loss_pixel'] = self.pixel_loss(outputs['fake_b'],
                                               outputs['real_b']) * self.pixel_weight
        loss_g, log_vars_g = self.parse_losses(losses)
        loss_g.backward()
        return log_vars_g

    def train_step(self, data_batch, optimizer):
        real_a, real_b = data_batch['img_a'], data_batch['img_b']
        fake_b = self.generator(real_a)
        outputs = dict(real_a=real_a, fake_b=fake_b, real_b=real_b)
        log_vars = dict()
        set_requires_grad(self.discriminator, True)
        optimizer['discriminator'].zero_grad()
        log_vars.update(self.backward_discriminator(outputs=outputs))
        optimizer['discriminator'].step()
        if (self.step_counter % self.disc_steps == 0
                and self.step_counter >= self.disc_init_steps):
            set_requires_grad(self.discriminator, False)
            optimizer['generator'].zero_grad()
            log_vars.update(self.backward_generator(outputs=outputs))
            optimizer['generator'].step()
        self.step_counter += 1
        log_vars.pop('loss', None)
        return log_vars


def main(outdir):
    torch.manual_seed(20261206)
    model = Pix2Pix()
    model.train()
    d = {f"init.{k}": v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(8)
    img_a = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    img_b = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    d["img_a"], d["img_b"] = img_a, img_b
    model.double()
    opt = {name: torch.optim.Adam(getattr(model, name).parameters(), lr=2e-4,
                                  betas=(0.5, 0.999))
           for name in ('generator', 'discriminator')}
    batch = {'img_a': img_a.double(), 'img_b': img_b.double()}
    for step in (1, 2):
        log = model.train_step(batch, opt)
        for k, v in log.items():
            d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
        for k, p in model.named_parameters():
            if p.grad is not None:
                d[f"grad{step}.{k}"] = p.grad.clone()
        for k, v in model.state_dict().items():
            d[f"step{step}.{k}"] = v.clone()
    st.save(d, os.path.join(outdir, "pix2pix.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
