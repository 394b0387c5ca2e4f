"""PyTorch reference for SRGAN's train_step, read by tests/unit/test_ref_srgan.c.

The networks and losses are MMEditing's (mmedit/models/...: MSRResNet,
ModifiedVGG and PerceptualVGG from mmedit_torch.py; PerceptualLoss, GANLoss,
L1Loss written out here), and train_step is
mmedit/models/restorers/srgan.py's, line by line, so the order of operations
(and of BatchNorm running-stat updates) is MMEditing's. A small config:
MSRResNet mid 16, 2 blocks, x4; ModifiedVGG mid 8 on 32x32 inputs; a tiny
VGG-style perceptual network (cfg [8, 8, M, 16, 16], layer '7' = the last
conv before its ReLU); Adam lr 1e-4 for both optimizers (MMEditing's betas
and eps). The gradients are saved too: the C test compares them directly, and
uses them to recognise the few elements whose gradient is at float32 noise
level, where Adam's first steps (about lr * g / |g|) are free to go either
way.

srgan.safetensors:
  init.<name>   the state dict before training (MMEditing names)
  lq, gt        the batch (4, 3, 8, 8) and (4, 3, 32, 32): 4 samples, so that
                the last BatchNorm (1x1) is not the degenerate 2-value case
  step1.<name>, step2.<name>   the state dict after train_step 1 and 2
  grad1.<name>, grad2.<name>  each trainable parameter's .grad after step
                1 and 2
  log1.<key>, log2.<key>       MMEditing's log_vars of each step (plus the
                               real/fake logit means duet logs)
"""
import os

import torch
import torch.nn as nn

import st
from mmedit_torch import ModifiedVGG, MSRResNet, PerceptualVGG


class PerceptualLoss(nn.Module):
    def __init__(self, cfg, layer_weights, perceptual_weight=1.0, norm_img=False):
        super().__init__()
        self.norm_img = norm_img
        self.perceptual_weight = perceptual_weight
        self.layer_weights = layer_weights
        self.vgg = PerceptualVGG(cfg, list(layer_weights.keys()))
        self.criterion = nn.L1Loss()

    def forward(self, x, gt):
        if self.norm_img:
            x = (x + 1.) * 0.5
            gt = (gt + 1.) * 0.5
        x_features = self.vgg(x)
        gt_features = self.vgg(gt.detach())
        percep_loss = 0
        for k in x_features.keys():
            percep_loss += self.criterion(x_features[k], gt_features[k]) * self.layer_weights[k]
        percep_loss *= self.perceptual_weight
        return percep_loss, None


class GANLoss(nn.Module):
    def __init__(self, loss_weight):
        super().__init__()
        self.loss_weight = loss_weight
        self.loss = nn.BCEWithLogitsLoss()

    def forward(self, input, target_is_real, is_disc=False):
        target = input.new_ones(input.size()) * (1.0 if target_is_real else 0.0)
        loss = self.loss(input, target)
        return loss if is_disc else loss * self.loss_weight


def set_requires_grad(nets, requires_grad=False):
    for p in nets.parameters():
        p.requires_grad = requires_grad


class SRGAN(nn.Module):
    def __init__(self):
        super().__init__()
        # PyTorch's default init: the C test loads init.* by name anyway.
        self.generator = MSRResNet(3, 3, mid_channels=16, num_blocks=2, upscale_factor=4,
                                   mmedit_init=False)
        self.discriminator = ModifiedVGG(3, 8, input_size=32)
        self.gan_loss = GANLoss(5e-3)
        self.pixel_loss = nn.L1Loss()
        self.pixel_weight = 1e-2
        self.perceptual_loss = PerceptualLoss([8, 8, 'M', 16, 16], {'7': 1.0})
        self.disc_steps = 1
        self.disc_init_steps = 0
        self.step_counter = 0

    def parse_losses(self, losses):
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(_value for _key, _value in log_vars.items() if 'loss' in _key)
        log_vars['loss'] = loss
        return loss, {k: v.item() for k, v in log_vars.items()}

    def train_step(self, data_batch, optimizer):
        lq = data_batch['lq']
        gt = data_batch['gt']
        fake_g_output = self.generator(lq)
        losses = dict()
        log_vars = dict()
        set_requires_grad(self.discriminator, False)
        if (self.step_counter % self.disc_steps == 0
                and self.step_counter >= self.disc_init_steps):
            losses['loss_pix'] = self.pixel_loss(fake_g_output, gt) * self.pixel_weight
            loss_percep, loss_style = self.perceptual_loss(fake_g_output, gt)
            losses['loss_perceptual'] = loss_percep
            fake_g_pred = self.discriminator(fake_g_output)
            losses['loss_gan'] = self.gan_loss(fake_g_pred, target_is_real=True, is_disc=False)
            loss_g, log_vars_g = self.parse_losses(losses)
            log_vars.update(log_vars_g)
            optimizer['generator'].zero_grad()
            loss_g.backward()
            optimizer['generator'].step()
        set_requires_grad(self.discriminator, True)
        real_d_pred = self.discriminator(gt)
        loss_d_real = self.gan_loss(real_d_pred, target_is_real=True, is_disc=True)
        loss_d, log_vars_d = self.parse_losses(dict(loss_d_real=loss_d_real))
        optimizer['discriminator'].zero_grad()
        loss_d.backward()
        log_vars.update(log_vars_d)
        fake_d_pred = self.discriminator(fake_g_output.detach())
        loss_d_fake = self.gan_loss(fake_d_pred, target_is_real=False, is_disc=True)
        loss_d, log_vars_d = self.parse_losses(dict(loss_d_fake=loss_d_fake))
        loss_d.backward()
        log_vars.update(log_vars_d)
        optimizer['discriminator'].step()
        self.step_counter += 1
        log_vars.pop('loss')
        log_vars['real_logit_mean'] = real_d_pred.mean().item()
        log_vars['fake_logit_mean'] = fake_d_pred.mean().item()
        return log_vars


def main(outdir):
    torch.manual_seed(20261202)
    model = SRGAN()
    model.train()
    g = torch.Generator().manual_seed(7)
    lq = torch.rand(4, 3, 8, 8, generator=g)
    gt = torch.rand(4, 3, 32, 32, generator=g)
    d = {f"init.{k}": v.clone() for k, v in model.state_dict().items()}
    d["lq"], d["gt"] = lq, gt
    opt = {
        'generator': torch.optim.Adam(model.generator.parameters(), lr=1e-4, betas=(0.9, 0.999)),
        'discriminator': torch.optim.Adam(model.discriminator.parameters(), lr=1e-4,
                                          betas=(0.9, 0.999)),
    }
    for step in (1, 2):
        log = model.train_step({'lq': lq, 'gt': gt}, opt)
        for k, v in model.state_dict().items():
            d[f"step{step}.{k}"] = v.clone()
        for k, v in log.items():
            d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
        for k, p in model.named_parameters():
            if p.grad is not None:
                d[f"grad{step}.{k}"] = p.grad.clone()
    st.save(d, os.path.join(outdir, "srgan.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
