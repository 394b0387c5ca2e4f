"""PyTorch reference for BasicRestorer's train_step (basic_restorer.safetensors),
read by tests/unit/test_ref_basic_restorer.c: MMEditing's
mmedit/models/restorers/basic_restorer.py (forward_train, parse_losses,
train_step) over MSRResNet (mmedit_torch.py), tiny: mid 16, 2 blocks, x4;
L1Loss weight 1 (msrresnet_x4c64b16_g1_1000k_div2k.py), Adam lr 2e-4 betas
(0.9, 0.999); two steps on one batch of 4 (8x8 -> 32x32), in float64 from
float32 weights (as ref_pix2pix.py).

Keys: init.<state>, lq, gt; for step s in 1, 2: log<s>.loss_pix and
log<s>.loss (parse_losses' total), grad<s>.<param>, step<s>.<state>."""
import os

import torch
import torch.nn as nn

import st
from mmedit_torch import MSRResNet


class BasicRestorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = MSRResNet(3, 3, mid_channels=16, num_blocks=2, upscale_factor=4)
        self.pixel_loss = nn.L1Loss()

    def train_step(self, data_batch, optimizer):
        output = self.generator(data_batch['lq'])
        losses = dict(loss_pix=self.pixel_loss(output, data_batch['gt']) * 1.0)
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        log_vars['loss'] = loss
        optimizer['generator'].zero_grad()
        loss.backward()
        optimizer['generator'].step()
        return {k: v.item() for k, v in log_vars.items()}


def main(outdir):
    torch.manual_seed(20261223)
    model = BasicRestorer()
    model.train()
    g = torch.Generator().manual_seed(11)
    lq = torch.rand(4, 3, 8, 8, generator=g)
    gt = torch.rand(4, 3, 32, 32, generator=g)
    d = {f"init.{k}": v.clone() for k, v in model.state_dict().items()}
    d["lq"], d["gt"] = lq, gt
    model.double()
    opt = {'generator': torch.optim.Adam(model.generator.parameters(), lr=2e-4,
                                         betas=(0.9, 0.999))}
    batch = {'lq': lq.double(), 'gt': gt.double()}
    for step in (1, 2):
        log = model.train_step(batch, opt)
        for k, v in log.items():
            d[f"log{step}.{k}"] = torch.tensor([v], dtype=torch.float64)
        for k, p in model.named_parameters():
            if p.grad is not None:
                d[f"grad{step}.{k}"] = p.grad.clone()
        for k, v in model.state_dict().items():
            d[f"step{step}.{k}"] = v.clone()
    st.save(d, os.path.join(outdir, "basic_restorer.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
