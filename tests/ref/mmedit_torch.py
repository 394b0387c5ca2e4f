"""MMEditing's torch modules, restated once for the references
(tests/ref/ref_networks.py, ref_srgan.py, ref_esrgan.py) and the PyTorch benchmarks
(bench/networks_torch.py, train_torch.py); MMEditing itself is not installed
here.

MSRResNet (mmedit sr_resnet.py with ResidualBlockNoBN, PixelShufflePack,
default_init_weights, make_layer), ModifiedVGG (modified_vgg.py, generalised
from 128x128 inputs to input_size) and PerceptualVGG (perceptual_loss.py,
over a torchvision-style VGG `features` built from a cfg list), with
MMEditing's structure and parameter names. Two switches keep the callers'
differences:
  mmedit_init  (MSRResNet) True: MMEditing's constructors re-draw the
               residual-block and upsampler weights (default_init_weights,
               which consumes the RNG); False: PyTorch's default init only.
  inplace      (all three) True: MMEditing's in-place ReLU / LeakyReLU (and
               MSRResNet's final `out += upsampled_img`); False: out-of-place
               (bench/train_torch.py's).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


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
    def __init__(self, mid_channels=64, res_scale=1.0, mmedit_init=True, inplace=True):
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.conv2 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.relu = nn.ReLU(inplace=inplace)
        if mmedit_init and res_scale == 1.0:
            for m in [self.conv1, self.conv2]:
                default_init_weights(m, 0.1)

    def forward(self, x):
        return x + self.conv2(self.relu(self.conv1(x))) * self.res_scale


class PixelShufflePack(nn.Module):
    def __init__(self, in_channels, out_channels, scale_factor, upsample_kernel,
                 mmedit_init=True):
        super().__init__()
        self.scale_factor = scale_factor
        self.upsample_conv = nn.Conv2d(in_channels, out_channels * scale_factor * scale_factor,
                                       upsample_kernel, padding=(upsample_kernel - 1) // 2)
        if mmedit_init:
            default_init_weights(self, 1)

    def forward(self, x):
        return F.pixel_shuffle(self.upsample_conv(x), self.scale_factor)


def make_layer(block, num_blocks, **kwarg):
    return nn.Sequential(*[block(**kwarg) for _ in range(num_blocks)])


class MSRResNet(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=64, num_blocks=16,
                 upscale_factor=4, mmedit_init=True, inplace=True):
        super().__init__()
        self.upscale_factor = upscale_factor
        self.conv_first = nn.Conv2d(in_channels, mid_channels, 3, 1, 1, bias=True)
        self.trunk_net = make_layer(ResidualBlockNoBN, num_blocks, mid_channels=mid_channels,
                                    mmedit_init=mmedit_init, inplace=inplace)
        if upscale_factor in [2, 3]:
            self.upsample1 = PixelShufflePack(mid_channels, mid_channels, upscale_factor,
                                              upsample_kernel=3, mmedit_init=mmedit_init)
            self.upsample2 = None
        else:
            self.upsample1 = PixelShufflePack(mid_channels, mid_channels, 2, upsample_kernel=3,
                                              mmedit_init=mmedit_init)
            self.upsample2 = PixelShufflePack(mid_channels, mid_channels, 2, upsample_kernel=3,
                                              mmedit_init=mmedit_init)
        self.conv_hr = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(mid_channels, out_channels, 3, 1, 1, bias=True)
        self.img_upsampler = nn.Upsample(scale_factor=upscale_factor, mode="bilinear",
                                         align_corners=False)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=inplace)
        self.inplace = inplace

    def forward(self, x):
        feat = self.lrelu(self.conv_first(x))
        out = self.trunk_net(feat)
        out = self.upsample1(out)
        if self.upsample2 is not None:
            out = self.upsample2(out)
        out = self.conv_last(self.lrelu(self.conv_hr(out)))
        if self.inplace:
            out += self.img_upsampler(x)
            return out
        return out + self.img_upsampler(x)

    def init_weights(self):
        # MMEditing 0.x's MSRResNet.init_weights: the upsamplers keep their
        # own PixelShufflePack init (scale 1).
        for m in [self.conv_first, self.conv_hr, self.conv_last]:
            default_init_weights(m, 0.1)


class ModifiedVGG(nn.Module):
    def __init__(self, in_channels, mid_channels, input_size=128, inplace=True):
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
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=inplace)

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


class PerceptualVGG(nn.Module):
    """MMEditing's PerceptualVGG over torchvision-style `features` built from
    cfg (channel counts; 'M' or 0 = 2x2 max pool), truncated after the last
    layer of layer_name_list, frozen. forward returns {name: features}."""

    def __init__(self, cfg, layer_name_list, use_input_norm=True, inplace=True):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == 'M' or v == 0:
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(c, v, kernel_size=3, padding=1), nn.ReLU(inplace=inplace)]
                c = v
        num_layers = max(map(int, layer_name_list)) + 1
        self.layer_name_list = layer_name_list
        self.use_input_norm = use_input_norm
        self.vgg_layers = nn.Sequential(*layers[:num_layers])
        if use_input_norm:
            self.register_buffer('mean', torch.Tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
            self.register_buffer('std', torch.Tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        for v in self.vgg_layers.parameters():
            v.requires_grad = False

    def forward(self, x):
        if self.use_input_norm:
            x = (x - self.mean) / self.std
        output = {}
        for name, module in self.vgg_layers.named_children():
            x = module(x)
            if name in self.layer_name_list:
                output[name] = x.clone()
        return output


class ResidualDenseBlock(nn.Module):
    """mmedit rrdb_net.py's ResidualDenseBlock: conv1..conv5 over the growing
    concatenation, LeakyReLU 0.2, x5 * 0.2 + x; its constructor runs
    default_init_weights(conv_i, 0.1) (mmedit_init)."""

    def __init__(self, mid_channels=64, growth_channels=32, mmedit_init=True, inplace=True):
        super().__init__()
        for i in range(5):
            out_channels = mid_channels if i == 4 else growth_channels
            self.add_module(f'conv{i+1}',
                            nn.Conv2d(mid_channels + i * growth_channels, out_channels, 3, 1, 1))
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=inplace)
        if mmedit_init:
            for i in range(5):
                default_init_weights(getattr(self, f'conv{i+1}'), 0.1)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, mid_channels, growth_channels=32, mmedit_init=True, inplace=True):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(mid_channels, growth_channels, mmedit_init, inplace)
        self.rdb2 = ResidualDenseBlock(mid_channels, growth_channels, mmedit_init, inplace)
        self.rdb3 = ResidualDenseBlock(mid_channels, growth_channels, mmedit_init, inplace)

    def forward(self, x):
        out = self.rdb1(x)
        out = self.rdb2(out)
        out = self.rdb3(out)
        return out * 0.2 + x


class RRDBNet(nn.Module):
    """mmedit rrdb_net.py's RRDBNet, x4 (the 0.x ESRGAN configs' scale)."""

    def __init__(self, in_channels, out_channels, mid_channels=64, num_blocks=23,
                 growth_channels=32, mmedit_init=True, inplace=True):
        super().__init__()
        self.conv_first = nn.Conv2d(in_channels, mid_channels, 3, 1, 1)
        self.body = make_layer(RRDB, num_blocks, mid_channels=mid_channels,
                               growth_channels=growth_channels, mmedit_init=mmedit_init,
                               inplace=inplace)
        self.conv_body = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1)
        self.conv_hr = nn.Conv2d(mid_channels, mid_channels, 3, 1, 1)
        self.conv_last = nn.Conv2d(mid_channels, out_channels, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=inplace)

    def forward(self, x):
        feat = self.conv_first(x)
        body_feat = self.conv_body(self.body(feat))
        feat = feat + body_feat
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode='nearest')))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode='nearest')))
        out = self.conv_last(self.lrelu(self.conv_hr(feat)))
        return out

    def init_weights(self):
        for m in [self.conv_first, self.conv_body, self.conv_up1, self.conv_up2, self.conv_hr,
                  self.conv_last]:
            default_init_weights(m, 0.1)
