"""Stand-in data for an MMEditing 0.16.1 config, where the config looks for it.

  python3 mmedit_standin.py CONFIG.py ROOT [TORCH_HOME]

Reads CONFIG.py as scripts/convert-config.py does (no code run), and under
ROOT (the folder duet runs in: MMEditing's paths are relative to it) makes
what each of data.train / val / test names: DIV2K's annotated sub-image
folders and Set5/Set14 pairs for the SR datasets, A|B pairs and
trainA/trainB/testA/testB for the translation datasets, annotation files
with photos for ImgInpaintingDataset; a small .pth for load_from (one
generator tensor, so a load that is not strict takes it); and, with
TORCH_HOME, torchvision's vgg19 file (features only, zeros) where
torch.hub keeps it, for perceptual_loss.pretrained = "torchvision://vgg19".
Images are small flat-coloured PNGs: enough for `duet train --dry-run`,
which loads sample 0 of each set through its pipeline. Existing files are
kept, so several configs share one ROOT. Prints one line per thing made.
"""
import importlib.util
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
scripts = os.path.join(here, "..", "..", "scripts")
sys.path.insert(0, here)
sys.path.insert(0, scripts)
from pngio import write_png  # noqa: E402
import pth_safe  # noqa: E402

spec = importlib.util.spec_from_file_location("convert_config",
                                              os.path.join(scripts, "convert-config.py"))
convert_config = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert_config)

made = []


def png(path, w, h, seed=0):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    px = bytearray()
    for y in range(h):
        for x in range(w):
            px += bytes(((x * 7 + seed * 40) % 256, (y * 5 + seed * 20) % 256,
                         ((x + y) * 3 + seed) % 256))
    write_png(path, w, h, 3, bytes(px))


def text(path, body):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(body)
    made.append(path)


def crop_of(pipeline, default):
    """The largest crop a pipeline asks for (gt_patch_size, crop_size)."""
    size = default
    for st in pipeline or []:
        if st.get("type") == "PairedRandomCrop":
            size = max(size, st.get("gt_patch_size", 0))
        if st.get("type") in ("Crop", "FixedCrop") and st.get("crop_size"):
            size = max(size, max(st["crop_size"]))
    return size


def sr(ds, root):
    scale = ds.get("scale", 4)
    gt = crop_of(ds.get("pipeline"), 64)
    gt += (-gt) % scale
    tmpl = ds.get("filename_tmpl", "{}")
    names = ["0001_s001", "0001_s002"]
    if ds.get("ann_file"):
        text(os.path.join(root, ds["ann_file"]),
             "".join("%s.png (%d,%d,3)\n" % (n, gt, gt) for n in names))
    for i, n in enumerate(names):
        png(os.path.join(root, ds["gt_folder"], n + ".png"), gt, gt, i)
        if ds.get("lq_folder"):
            png(os.path.join(root, ds["lq_folder"], tmpl.format(n) + ".png"), gt // scale,
                gt // scale, i)
    made.append(ds["gt_folder"])


def paired(ds, root):
    for sub in ("train", "test"):
        for i in range(2):
            png(os.path.join(root, ds["dataroot"], sub, "%d.png" % i), 128, 64, i)
    made.append(ds["dataroot"])


def unpaired(ds, root):
    for sub in ("trainA", "trainB", "testA", "testB"):
        for i in range(2):
            png(os.path.join(root, ds["dataroot"], sub, "%d.png" % i), 64, 64, i)
    made.append(ds["dataroot"])


def inpainting(ds, root):
    prefix = ds.get("data_prefix", "")
    names = ["img/0.png", "img/1.png"]
    text(os.path.join(root, ds["ann_file"]), "".join(n + "\n" for n in names))
    for i, n in enumerate(names):
        png(os.path.join(root, prefix, n), 256, 256, i)
    for st in ds.get("pipeline") or []:
        if st.get("type") == "LoadMask" and st.get("mask_mode") in ("set", "file"):
            raise SystemExit("mmedit_standin: LoadMask mask_mode %r has no stand-in yet"
                             % st.get("mask_mode"))


MAKERS = {"SRAnnotationDataset": sr, "SRFolderDataset": sr, "SRFolderGTDataset": sr,
          "GenerationPairedDataset": paired, "GenerationUnpairedDataset": unpaired,
          "ImgInpaintingDataset": inpainting}


def dataset(ds, root):
    if ds.get("type") == "RepeatDataset":
        return dataset(ds["dataset"], root)
    if ds.get("type") not in MAKERS:
        raise SystemExit("mmedit_standin: no stand-in for a %s" % ds.get("type"))
    MAKERS[ds["type"]](ds, root)


def f32(shape):
    n = 1
    for s in shape:
        n *= s
    return pth_safe.tensor_from_bytes("float32", shape, bytes(4 * n))


def load_from(path, model):
    """A non-strict load_from needs one matching tensor: the generator's first."""
    if os.path.exists(path):
        return
    gen = model.get("generator", {})
    mid = gen.get("mid_channels", 64)
    name = "generator.conv_first.weight"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pth_safe.save({"meta": {"iter": 1}, "state_dict": {name: f32((mid, gen.get("in_channels", 3),
                                                                   3, 3))}}, path)
    made.append(path)


# torchvision's VGG19 features: conv layer index -> (out, in) channels.
VGG19 = [(0, 64, 3), (2, 64, 64), (5, 128, 64), (7, 128, 128), (10, 256, 128), (12, 256, 256),
         (14, 256, 256), (16, 256, 256), (19, 512, 256), (21, 512, 512), (23, 512, 512),
         (25, 512, 512), (28, 512, 512), (30, 512, 512), (32, 512, 512), (34, 512, 512)]


def torchvision_vgg19(torch_home):
    path = os.path.join(torch_home, "hub", "checkpoints", "vgg19-dcbb9e9d.pth")
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sd = {}
    for i, o, c in VGG19:
        sd["features.%d.weight" % i] = f32((o, c, 3, 3))
        sd["features.%d.bias" % i] = f32((o,))
    pth_safe.save(sd, path)
    made.append(path)


def main():
    cfg, _ = convert_config.load(sys.argv[1])
    root = sys.argv[2]
    data = cfg.get("data", {})
    for key in ("train", "val", "test"):
        if isinstance(data.get(key), dict):
            dataset(data[key], root)
    if cfg.get("load_from"):
        load_from(os.path.join(root, cfg["load_from"]), cfg.get("model", {}))
    if len(sys.argv) > 3 and "PerceptualLoss" in repr(cfg.get("model")):
        torchvision_vgg19(sys.argv[3])
    for m in made:
        print("mmedit_standin: %s" % m)


if __name__ == "__main__":
    main()
