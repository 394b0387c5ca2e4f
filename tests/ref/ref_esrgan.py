"""PyTorch references for ESRGAN (issue 9), read by tests/unit/test_ref_esrgan.c.

Written from MMEditing 0.x's published code, restated here since MMEditing
is not installed: GANLoss and GaussianBlur (mmedit/models/losses/
gan_loss.py, with the 'smgan' type and its mask), PerceptualLoss with the
style (Gram) term and the criterion switch (perceptual_loss.py), RRDBNet
(mmedit_torch.py, from rrdb_net.py) and ESRGAN.train_step
(mmedit/models/restorers/esrgan.py) line by line.

esrgan_ops.safetensors, one case NAME per op or loss (as ref_ops_functional.py):
  NAME.in<i>, NAME.out, NAME.r (a random upstream gradient),
  NAME.grad<i> = d sum(out * r) / d in<i> for the differentiable inputs.
  nearest2, nearest3             F.interpolate(mode='nearest')
  resize_up, resize_down, resize_one   bilinear, align_corners=True, to a size
  gram                           PerceptualLoss._gram_mat
  sub_group_mean1, sub_group_mean3   a - mean(b), per 1 or 3 groups of samples
  gan.<type>.<real|fake>.<g|d>   GANLoss(type, loss_weight=0.5)(pred, ...)
                                 (smgan: in1 is the mask; gan.smgan_resize.*
                                 a mask of another size)
  percep.<l1|mse>.{percep,style} PerceptualLoss(layer_weights {'2': 0.5,
                                 '7': 1.0}, perceptual_weight 0.7,
                                 style_weight 2.0, norm_img True) on x, gt;
                                 percep.<crit>.init.<name> its VGG weights

esrgan.safetensors: as srgan.safetensors (ref_srgan.py) for ESRGAN with
RRDBNet(mid 8, 2 blocks, growth 4), ModifiedVGG(mid 8, 32x32), the tiny
perceptual network (layer '7', style_weight 0 as MMEditing's ESRGAN config),
L1 1e-2, vanilla GAN 5e-3, Adam 1e-4: init.*, lq, gt, step<k>.*, grad<k>.*,
log<k>.* for k = 1, 2 (the C test starts step 2 from step1.*).
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import conv2d

import st
from mmedit_torch import ModifiedVGG, PerceptualVGG, RRDBNet


# ---- mmedit/models/losses/gan_loss.py --------------------------------------------

class GaussianBlur(nn.Module):
    def __init__(self, kernel_size=(71, 71), sigma=(10.0, 10.0)):
        super().__init__()
        self.kernel_size = kernel_size
        self.sigma = sigma
        self.padding = tuple((ks - 1) // 2 for ks in kernel_size)
        kx = self.gaussian(kernel_size[0], sigma[0])
        ky = self.gaussian(kernel_size[1], sigma[1])
        self.kernel = torch.matmul(kx.unsqueeze(-1), ky.unsqueeze(-1).t())

    @staticmethod
    def gaussian(kernel_size, sigma):
        def gauss_arg(x):
            return -(x - kernel_size // 2)**2 / float(2 * sigma**2)
        gauss = torch.stack([torch.exp(torch.tensor(gauss_arg(x))) for x in range(kernel_size)])
        return gauss / gauss.sum()

    def forward(self, x):
        _, c, _, _ = x.shape
        kernel = self.kernel.to(x.device).to(x.dtype).repeat(c, 1, 1, 1)
        return conv2d(x, kernel, padding=self.padding, stride=1, groups=c)


class GANLoss(nn.Module):
    def __init__(self, gan_type, real_label_val=1.0, fake_label_val=0.0, loss_weight=1.0):
        super().__init__()
        self.gan_type = gan_type
        self.real_label_val = real_label_val
        self.fake_label_val = fake_label_val
        self.loss_weight = loss_weight
        if self.gan_type == 'smgan':
            self.gaussian_blur = GaussianBlur()
        if self.gan_type == 'vanilla':
            self.loss = nn.BCEWithLogitsLoss()
        elif self.gan_type == 'lsgan' or self.gan_type == 'smgan':
            self.loss = nn.MSELoss()
        elif self.gan_type == 'wgan':
            self.loss = self._wgan_loss
        elif self.gan_type == 'hinge':
            self.loss = nn.ReLU()
        else:
            raise NotImplementedError(f'GAN type {self.gan_type} is not implemented.')

    def _wgan_loss(self, input, target):
        return -input.mean() if target else input.mean()

    def get_target_label(self, input, target_is_real):
        if self.gan_type == 'wgan':
            return target_is_real
        target_val = (self.real_label_val if target_is_real else self.fake_label_val)
        return input.new_ones(input.size()) * target_val

    def forward(self, input, target_is_real, is_disc=False, mask=None):
        target_label = self.get_target_label(input, target_is_real)
        if self.gan_type == 'hinge':
            if is_disc:
                input = -input if target_is_real else input
                loss = self.loss(1 + input).mean()
            else:
                loss = -input.mean()
        elif self.gan_type == 'smgan':
            input_height, input_width = input.shape[2:]
            mask_height, mask_width = mask.shape[2:]
            if input_height != mask_height or input_width != mask_width:
                input = F.interpolate(input, size=(mask_height, mask_width), mode='bilinear',
                                      align_corners=True)
                target_label = self.get_target_label(input, target_is_real)
            if is_disc:
                if target_is_real:
                    target_label = target_label
                else:
                    target_label = self.gaussian_blur(mask).detach()
                loss = self.loss(input, target_label)
            else:
                loss = self.loss(input, target_label) * mask / mask.mean()
                loss = loss.mean()
        else:
            loss = self.loss(input, target_label)
        return loss if is_disc else loss * self.loss_weight


# ---- mmedit/models/losses/perceptual_loss.py ---------------------------------------

class PerceptualLoss(nn.Module):
    def __init__(self, cfg, layer_weights, perceptual_weight=1.0, style_weight=1.0,
                 norm_img=True, criterion='l1'):
        super().__init__()
        self.norm_img = norm_img
        self.perceptual_weight = perceptual_weight
        self.style_weight = style_weight
        self.layer_weights = layer_weights
        self.vgg = PerceptualVGG(cfg, list(layer_weights.keys()))
        criterion = criterion.lower()
        if criterion == 'l1':
            self.criterion = torch.nn.L1Loss()
        elif criterion == 'mse':
            self.criterion = torch.nn.MSELoss()
        else:
            raise NotImplementedError(criterion)

    def forward(self, x, gt):
        if self.norm_img:
            x = (x + 1.) * 0.5
            gt = (gt + 1.) * 0.5
        x_features = self.vgg(x)
        gt_features = self.vgg(gt.detach())
        if self.perceptual_weight > 0:
            percep_loss = 0
            for k in x_features.keys():
                percep_loss += self.criterion(x_features[k], gt_features[k]) * \
                    self.layer_weights[k]
            percep_loss *= self.perceptual_weight
        else:
            percep_loss = None
        if self.style_weight > 0:
            style_loss = 0
            for k in x_features.keys():
                style_loss += self.criterion(self._gram_mat(x_features[k]),
                                             self._gram_mat(gt_features[k])) * \
                    self.layer_weights[k]
            style_loss *= self.style_weight
        else:
            style_loss = None
        return percep_loss, style_loss

    def _gram_mat(self, x):
        (n, c, h, w) = x.size()
        features = x.view(n, c, w * h)
        features_t = features.transpose(1, 2)
        gram = features.bmm(features_t) / (c * h * w)
        return gram


# ---- mmedit/models/restorers/esrgan.py ----------------------------------------------

def set_requires_grad(nets, requires_grad=False):
    for p in nets.parameters():
        p.requires_grad = requires_grad


class ESRGAN(nn.Module):
    def __init__(self):
        super().__init__()
        # PyTorch's default init: the C test loads init.* by name anyway.
        self.generator = RRDBNet(3, 3, mid_channels=8, num_blocks=2, growth_channels=4,
                                 mmedit_init=False)
        self.discriminator = ModifiedVGG(3, 8, input_size=32)
        self.gan_loss = GANLoss('vanilla', loss_weight=5e-3)
        self.pixel_loss = nn.L1Loss()
        self.pixel_weight = 1e-2
        self.perceptual_loss = PerceptualLoss([8, 8, 'M', 16, 16], {'7': 1.0},
                                              style_weight=0, norm_img=False)
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
            if loss_percep is not None:
                losses['loss_perceptual'] = loss_percep
            if loss_style is not None:
                losses['loss_style'] = loss_style
            real_d_pred = self.discriminator(gt).detach()
            fake_g_pred = self.discriminator(fake_g_output)
            loss_gan_fake = self.gan_loss(fake_g_pred - torch.mean(real_d_pred),
                                          target_is_real=True, is_disc=False)
            loss_gan_real = self.gan_loss(real_d_pred - torch.mean(fake_g_pred),
                                          target_is_real=False, is_disc=False)
            losses['loss_gan'] = (loss_gan_fake + loss_gan_real) / 2
            loss_g, log_vars_g = self.parse_losses(losses)
            log_vars.update(log_vars_g)
            optimizer['generator'].zero_grad()
            loss_g.backward()
            optimizer['generator'].step()
        set_requires_grad(self.discriminator, True)
        fake_d_pred = self.discriminator(fake_g_output).detach()
        real_d_pred = self.discriminator(gt)
        loss_d_real = self.gan_loss(real_d_pred - torch.mean(fake_d_pred), target_is_real=True,
                                    is_disc=True) * 0.5
        loss_d, log_vars_d = self.parse_losses(dict(loss_d_real=loss_d_real))
        optimizer['discriminator'].zero_grad()
        loss_d.backward()
        log_vars.update(log_vars_d)
        fake_d_pred = self.discriminator(fake_g_output.detach())
        loss_d_fake = self.gan_loss(fake_d_pred - torch.mean(real_d_pred.detach()),
                                    target_is_real=False, is_disc=True) * 0.5
        loss_d, log_vars_d = self.parse_losses(dict(loss_d_fake=loss_d_fake))
        loss_d.backward()
        log_vars.update(log_vars_d)
        optimizer['discriminator'].step()
        self.step_counter += 1
        log_vars.pop('loss')
        return log_vars


# ---- the reference files -------------------------------------------------------------

def case(out, name, fn, inputs, grad_mask, gen):
    xs = [x.clone().requires_grad_(g) for x, g in zip(inputs, grad_mask)]
    y = fn(*xs)
    if y.dim() == 0:
        y = y.reshape(1)
    r = torch.randn(y.shape, generator=gen)
    (y * r).sum().backward()
    for i, x in enumerate(xs):
        out[f"{name}.in{i}"] = x.detach()
        if grad_mask[i]:
            out[f"{name}.grad{i}"] = x.grad
    out[f"{name}.out"] = y.detach()
    out[f"{name}.r"] = r


def ops_and_losses(outdir):
    gen = torch.Generator().manual_seed(20261203)

    def randn(*shape, scale=1.0):
        return torch.randn(shape, generator=gen) * scale

    out = {}
    case(out, "nearest2", lambda x: F.interpolate(x, scale_factor=2, mode='nearest'),
         [randn(2, 3, 4, 5)], [True], gen)
    case(out, "nearest3", lambda x: F.interpolate(x, scale_factor=3, mode='nearest'),
         [randn(1, 2, 3, 2)], [True], gen)
    for name, shape, size in (("resize_up", (2, 2, 4, 5), (7, 9)),
                              ("resize_down", (1, 2, 6, 5), (3, 2)),
                              ("resize_one", (1, 1, 3, 3), (1, 4))):
        case(out, name, lambda x, s=size: F.interpolate(x, size=s, mode='bilinear',
                                                         align_corners=True),
             [randn(*shape)], [True], gen)
    pl = PerceptualLoss([8], {'0': 1.0})
    case(out, "gram", pl._gram_mat, [randn(2, 4, 3, 5)], [True], gen)
    # ESRGAN's pred - torch.mean(other): over the batch (1 group), and per
    # rank's share as MMEditing under DDP computes it (3 groups of 2).
    case(out, "sub_group_mean1", lambda a, b: a - torch.mean(b), [randn(6, 1), randn(6, 1)],
         [True, True], gen)
    case(out, "sub_group_mean3",
         lambda a, b: torch.cat([a[2 * i:2 * i + 2] - torch.mean(b[2 * i:2 * i + 2])
                                 for i in range(3)]),
         [randn(6, 2), randn(6, 2)], [True, True], gen)

    pred = randn(2, 1, 4, 4, scale=2.0)
    mask = (torch.rand((2, 1, 4, 4), generator=gen) > 0.4).float()
    small = randn(2, 1, 3, 3, scale=2.0)
    big_mask = (torch.rand((2, 1, 9, 9), generator=gen) > 0.4).float()
    for t in ("vanilla", "lsgan", "wgan", "hinge", "smgan", "smgan_resize"):
        loss = GANLoss(t.split("_")[0], loss_weight=0.5)
        for real in (True, False):
            for disc in (True, False):
                name = f"gan.{t}.{'real' if real else 'fake'}.{'d' if disc else 'g'}"
                if t == "smgan":
                    case(out, name, lambda p, m, r=real, d=disc: loss(p, r, d, mask=m),
                         [pred, mask], [True, False], gen)
                elif t == "smgan_resize":
                    case(out, name, lambda p, m, r=real, d=disc: loss(p, r, d, mask=m),
                         [small, big_mask], [True, False], gen)
                else:
                    case(out, name, lambda p, r=real, d=disc: loss(p, r, d), [pred], [True],
                         gen)

    x = torch.rand((2, 3, 16, 16), generator=gen) * 2 - 1
    gt = torch.rand((2, 3, 16, 16), generator=gen) * 2 - 1
    for crit in ("l1", "mse"):
        torch.manual_seed(5)
        p = PerceptualLoss([8, 8, 'M', 16, 16], {'2': 0.5, '7': 1.0}, perceptual_weight=0.7,
                           style_weight=2.0, norm_img=True, criterion=crit)
        for k, v in p.state_dict().items():
            out[f"percep.{crit}.init.{k}"] = v.clone()
        case(out, f"percep.{crit}.percep", lambda a, b: p(a, b)[0], [x, gt], [True, False], gen)
        case(out, f"percep.{crit}.style", lambda a, b: p(a, b)[1], [x, gt], [True, False], gen)
    st.save(out, os.path.join(outdir, "esrgan_ops.safetensors"))


def esrgan_run(dtype):
    """Two train_steps in dtype from the same seeded weights and batch."""
    torch.manual_seed(20261204)
    model = ESRGAN().to(dtype)
    model.train()
    g = torch.Generator().manual_seed(9)
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
        log = model.train_step({'lq': lq.to(dtype), 'gt': gt.to(dtype)}, opt)
        for k, v in model.state_dict().items():
            d[f"step{step}.{k}"] = v.clone()
        for k, v in log.items():
            d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
        for k, p in model.named_parameters():
            if p.grad is not None:
                d[f"grad{step}.{k}"] = p.grad.clone()
    return d


def esrgan_steps(outdir):
    st.save(esrgan_run(torch.float32), os.path.join(outdir, "esrgan.safetensors"))


def main(outdir):
    ops_and_losses(outdir)
    esrgan_steps(outdir)


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
