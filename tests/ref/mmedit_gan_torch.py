"""MMEditing 0.x's image-to-image GAN networks in plain PyTorch, written from
its published code (mmedit/models/common/generation_model_utils.py,
backbones/generation_backbones/{unet,resnet}_generator.py,
components/discriminators/patch_disc.py) with the parts of mmcv they use
(ConvModule, build_norm_layer, normal_init), so that state-dict names and
the forward (in-place activations included) are MMEditing's.

One deliberate difference: nn.Dropout is replaced by DuetDropout, which
draws its mask from duet's RNG (duet_rng.py) instead of torch's, so that a
duet network in training mode can be compared element for element."""
import torch
import torch.nn as nn

from duet_rng import DuetRng


class DuetDropout(nn.Module):
    """nn.Dropout(p) whose masks come from a shared DuetRng (duet_dropout)."""

    def __init__(self, p, rng):
        super().__init__()
        self.p = p
        self.rng = rng

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        return x * self.rng.dropout_factor(tuple(x.shape), self.p).to(x.dtype)


class ConvModule(nn.Module):
    """mmcv.cnn.ConvModule as the generation backbones use it: conv_cfg
    Conv2d or Deconv (ConvTranspose2d), norm_cfg BN or IN (named bn / in),
    act ReLU / LeakyReLU (in place, mmcv's default) or Tanh, padding_mode
    'reflect' as an explicit ReflectionPad2d, order conv-norm-act or
    act-conv-norm."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
                 conv_cfg=None, norm_cfg=None, act_cfg=dict(type='ReLU'),
                 order=('conv', 'norm', 'act'), padding_mode='zeros'):
        super().__init__()
        self.order = order
        self.with_explicit_padding = padding_mode not in ('zeros', 'circular')
        if self.with_explicit_padding:
            assert padding_mode == 'reflect'
            self.padding_layer = nn.ReflectionPad2d(padding)
        conv_padding = 0 if self.with_explicit_padding else padding
        if conv_cfg is not None and conv_cfg['type'] == 'Deconv':
            self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size,
                                           stride=stride, padding=conv_padding,
                                           output_padding=conv_cfg.get('output_padding', 0),
                                           bias=bias)
        else:
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                                  padding=conv_padding, bias=bias)
        self.with_norm = norm_cfg is not None
        if self.with_norm:
            if norm_cfg['type'] == 'BN':
                self.norm_name = 'bn'
                norm = nn.BatchNorm2d(out_channels, eps=1e-5)
            else:
                assert norm_cfg['type'] == 'IN'
                self.norm_name = 'in'
                norm = nn.InstanceNorm2d(out_channels, eps=1e-5)
            self.add_module(self.norm_name, norm)
        self.with_activation = act_cfg is not None
        if self.with_activation:
            t = act_cfg['type']
            if t == 'ReLU':
                self.activate = nn.ReLU(inplace=True)
            elif t == 'LeakyReLU':
                self.activate = nn.LeakyReLU(act_cfg.get('negative_slope', 0.01), inplace=True)
            else:
                assert t == 'Tanh'
                self.activate = nn.Tanh()

    def forward(self, x):
        for layer in self.order:
            if layer == 'conv':
                if self.with_explicit_padding:
                    x = self.padding_layer(x)
                x = self.conv(x)
            elif layer == 'norm' and self.with_norm:
                x = getattr(self, self.norm_name)(x)
            elif layer == 'act' and self.with_activation:
                x = self.activate(x)
        return x


def generation_init_weights(module, init_gain=0.02):
    """init_type 'normal' (mmcv normal_init: weight N(mean, std), bias 0)."""
    def init_func(m):
        classname = m.__class__.__name__
        if hasattr(m, 'weight') and (classname.find('Conv') != -1
                                     or classname.find('Linear') != -1):
            nn.init.normal_(m.weight, 0.0, init_gain)
            if getattr(m, 'bias', None) is not None:
                nn.init.constant_(m.bias, 0)
        elif classname.find('BatchNorm2d') != -1:
            nn.init.normal_(m.weight, 1.0, init_gain)
            nn.init.constant_(m.bias, 0)
    module.apply(init_func)


class UnetSkipConnectionBlock(nn.Module):
    def __init__(self, outer_channels, inner_channels, in_channels=None, submodule=None,
                 is_outermost=False, is_innermost=False, norm_cfg=dict(type='BN'),
                 use_dropout=False, dropout_rng=None):
        super().__init__()
        assert not (is_outermost and is_innermost)
        self.is_outermost = is_outermost
        use_bias = norm_cfg['type'] == 'IN'
        kernel_size, stride, padding = 4, 2, 1
        if in_channels is None:
            in_channels = outer_channels
        down_norm_cfg = norm_cfg
        down_act_cfg = dict(type='LeakyReLU', negative_slope=0.2)
        up_norm_cfg = norm_cfg
        up_act_cfg = dict(type='ReLU')
        up_in_channels = inner_channels * 2
        up_bias = use_bias
        middle = [submodule]
        upper = []
        if is_outermost:
            down_act_cfg = None
            down_norm_cfg = None
            up_bias = True
            up_norm_cfg = None
            upper = [nn.Tanh()]
        elif is_innermost:
            down_norm_cfg = None
            up_in_channels = inner_channels
            middle = []
        else:
            upper = [DuetDropout(0.5, dropout_rng)] if use_dropout else []
        down = [ConvModule(in_channels, inner_channels, kernel_size, stride, padding,
                           bias=use_bias, conv_cfg=dict(type='Conv2d'), norm_cfg=down_norm_cfg,
                           act_cfg=down_act_cfg, order=('act', 'conv', 'norm'))]
        up = [ConvModule(up_in_channels, outer_channels, kernel_size, stride, padding,
                         bias=up_bias, conv_cfg=dict(type='Deconv'), norm_cfg=up_norm_cfg,
                         act_cfg=up_act_cfg, order=('act', 'conv', 'norm'))]
        self.model = nn.Sequential(*(down + middle + up + upper))

    def forward(self, x):
        if self.is_outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)


class UnetGenerator(nn.Module):
    def __init__(self, in_channels, out_channels, num_down=8, base_channels=64,
                 norm_cfg=dict(type='BN'), use_dropout=False, dropout_rng=None):
        super().__init__()
        b = base_channels
        blk = UnetSkipConnectionBlock(b * 8, b * 8, norm_cfg=norm_cfg, is_innermost=True)
        for _ in range(num_down - 5):
            blk = UnetSkipConnectionBlock(b * 8, b * 8, submodule=blk, norm_cfg=norm_cfg,
                                          use_dropout=use_dropout, dropout_rng=dropout_rng)
        blk = UnetSkipConnectionBlock(b * 4, b * 8, submodule=blk, norm_cfg=norm_cfg)
        blk = UnetSkipConnectionBlock(b * 2, b * 4, submodule=blk, norm_cfg=norm_cfg)
        blk = UnetSkipConnectionBlock(b, b * 2, submodule=blk, norm_cfg=norm_cfg)
        self.model = UnetSkipConnectionBlock(out_channels, b, in_channels=in_channels,
                                             submodule=blk, is_outermost=True,
                                             norm_cfg=norm_cfg)

    def forward(self, x):
        return self.model(x)


class PatchDiscriminator(nn.Module):
    def __init__(self, in_channels, base_channels=64, num_conv=3, norm_cfg=dict(type='BN')):
        super().__init__()
        use_bias = norm_cfg['type'] == 'IN'
        lrelu = dict(type='LeakyReLU', negative_slope=0.2)
        seq = [ConvModule(in_channels, base_channels, 4, 2, 1, bias=True, norm_cfg=None,
                          act_cfg=lrelu)]
        now = prev = 1
        for n in range(1, num_conv):
            prev, now = now, min(2 ** n, 8)
            seq += [ConvModule(base_channels * prev, base_channels * now, 4, 2, 1,
                               bias=use_bias, norm_cfg=norm_cfg, act_cfg=lrelu)]
        prev, now = now, min(2 ** num_conv, 8)
        seq += [ConvModule(base_channels * prev, base_channels * now, 4, 1, 1, bias=use_bias,
                           norm_cfg=norm_cfg, act_cfg=lrelu)]
        seq += [nn.Conv2d(base_channels * now, 1, kernel_size=4, stride=1, padding=1)]
        self.model = nn.Sequential(*seq)

    def forward(self, x):
        return self.model(x)


class ResidualBlockWithDropout(nn.Module):
    def __init__(self, channels, padding_mode, norm_cfg=dict(type='BN'), use_dropout=True,
                 dropout_rng=None):
        super().__init__()
        use_bias = norm_cfg['type'] == 'IN'
        block = [ConvModule(channels, channels, 3, padding=1, bias=use_bias, norm_cfg=norm_cfg,
                            padding_mode=padding_mode)]
        if use_dropout:
            block += [DuetDropout(0.5, dropout_rng)]
        block += [ConvModule(channels, channels, 3, padding=1, bias=use_bias, norm_cfg=norm_cfg,
                             act_cfg=None, padding_mode=padding_mode)]
        self.block = nn.Sequential(*block)

    def forward(self, x):
        return x + self.block(x)


class ResnetGenerator(nn.Module):
    def __init__(self, in_channels, out_channels, base_channels=64, norm_cfg=dict(type='IN'),
                 use_dropout=False, num_blocks=9, padding_mode='reflect', dropout_rng=None):
        super().__init__()
        use_bias = norm_cfg['type'] == 'IN'
        b = base_channels
        model = [ConvModule(in_channels, b, 7, padding=3, bias=use_bias, norm_cfg=norm_cfg,
                            padding_mode=padding_mode)]
        for i in range(2):
            m = 2 ** i
            model += [ConvModule(b * m, b * m * 2, 3, stride=2, padding=1, bias=use_bias,
                                 norm_cfg=norm_cfg)]
        for _ in range(num_blocks):
            model += [ResidualBlockWithDropout(b * 4, padding_mode=padding_mode,
                                               norm_cfg=norm_cfg, use_dropout=use_dropout,
                                               dropout_rng=dropout_rng)]
        for i in range(2):
            m = 2 ** (2 - i)
            model += [ConvModule(b * m, b * m // 2, 3, stride=2, padding=1, bias=use_bias,
                                 conv_cfg=dict(type='Deconv', output_padding=1),
                                 norm_cfg=norm_cfg)]
        model += [ConvModule(b, out_channels, 7, padding=3, bias=True, norm_cfg=None,
                             act_cfg=dict(type='Tanh'), padding_mode=padding_mode)]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        return self.model(x)
