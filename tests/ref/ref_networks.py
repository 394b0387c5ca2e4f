"""PyTorch references for the networks: networks.safetensors.

The modules below restate MMEditing's MSRResNet (sr_resnet.py with
ResidualBlockNoBN, PixelShufflePack, default_init_weights, make_layer) and
ModifiedVGG (modified_vgg.py, generalised from 128x128 inputs to
input_size) with identical structure and parameter names; MMEditing itself
is not installed here.

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


def default_init_weights(module, scale=1.0):
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, a=0, mode="fan_in", nonlinearity="relu")
            m.weight.data *= scale
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)


class ResidualBlockNoBN(nn.Module):
    def __init__(self, mid_channels=64, res_scale=1.0):
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.conv2 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.relu = nn.ReLU(inplace=True)
        if res_scale == 1.0:
            for m in [self.conv1, self.conv2]:
                default_init_weights(m, 0.1)

    def forward(self, x):
        return x + self.conv2(self.relu(self.conv1(x))) * self.res_scale


class PixelShufflePack(nn.Module):
    def __init__(self, in_channels, out_channels, scale_factor, upsample_kernel):
        super().__init__()
        self.scale_factor = scale_factor
        self.upsample_conv = nn.Conv2d(in_channels, out_channels * scale_factor * scale_factor,
                                       upsample_kernel, padding=(upsample_kernel - 1) // 2)
        default_init_weights(self, 1)

    def forward(self, x):
        return F.pixel_shuffle(self.upsample_conv(x), self.scale_factor)


def make_layer(block, num_blocks, **kwarg):
    return nn.Sequential(*[block(**kwarg) for _ in range(num_blocks)])


class MSRResNet(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=64, num_blocks=16,
                 upscale_factor=4):
        super().__init__()
        self.upscale_factor = upscale_factor
        self.conv_first = nn.Conv2d(in_channels, mid_channels, 3, 1, 1, bias=True)
        self.trunk_net = make_layer(ResidualBlockNoBN, num_blocks, mid_channels=mid_channels)
        if upscale_factor in [2, 3]:
            self.upsample1 = PixelShufflePack(mid_channels, mid_channels, upscale_factor,
                                              upsample_kernel=3)
            self.upsample2 = None
        else:
            self.upsample1 = PixelShufflePack(mid_channels, mid_channels, 2, upsample_kernel=3)
            self.upsample2 = PixelShufflePack(mid_channels, mid_channels, 2, upsample_kernel=3)
        self.conv_hr = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(mid_channels, out_channels, 3, 1, 1, bias=True)
        self.img_upsampler = nn.Upsample(scale_factor=upscale_factor, mode="bilinear",
                                         align_corners=False)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)

    def forward(self, x):
        feat = self.lrelu(self.conv_first(x))
        out = self.trunk_net(feat)
        out = self.upsample1(out)
        if self.upsample2 is not None:
            out = self.upsample2(out)
        out = self.conv_last(self.lrelu(self.conv_hr(out)))
        return out + self.img_upsampler(x)

    def init_weights(self):
        for m in [self.conv_first, self.upsample1, self.upsample2, self.conv_hr,
                  self.conv_last]:
            if m is not None:
                default_init_weights(m, 0.1)


class ModifiedVGG(nn.Module):
    def __init__(self, in_channels, mid_channels, input_size=128):
        super().__init__()
        self.input_size = input_size
        c = mid_channels
        self.conv0_0 = nn.Conv2d(in_channels, c, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(c, c, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(c, affine=True)
        self.conv1_0 = nn.Conv2d(c, c * 2, 3, 1, 1, bias=False)
        self.bn1_0 = nn.BatchNorm2d(c * 2, affine=True)
        self.conv1_1 = nn.Conv2d(c * 2, c * 2, 4, 2, 1, bias=False)
        self.bn1_1 = nn.BatchNorm2d(c * 2, affine=True)
        self.conv2_0 = nn.Conv2d(c * 2, c * 4, 3, 1, 1, bias=False)
        self.bn2_0 = nn.BatchNorm2d(c * 4, affine=True)
        self.conv2_1 = nn.Conv2d(c * 4, c * 4, 4, 2, 1, bias=False)
        self.bn2_1 = nn.BatchNorm2d(c * 4, affine=True)
        self.conv3_0 = nn.Conv2d(c * 4, c * 8, 3, 1, 1, bias=False)
        self.bn3_0 = nn.BatchNorm2d(c * 8, affine=True)
        self.conv3_1 = nn.Conv2d(c * 8, c * 8, 4, 2, 1, bias=False)
        self.bn3_1 = nn.BatchNorm2d(c * 8, affine=True)
        self.conv4_0 = nn.Conv2d(c * 8, c * 8, 3, 1, 1, bias=False)
        self.bn4_0 = nn.BatchNorm2d(c * 8, affine=True)
        self.conv4_1 = nn.Conv2d(c * 8, c * 8, 4, 2, 1, bias=False)
        self.bn4_1 = nn.BatchNorm2d(c * 8, affine=True)
        side = input_size // 32
        self.linear1 = nn.Linear(c * 8 * side * side, 100)
        self.linear2 = nn.Linear(100, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        assert x.size(2) == self.input_size and x.size(3) == self.input_size
        feat = self.lrelu(self.conv0_0(x))
        feat = self.lrelu(self.bn0_1(self.conv0_1(feat)))
        feat = self.lrelu(self.bn1_0(self.conv1_0(feat)))
        feat = self.lrelu(self.bn1_1(self.conv1_1(feat)))
        feat = self.lrelu(self.bn2_0(self.conv2_0(feat)))
        feat = self.lrelu(self.bn2_1(self.conv2_1(feat)))
        feat = self.lrelu(self.bn3_0(self.conv3_0(feat)))
        feat = self.lrelu(self.bn3_1(self.conv3_1(feat)))
        feat = self.lrelu(self.bn4_0(self.conv4_0(feat)))
        feat = self.lrelu(self.bn4_1(self.conv4_1(feat)))
        feat = feat.view(feat.size(0), -1)
        feat = self.lrelu(self.linear1(feat))
        return self.linear2(feat)


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
