"""PyTorch reference for CycleGAN's train_step (cyclegan.safetensors): the
model written from MMEditing 0.x's mmedit/models/synthesizers/cycle_gan.py
and GANImageBuffer (mmedit/models/common/generation_model_utils.py) over
the networks of mmedit_gan_torch.py, tiny: ResnetGenerator(3, 3, base 4,
1 block, IN), PatchDiscriminator(3, base 4, num_conv 2, IN), lsgan, cycle
L1 weight 10, identity L1 weight 0.5, image pools of 2 images whose draws
replay duet's rng (seed 2024, stream 0) in place of np.random, Adam lr 2e-4
betas (0.5, 0.999) for both containers; two steps on one batch of two
unpaired 32x32 images per domain, in float64 from float32 weights. The
discriminator step comes first (one backward per discriminator), then the
generator step through the outputs computed before the discriminators were
updated, as MMEditing 0.x's train_step writes it.

Keys: init.<state>, img_a, img_b; for step s in 1, 2: log<s>.<key>,
grad<s>.<param> (the gradient each update used), step<s>.<state>,
pool<s>.a and pool<s>.b (the pools' images after the step)."""
import os

import torch
import torch.nn as nn

import mmedit_gan_torch as mg
import st
from duet_rng import DuetRng

POOL_SEED = 2024


class GANImageBuffer:
    """MMEditing's GANImageBuffer, with duet's rng for np.random."""

    def __init__(self, buffer_size, rng, buffer_ratio=0.5):
        self.buffer_size = buffer_size
        self.img_num = 0
        self.image_buffer = []
        self.buffer_ratio = buffer_ratio
        self.rng = rng
        self.swaps = self.keeps = 0

    def query(self, images):
        if self.buffer_size == 0:
            return images
        return_images = []
        for image in images:
            image = torch.unsqueeze(image.data, 0)
            if self.img_num < self.buffer_size:
                self.img_num = self.img_num + 1
                self.image_buffer.append(image)
                return_images.append(image)
            else:
                use_buffer = self.rng.uniform() < self.buffer_ratio
                if use_buffer:
                    random_id = self.rng.int_range(0, self.buffer_size - 1)
                    image_tmp = self.image_buffer[random_id].clone()
                    self.image_buffer[random_id] = image
                    return_images.append(image_tmp)
                    self.swaps += 1
                else:
                    return_images.append(image)
                    self.keeps += 1
        return torch.cat(return_images, 0)


class GANLoss(nn.Module):
    """MMEditing's GANLoss, gan_type 'lsgan', loss_weight 1."""

    def forward(self, input, target_is_real, is_disc=False):
        target = input.new_ones(input.size()) * (1.0 if target_is_real else 0.0)
        return nn.functional.mse_loss(input, target)


class L1Loss(nn.Module):
    def __init__(self, loss_weight):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred, target):
        return self.loss_weight * nn.functional.l1_loss(pred, target)


def set_requires_grad(net, requires_grad):
    for p in net.parameters():
        p.requires_grad = requires_grad


