"""PyTorch references for the networks: networks.safetensors.

The networks are mmedit_torch.py's MSRResNet (MMEditing's init, in-place
activations) and ModifiedVGG, with MMEditing's structure and parameter
names.

For every case NAME:
  NAME.w.<state dict key>     the weights and buffers (the C test loads them
                              strictly by name into duet's network)
  NAME.x, NAME.out            input and output
  NAME.loss                   the loss (MSRResNet: mse_loss(out, NAME.target);
                              ModifiedVGG: BCE-with-logits against label 1)
  NAME.grad.<param name>      every parameter's gradient of that loss
MSRResNet cases also hold NAME.adam5.<param name>: the parameters after five
Adam steps (lr 1e-3, same input and target each step, starting from NAME.w).
ModifiedVGG cases (training-mode BatchNorm, batch 3) hold
NAME.after.<buffer name>: the BN buffers after the forward.

Weights and inputs are drawn in float32; PyTorch then computes in float64
and the results are stored as float32, so the reference carries no float32
rounding of its own (PyTorch's float32 gradients of the batch-3 ModifiedVGG
differ from float64 by up to ~8e-4 of an element's size near zero)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import st
from mmedit_torch import ModifiedVGG, MSRResNet


def save_weights(out, name, net):
    for k, v in net.state_dict().items():
        out[f"{name}.w.{k}"] = v.detach().clone()


def save_grads(out, name, net):
    for k, p in net.named_parameters():
        out[f"{name}.grad.{k}"] = p.grad.detach().clone()


def msr_case(out, name, scale, seed):
    torch.manual_seed(seed)
    net = MSRResNet(3, 3, mid_channels=16, num_blocks=2, upscale_factor=scale)
    net.init_weights()
    # Non-zero biases, so that a bias mix-up cannot hide behind zeros.
    with torch.no_grad():
        for k, p in net.named_parameters():
            if k.endswith(".bias"):
                p.copy_(0.01 * torch.randn(p.shape))
    save_weights(out, name, net)
    x = torch.rand(2, 3, 8, 8)
    target = torch.rand(2, 3, 8 * scale, 8 * scale)
    net.double()
    y = net(x.double())
    loss = F.mse_loss(y, target.double())
    loss.backward()
    out[f"{name}.x"] = x
    out[f"{name}.target"] = target
    out[f"{name}.out"] = y.detach()
    out[f"{name}.loss"] = loss.detach().reshape(1)
    save_grads(out, name, net)

    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(5):
        opt.zero_grad()
        F.mse_loss(net(x.double()), target.double()).backward()
        opt.step()
    for k, p in net.named_parameters():
        out[f"{name}.adam5.{k}"] = p.detach().clone()


def vgg_case(out, name, size, seed):
    torch.manual_seed(seed)
    net = ModifiedVGG(3, 8, input_size=size)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape))
                m.running_var.copy_(1 + 0.1 * torch.rand(m.running_var.shape))
                m.num_batches_tracked.fill_(5)
    save_weights(out, name, net)
    net.train()
    x = torch.randn(3, 3, size, size)
    net.double()
    y = net(x.double())
    loss = F.binary_cross_entropy_with_logits(y, torch.ones_like(y))
    loss.backward()
    out[f"{name}.x"] = x
    out[f"{name}.out"] = y.detach()
    out[f"{name}.loss"] = loss.detach().reshape(1)
    save_grads(out, name, net)
    for k, b in net.named_buffers():
        out[f"{name}.after.{k}"] = b.detach().clone()


def main(outdir):
    out = {}
    msr_case(out, "msr_x4", 4, 401)
    msr_case(out, "msr_x3", 3, 301)
    vgg_case(out, "vgg_32", 32, 32)
    vgg_case(out, "vgg_64", 64, 64)
    st.save(out, os.path.join(outdir, "networks.safetensors"))


if __name__ == "__main__":
    import sys
    main(sys.argv[1])
