"""MMEditing 0.16.1 itself, imported for the `mmedit` reference tests
(issue 19; tests/ref/gen_mmedit_refs.py), in the venv that
scripts/make-mmedit-venv.sh makes.

This is the one place where MMEditing's environment is adjusted, and all of
it is here:

1. Stubs for mmcv's compiled ops. The venv has mmcv 1.7.2 without compiled
   ops (mmcv-full does not build on Debian's torch: see the script), and
   importing mmedit.models imports mmcv.ops, whose package __init__ loads
   mmcv._ext, from four modules:
     backbones/sr_backbones/edvr_net.py, basicvsr_pp.py
         ModulatedDeformConv2d, modulated_deform_conv2d (EDVR, BasicVSR++)
     backbones/sr_backbones/tdan_net.py
         DeformConv2d, DeformConv2dPack, deform_conv2d (TDAN)
     components/stylegan2/modules.py
         mmcv.ops.fused_bias_leakyrelu: FusedBiasLeakyReLU,
         fused_bias_leakyrelu; mmcv.ops.upfirdn2d: upfirdn2d (StyleGAN2,
         GLEAN)
   None of the models compared here (SRGAN, ESRGAN, Pix2Pix, CycleGAN,
   BasicRestorer with MSRResNet) uses them. The stubs are classes (EDVR's
   ModulatedDCNPack subclasses one at import) and functions that raise
   when constructed or called, so a model that did use one fails loudly
   instead of computing something else.
2. A tiny VGG for PerceptualLoss: MMEditing's PerceptualVGG builds
   `getattr(torchvision.models.vgg, vgg_type)()` and loads `pretrained`
   with mmcv's load_checkpoint. `add_tiny_vgg` registers a vgg_type whose
   `features` is torchvision's own make_layers(cfg) (the tiny
   [8, 8, M, 16, 16] network of our tiny configs instead of VGG19's 16
   convolutions), and writes its weights to a checkpoint file that
   MMEditing's load_checkpoint then reads, as it would read VGG19's.
3. Dropout masks from duet's RNG (Pix2Pix's UNet): `use_duet_dropout`
   replaces the nn.Dropout modules of a built model by the same drop with
   duet_dropout's masks (duet_rng.py), so that both sides drop the same
   units.
4. The image pools' draws from duet's RNG (CycleGAN): `use_duet_pool_rng`
   gives MMEditing's GANImageBuffer duet's rng where it calls
   np.random.random() and np.random.randint(), so that both sides swap the
   same images. Everything else is MMEditing's.

Run as a script with --check to verify the environment (the venv script
does)."""
import sys
import types

import torch
import torch.nn as nn

_STUB_CLASSES = ("DeformConv2d", "DeformConv2dPack", "ModulatedDeformConv2d",
                 "FusedBiasLeakyReLU")
_STUB_FUNCTIONS = ("deform_conv2d", "modulated_deform_conv2d", "fused_bias_leakyrelu",
                   "upfirdn2d")
_STUB_SUBMODULES = ("fused_bias_leakyrelu", "upfirdn2d")


def _stub_class(name):
    def init(self, *args, **kwargs):
        raise RuntimeError(f"mmcv.ops.{name} is a stub (tests/ref/mmedit_oracle.py): this "
                           "model needs mmcv's compiled ops, which the mmedit venv lacks")
    return type(name, (nn.Module,), {"__init__": init})


def _stub_function(name):
    def f(*args, **kwargs):
        raise RuntimeError(f"mmcv.ops.{name} is a stub (tests/ref/mmedit_oracle.py)")
    f.__name__ = name
    return f


def _install_mmcv_ops_stubs():
    try:
        import mmcv.ops  # noqa: F401  (mmcv-full: the real ops, nothing to stub)
        return
    except ImportError:
        pass
    import mmcv
    ops = types.ModuleType("mmcv.ops")
    ops.__doc__ = "Stubs of mmcv's compiled ops: tests/ref/mmedit_oracle.py"
    for n in _STUB_CLASSES:
        setattr(ops, n, _stub_class(n))
    for n in _STUB_FUNCTIONS:
        setattr(ops, n, _stub_function(n))
    sys.modules["mmcv.ops"] = ops
    mmcv.ops = ops
    for sub in _STUB_SUBMODULES:
        m = types.ModuleType(f"mmcv.ops.{sub}")
        m.__dict__.update({k: v for k, v in ops.__dict__.items() if not k.startswith("__")})
        sys.modules[f"mmcv.ops.{sub}"] = m
        setattr(ops, sub, m)