class CycleGAN(nn.Module):
    def __init__(self, buffer_size=2):
        super().__init__()
        self.generators = nn.ModuleDict()
        self.discriminators = nn.ModuleDict()
        for k in ('a', 'b'):
            self.generators[k] = mg.ResnetGenerator(3, 3, base_channels=4, num_blocks=1)
            mg.generation_init_weights(self.generators[k], 0.02)
        for k in ('a', 'b'):
            self.discriminators[k] = mg.PatchDiscriminator(3, base_channels=4, num_conv=2,
                                                           norm_cfg=dict(type='IN'))
            mg.generation_init_weights(self.discriminators[k], 0.02)
        rng = DuetRng(POOL_SEED, 0)  # one rng for both pools, as np.random is
        self.image_buffers = dict(a=GANImageBuffer(buffer_size, rng),
                                  b=GANImageBuffer(buffer_size, rng))
        self.gan_loss = GANLoss()
        self.cycle_loss = L1Loss(10.0)
        self.id_loss = L1Loss(0.5)
        self.disc_steps = 1
        self.disc_init_steps = 0
        self.step_counter = 0

    @staticmethod
    def parse_losses(losses):
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        log_vars['loss'] = loss
        return loss, {k: v.item() for k, v in log_vars.items()}

    def forward_train(self, real_a, real_b):
        generators = self.generators
        fake_b = generators['a'](real_a)
        rec_a = generators['b'](fake_b)
        fake_a = generators['b'](real_b)
        rec_b = generators['a'](fake_a)
        return dict(real_a=real_a, fake_b=fake_b, rec_a=rec_a, real_b=real_b, fake_a=fake_a,
                    rec_b=rec_b)

    def backward_discriminators(self, outputs):
        discriminators = self.discriminators
        log_vars_d = dict()
        losses = dict()
        fake_b = self.image_buffers['b'].query(outputs['fake_b'])
        fake_pred = discriminators['a'](fake_b.detach())
        losses['loss_gan_d_a_fake'] = self.gan_loss(fake_pred, target_is_real=False, is_disc=True)
        real_pred = discriminators['a'](outputs['real_b'])
        losses['loss_gan_d_a_real'] = self.gan_loss(real_pred, target_is_real=True, is_disc=True)
        loss_d_a, log_vars_d_a = self.parse_losses(losses)
        loss_d_a *= 0.5
        loss_d_a.backward()
        log_vars_d['loss_gan_d_a'] = log_vars_d_a['loss'] * 0.5

        losses = dict()
        fake_a = self.image_buffers['a'].query(outputs['fake_a'])
        fake_pred = discriminators['b'](fake_a.detach())
        losses['loss_gan_d_b_fake'] = self.gan_loss(fake_pred, target_is_real=False, is_disc=True)
        real_pred = discriminators['b'](outputs['real_a'])
        losses['loss_gan_d_b_real'] = self.gan_loss(real_pred, target_is_real=True, is_disc=True)
        loss_d_b, log_vars_d_b = self.parse_losses(losses)
        loss_d_b *= 0.5
        loss_d_b.backward()
        log_vars_d['loss_gan_d_b'] = log_vars_d_b['loss'] * 0.5
        return log_vars_d

    def backward_generators(self, outputs):
        generators = self.generators
        discriminators = self.discriminators
        losses = dict()
        if self.id_loss is not None and self.id_loss.loss_weight > 0:
            id_a = generators['a'](outputs['real_b'])
            losses['loss_id_a'] = self.id_loss(id_a, outputs['real_b']) * \
                self.cycle_loss.loss_weight
            id_b = generators['b'](outputs['real_a'])
            losses['loss_id_b'] = self.id_loss(id_b, outputs['real_a']) * \
                self.cycle_loss.loss_weight
        fake_pred = discriminators['a'](outputs['fake_b'])
        losses['loss_gan_g_a'] = self.gan_loss(fake_pred, target_is_real=True, is_disc=False)
        fake_pred = discriminators['b'](outputs['fake_a'])
        losses['loss_gan_g_b'] = self.gan_loss(fake_pred, target_is_real=True, is_disc=False)
        losses['loss_cycle_a'] = self.cycle_loss(outputs['rec_a'], outputs['real_a'])
        losses['loss_cycle_b'] = self.cycle_loss(outputs['rec_b'], outputs['real_b'])
        loss_g, log_vars_g = self.parse_losses(losses)
        loss_g.backward()
        return log_vars_g

    def train_step(self, data_batch, optimizer, grads):
        outputs = self.forward_train(data_batch['img_a'], data_batch['img_b'])
        log_vars = dict()
        # discriminators
        set_requires_grad(self.discriminators, True)
        optimizer['discriminators'].zero_grad()
        log_vars.update(self.backward_discriminators(outputs=outputs))
        grads.update({f"discriminators.{k}": p.grad.clone()
                      for k, p in self.discriminators.named_parameters()})
        optimizer['discriminators'].step()
        # generators, no updates to discriminator parameters.
        if (self.step_counter % self.disc_steps == 0
                and self.step_counter >= self.disc_init_steps):
            set_requires_grad(self.discriminators, False)
            optimizer['generators'].zero_grad()
            log_vars.update(self.backward_generators(outputs=outputs))
            grads.update({f"generators.{k}": p.grad.clone()
                          for k, p in self.generators.named_parameters()})
            optimizer['generators'].step()
        self.step_counter += 1
        log_vars.pop('loss', None)
        return log_vars


def main(outdir):
    torch.manual_seed(20261207)
    model = CycleGAN()
    model.train()
    d = {f"init.{k}": v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(9)
    img_a = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    img_b = (torch.rand(2, 3, 32, 32, generator=g) * 2 - 1) * 0.5
    d["img_a"], d["img_b"] = img_a, img_b
    model.double()
    opt = {name: torch.optim.Adam(getattr(model, name).parameters(), lr=2e-4,
                                  betas=(0.5, 0.999))
           for name in ('generators', 'discriminators')}
    batch = {'img_a': img_a.double(), 'img_b': img_b.double()}
    for step in (1, 2):
        grads = {}
        log = model.train_step(batch, opt, grads)
        for k, v in log.items():
            d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
        for k, v in grads.items():
            d[f"grad{step}.{k}"] = v
        for k, v in model.state_dict().items():
            d[f"step{step}.{k}"] = v.clone()
        for k in ('a', 'b'):
            d[f"pool{step}.{k}"] = torch.cat(model.image_buffers[k].image_buffer, 0)
    bufs = model.image_buffers
    # The second step must both swap and keep somewhere, or the test would
    # not exercise the pool's random branch.
    assert bufs['a'].swaps + bufs['b'].swaps > 0 and bufs['a'].keeps + bufs['b'].keeps > 0, \
        (bufs['a'].swaps, bufs['b'].swaps, bufs['a'].keeps, bufs['b'].keeps)
    st.save(d, os.path.join(outdir, "cyclegan.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