_install_mmcv_ops_stubs()

import mmcv  # noqa: E402
import mmedit  # noqa: E402
from mmedit.models import build_model  # noqa: E402

assert mmedit.__version__ == "0.16.1", mmedit.__version__


def config(path_in_mmedit):
    """One of MMEditing's own configs, e.g.
    'restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py', as shipped
    in the mmedit wheel (mmedit/.mim/configs/)."""
    import os
    root = os.path.join(os.path.dirname(mmedit.__file__), ".mim", "configs")
    return mmcv.Config.fromfile(os.path.join(root, path_in_mmedit))


def build(cfg):
    """MMEditing's registry: build_model(cfg.model, train_cfg, test_cfg), as
    mmedit/apis/train.py and tools/train.py do."""
    return build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))


def optimizers(model, cfg):
    """mmedit.core.build_optimizers over cfg.optimizers, as MMEditing's
    training loop (mmedit/apis/train.py) builds them."""
    from mmedit.core import build_optimizers
    return build_optimizers(model, cfg.optimizers)


class _TinyVGG(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        import torchvision.models.vgg as vgg
        self.features = vgg.make_layers(cfg)


def add_tiny_vgg(name, cfg, ckpt_path, seed):
    """Registers torchvision.models.vgg.<name>() = a VGG whose features are
    make_layers(cfg), initialised from torch.manual_seed(seed) by PyTorch's
    defaults, and saves those weights to ckpt_path for PerceptualVGG's
    `pretrained`. Returns ckpt_path."""
    import torchvision.models.vgg as vgg
    torch.manual_seed(seed)
    net = _TinyVGG(cfg)
    torch.save(net.state_dict(), ckpt_path)
    setattr(vgg, name, lambda: _TinyVGG(cfg))
    return ckpt_path


class _DuetDropout(nn.Module):
    def __init__(self, p, rng):
        super().__init__()
        self.p, self.rng = p, rng

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        return x * self.rng.dropout_factor(tuple(x.shape), self.p).to(x.dtype)


def use_duet_dropout(model, seed):
    """Every nn.Dropout of model draws duet's masks (one DuetRng(seed)
    shared in forward order, as duet_dropout draws them). Returns how many
    were replaced."""
    from duet_rng import DuetRng
    rng = DuetRng(seed)
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(parent, name, _DuetDropout(child.p, rng))
                count += 1
    return count


class _DuetNumpyRandom:
    """The two np.random calls of MMEditing's GANImageBuffer.query, from
    duet's rng (duet_image_pool's draws, as ref_cyclegan.py replays them)."""

    def __init__(self, rng):
        self.rng = rng

    def random(self):
        return float(self.rng.uniform())

    def randint(self, low, high):
        return self.rng.int_range(low, high - 1)


def use_duet_pool_rng(seed):
    """MMEditing's image pools (mmedit/models/common/
    generation_model_utils.py, GANImageBuffer) draw from one DuetRng(seed)
    instead of numpy's global generator; the module's other uses of numpy
    are untouched."""
    import mmedit.models.common.generation_model_utils as gmu
    from duet_rng import DuetRng
    shim = types.SimpleNamespace(**{k: getattr(gmu.np, k) for k in dir(gmu.np)
                                    if not k.startswith("__")})
    shim.random = _DuetNumpyRandom(DuetRng(seed))
    gmu.np = shim


def _check():
    print(f"mmedit {mmedit.__version__}, mmcv {mmcv.__version__}, torch {torch.__version__}")
    cfg = config("restorers/srresnet_srgan/msrresnet_x4c64b16_g1_1000k_div2k.py")
    cfg.model.generator.mid_channels = 8
    cfg.model.generator.num_blocks = 1
    model = build(cfg)
    print(f"built {type(model).__name__} from MMEditing's registry")


if __name__ == "__main__":
    if "--check" in sys.argv:
        _check()
