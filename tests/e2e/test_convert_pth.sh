#!/usr/bin/env bash
# scripts/convert-pth.py on files torch itself writes:
#  - an MMEditing checkpoint (state_dict under "module."-prefixed part names,
#    meta, optimizer) of an MSRResNet from tests/ref/mmedit_torch.py:
#    `duet test` on the converted file must give PyTorch's output on the same
#    weights (the SR images pixel for pixel, up to rounding, and the PSNR);
#  - a torchvision-layout VGG state dict (features.<i>.*, classifier.<j>.*):
#    the converted features keep their names and values, and duet's
#    perceptual loss loads them (`duet test` of an SRGAN whose
#    perceptual_loss.pretrained is the converted file);
#  - files it must refuse, each naming the key and the reason, writing
#    nothing.
# Needs DUET_EXE (set by CTest) and Python with torch (DUET_TORCH_PYTHON,
# default /usr/bin/python3: Debian's python3-torch).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
PY=${DUET_TORCH_PYTHON:-/usr/bin/python3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CONVERT="$SRC/scripts/convert-pth.py"
T=$(mktemp -d /tmp/duet_convert_XXXXXX)
[ -d "$T" ] || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DUET_LOG=warn
fail() { echo "test_convert_pth: FAIL: $*" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || fail "$PY has no torch (apt-get install python3-torch)"

# ---- torch writes the inputs and its own answers ----
"$PY" - "$T" "$SRC/tests/ref" <<'PY_MAKE'
import collections, json, math, os, struct, sys, zlib
T, REF = sys.argv[1], sys.argv[2]
sys.path.insert(0, REF)
import torch
import torch.nn as nn
from mmedit_torch import MSRResNet
torch.manual_seed(0)

def png(path, w, h, px):
    raw = b"".join(b"\x00" + bytes(px[y * w * 3:(y + 1) * w * 3]) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

# Paired validation images: 12x12 LQ, 48x48 GT, smooth with some detail.
os.makedirs(T + "/val/lq"); os.makedirs(T + "/val/gt")
lqs = {}
for i in range(2):
    name = "%02d.png" % i
    f = lambda x, y, c: 128 + 90 * math.sin(0.21 * (i + 1) * x + 0.13 * y + c) * math.cos(0.05 * x * y / (i + 1))
    gt = [max(0, min(255, int(f(x / 4, y / 4, c)))) for y in range(48) for x in range(48) for c in range(3)]
    lq = [max(0, min(255, int(f(x, y, c)))) for y in range(12) for x in range(12) for c in range(3)]
    png(T + "/val/gt/" + name, 48, 48, gt)
    png(T + "/val/lq/" + name, 12, 12, lq)
    lqs[name] = (torch.tensor(lq, dtype=torch.float32).view(12, 12, 3).permute(2, 0, 1) / 255.0,
                 torch.tensor(gt, dtype=torch.uint8).view(48, 48, 3))

# An MMEditing BasicRestorer checkpoint as saved from a DDP-wrapped model,
# with PyTorch's default init (large enough that wrong weights show).
g = MSRResNet(3, 3, mid_channels=8, num_blocks=2, upscale_factor=4, mmedit_init=False,
              inplace=False).eval()
sd = collections.OrderedDict(("module.generator." + k, v) for k, v in g.state_dict().items())
torch.save({"meta": {"mmedit_version": "0.16.0", "iter": 1000, "config": "model = dict(...)",
                     "hook_msgs": {"last_ckpt": "iter_1000.pth"}},
            "state_dict": sd,
            "optimizer": {"generator": {"state": {}, "param_groups": [{"lr": 1e-4, "params": [0]}]}}},
           T + "/mmedit.pth")

# PyTorch's answer: the SR images (RGB uint8, as duet saves them) and the
# mean PSNR over the images with crop_border 4 (MMEditing's formula).
want, psnrs = {}, []
with torch.no_grad():
    for name, (lq, gt) in sorted(lqs.items()):
        sr = g(lq[None])[0].clamp(0, 1)
        img = (sr * 255.0).round().to(torch.uint8).permute(1, 2, 0)
        want[name] = img.flatten().tolist()
        a = img[4:-4, 4:-4].double(); b = gt[4:-4, 4:-4].double()
        psnrs.append(20 * math.log10(255.0 / math.sqrt(((a - b) ** 2).mean().item())))
json.dump({"images": want, "psnr": sum(psnrs) / len(psnrs)}, open(T + "/torch_sr.json", "w"))

# A torchvision-style VGG (vgg19's layout, smaller): features + classifier.
class VGG(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == 0:
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Linear(c * 4, 16), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(16, 10))
vgg = VGG([4, 4, 0, 8, 8])
torch.save(vgg.state_dict(), T + "/vgg.pth")
torch.save({k: v for k, v in vgg.state_dict().items() if k.startswith("features.")},
           T + "/vgg_features.pt")

# Files to refuse.
torch.save({"generator.conv_first.weight": torch.zeros(2, 3, 3, 3, dtype=torch.int32)},
           T + "/bad_dtype.pth")
torch.save({"state_dict": {"generator.conv_first.weight": torch.zeros(2, 3, 3, 3),
                           "generator.scale": 3}}, T + "/bad_entry.pth")
torch.save({"state_dict": {"generator.conv_first.weight": torch.zeros(2, 3, 3, 3),
                           "ema.conv_first.weight": torch.zeros(2, 3, 3, 3)}}, T + "/bad_prefix.pth")
torch.save({"features.0.weight": torch.zeros(4, 3, 3, 3), "features.1.running_mean": torch.zeros(4)},
           T + "/bad_vgg_bn.pth")
torch.save({"state_dict": {"generator.conv_first.weight": torch.zeros(1)}, "epoch": 3},
           T + "/bad_top.pth")
PY_MAKE

# ---- MMEditing layout: convert, then duet test must give PyTorch's output ----
"$PY" "$CONVERT" "$T/mmedit.pth" -o "$T/mmedit.safetensors" > "$T/convert.out" \
  || { cat "$T/convert.out"; fail "converting the MMEditing checkpoint"; }
grep -q "removed 'module.' from" "$T/convert.out" || fail "no note about 'module.': $(cat "$T/convert.out")"
grep -q "optimizer state not converted" "$T/convert.out" || fail "no note about the optimizer"

cat > "$T/msrresnet.cfg" <<CFG_END
model = {
  type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3;
                mid_channels = 8; num_blocks = 2; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; };
  test_cfg = { metrics = ["PSNR"]; crop_border = 4; };
};
data = {
  samples_per_gpu = 1;
  train = { type = "SRFolderDataset"; lq_folder = "$T/val/lq"; gt_folder = "$T/val/gt"; scale = 4; };
  val = { type = "SRFolderDataset"; lq_folder = "$T/val/lq"; gt_folder = "$T/val/gt"; scale = 4; };
};
optimizers = { generator = { type = "Adam"; lr = 1e-4; }; };
total_iters = 1;
work_dir = "$T/unused";
CFG_END
"$DUET" test "$T/msrresnet.cfg" "$T/mmedit.safetensors" --json --out "$T/sr" \
  > "$T/test.json" 2> "$T/test.err" || { cat "$T/test.err"; fail "duet test on the converted checkpoint"; }

# With info logging on, stdout is still the JSON object alone (the log's
# "kernels:" line goes to stderr).
DUET_LOG=info "$DUET" test "$T/msrresnet.cfg" "$T/mmedit.safetensors" --json > "$T/test_info.json" \
  2> "$T/test_info.err" || { cat "$T/test_info.err"; fail "duet test --json with DUET_LOG=info"; }
"$PY" -c "import json, sys; json.load(open(sys.argv[1]))" "$T/test_info.json" \
  || fail "duet test --json > file is not JSON: $(head -c 300 "$T/test_info.json")"
grep -q "kernels:" "$T/test_info.err" || fail "the info lines went missing: $(cat "$T/test_info.err")"
# The converter writes duet's checksums (issue 33): no "has no checksums"
# note, and a changed byte is caught.
! grep -q "has no checksums" "$T/test_info.err" || fail "the converted file has no checksums: $(cat "$T/test_info.err")"
"$PY" - "$T/mmedit.safetensors" "$T/flipped.safetensors" <<'PY_FLIP'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-5] ^= 0x40                       # a byte of the last tensor
open(sys.argv[2], "wb").write(b)
PY_FLIP
if "$DUET" test "$T/msrresnet.cfg" "$T/flipped.safetensors" > /dev/null 2> "$T/flip.err"; then
  fail "a converted file with a changed byte loaded"
fi
grep -q "fails its checksum" "$T/flip.err" || fail "changed byte: $(cat "$T/flip.err")"

"$PY" - "$T" <<'PY_COMPARE'
import json, struct, sys, zlib
T = sys.argv[1]

def read_png(path):
    """8-bit RGB PNG -> (w, h, bytes), any filter (duet writes with libpng)."""
    b = open(path, "rb").read()
    pos, idat, w, h = 8, b"", None, None
    while pos < len(b):
        n, t = struct.unpack(">I4s", b[pos:pos + 8])
        d = b[pos + 8:pos + 8 + n]
        if t == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", d[:10])
            assert depth == 8 and ctype == 2, (path, depth, ctype)
        elif t == b"IDAT":
            idat += d
        pos += 12 + n
    raw, stride, out, prev = zlib.decompress(idat), w * 3, bytearray(), bytearray(w * 3)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - 3] if x >= 3 else 0
            c = prev[x - 3] if x >= 3 else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + prev[x]) & 255
            elif f == 3: line[x] = (line[x] + (a + prev[x]) // 2) & 255
            elif f == 4:
                p = a + prev[x] - c
                pa, pb, pc = abs(p - a), abs(p - prev[x]), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else prev[x] if pb <= pc else c)) & 255
        out += line
        prev = line
    return w, h, bytes(out)

torch_sr = json.load(open(T + "/torch_sr.json"))
duet = json.loads(open(T + "/test.json").read())
for name, want in sorted(torch_sr["images"].items()):
    w, h, got = read_png(T + "/sr/" + name)
    assert (w, h) == (48, 48), (name, w, h)
    diff = [abs(a - b) for a, b in zip(got, want)]
    # Float32 sums in another order may round a pixel the other way.
    assert max(diff) <= 1, "%s: duet's SR differs from PyTorch's by up to %d levels" % (name, max(diff))
    same = sum(d == 0 for d in diff) / len(diff)
    assert same >= 0.99, "%s: only %.1f%% of the pixels equal PyTorch's" % (name, 100 * same)
assert abs(duet["PSNR"] - torch_sr["psnr"]) < 0.01, (duet["PSNR"], torch_sr["psnr"])
print("test_convert_pth: duet test on the converted MMEditing checkpoint = PyTorch "
      "(PSNR %.4f vs %.4f dB)" % (duet["PSNR"], torch_sr["psnr"]))
PY_COMPARE

# ---- torchvision VGG layout: features kept by name and value, loaded by duet ----
"$PY" "$CONVERT" "$T/vgg.pth" -o "$T/vgg.safetensors" > "$T/convert_vgg.out" \
  || { cat "$T/convert_vgg.out"; fail "converting the VGG"; }
grep -q "dropped 4 classifier entries" "$T/convert_vgg.out" || fail "classifier note: $(cat "$T/convert_vgg.out")"
"$PY" - "$T" <<'PY_VGG'
import json, struct, sys
import torch
T = sys.argv[1]
b = open(T + "/vgg.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__")
assert meta["layout"] == "torchvision", meta
want = torch.load(T + "/vgg_features.pt")
assert sorted(h) == sorted(want), (sorted(h), sorted(want))
for k, v in want.items():
    e = h[k]
    assert e["dtype"] == "F32" and e["shape"] == list(v.shape), (k, e)
    got = torch.frombuffer(bytearray(b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]),
                           dtype=torch.float32).view(v.shape)
    assert torch.equal(got, v), k
print("test_convert_pth: VGG features converted by name and value (%d tensors)" % len(h))
PY_VGG
# An SRGAN whose perceptual loss reads the converted VGG: building it loads
# every features.<i> weight, and fails on a missing or misshapen one.
sed -e 's/type = "BasicRestorer";/type = "SRGAN";\
  discriminator = { type = "ModifiedVGG"; in_channels = 3; mid_channels = 4; input_size = 32; };\
  gan_loss = { type = "GANLoss"; gan_type = "vanilla"; loss_weight = 5e-3; };\
  perceptual_loss = { type = "PerceptualLoss"; cfg = [4, 4, 0, 8, 8]; layer_ids = [7];\
                      layer_weights = [1.0]; pretrained = "VGG"; };/' \
    -e "s|pretrained = \"VGG\"|pretrained = \"$T/vgg.safetensors\"|" \
    -e 's/optimizers = {/optimizers = { discriminator = { type = "Adam"; lr = 1e-4; };/' \
    "$T/msrresnet.cfg" > "$T/srgan.cfg"
"$DUET" test "$T/srgan.cfg" "$T/mmedit.safetensors" --json > "$T/test_srgan.json" 2> "$T/test_srgan.err" \
  || { cat "$T/test_srgan.err"; fail "duet test of an SRGAN with the converted VGG"; }
! grep -q "no VGG weights file" "$T/test_srgan.err" || fail "the perceptual loss did not read the VGG"
"$PY" -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); assert a['PSNR']==b['PSNR'], (a, b)" \
  "$T/test.json" "$T/test_srgan.json" || fail "the SRGAN's generator gives another PSNR"
# The same SRGAN with the unconverted names must fail: the check above means something.
"$PY" - "$T" <<'PY_RAW'
import sys
T = sys.argv[1]
import torch, json, struct
sd = torch.load(T + "/vgg.pth")
tensors = {"vgg." + k: v for k, v in sd.items()}   # not duet's names
header, blobs, off = {}, b"", 0
for k, v in tensors.items():
    d = v.contiguous().numpy().tobytes()
    header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(d)]}
    blobs += d; off += len(d)
raw = json.dumps(header).encode(); raw += b" " * ((8 - len(raw) % 8) % 8)
open(T + "/vgg_wrong_names.safetensors", "wb").write(struct.pack("<Q", len(raw)) + raw + blobs)
PY_RAW
sed "s|$T/vgg.safetensors|$T/vgg_wrong_names.safetensors|" "$T/srgan.cfg" > "$T/srgan_wrong.cfg"
if "$DUET" test "$T/srgan_wrong.cfg" "$T/mmedit.safetensors" > /dev/null 2> "$T/wrong.err"; then
  fail "duet accepted VGG weights under names it does not read"
fi
grep -q "features.0.weight" "$T/wrong.err" || fail "the VGG error does not name the key: $(cat "$T/wrong.err")"
echo "test_convert_pth: duet's perceptual loss loads the converted VGG (and refuses other names)"

# pretrained = "torchvision://vgg19" (MMEditing's default) reads torchvision's
# file from torch.hub's folder through the converter, and a .pth path the
# same way (issue 33): one training iteration's perceptual loss equals the
# one with the hand-converted safetensors, bit for bit. The file here is
# not torchvision's (its hash differs from the name's): a warning names it.
# Absent, the error says where to put which file; a random network for a
# torchvision VGG must be asked for by name.
mkdir -p "$T/th/hub/checkpoints"
cp "$T/vgg.pth" "$T/th/hub/checkpoints/vgg19-dcbb9e9d.pth"
percep() {  # tag, pretrained value -> loss_perceptual of iteration 1
  sed "s|pretrained = \"$T/vgg.safetensors\"|pretrained = \"$2\"|" "$T/srgan.cfg" > "$T/srgan_$1.cfg"
  TORCH_HOME="$T/th" "$DUET" train "$T/srgan_$1.cfg" --work-dir "$T/wd_$1" --set total_iters=1 \
    --set log_config.interval=1 --set data.train.gt_patch_size=32 --set data.samples_per_gpu=2 --set "load_from=\"$T/mmedit.safetensors\"" \
    > "$T/percep_$1.out" 2>&1 \
    || { cat "$T/percep_$1.out" >&2; fail "training with pretrained = $2"; }
  "$PY" -c "import json,sys; print(repr([r for r in map(json.loads, open(sys.argv[1])) if r.get('mode') == 'train'][0]['loss_perceptual']))" \
    "$T/wd_$1/log.jsonl"
}
by_hand=$(percep hand "$T/vgg.safetensors")
from_hub=$(percep hub "torchvision://vgg19")
from_pth=$(percep pth "$T/vgg.pth")
[ "$by_hand" = "$from_hub" ] && [ "$by_hand" = "$from_pth" ] \
  || fail "perceptual loss: by hand $by_hand, torchvision://vgg19 $from_hub, .pth $from_pth"
grep -q "warning: .*th/hub/checkpoints/vgg19-dcbb9e9d.pth: its sha256 begins .*, not dcbb9e9d" "$T/percep_hub.out" \
  || fail "no hash warning: $(cat "$T/percep_hub.out")"
rm "$T/th/hub/checkpoints/vgg19-dcbb9e9d.pth"
if TORCH_HOME="$T/th" "$DUET" train "$T/srgan_hub.cfg" --dry-run > /dev/null 2> "$T/nohub.err"; then
  fail "a missing torchvision file was accepted"
fi
grep -qF "$T/th/hub/checkpoints/vgg19-dcbb9e9d.pth is not there: put torchvision's file vgg19-dcbb9e9d.pth in $T/th/hub/checkpoints" \
  "$T/nohub.err" || fail "missing torchvision file: $(cat "$T/nohub.err")"
sed -e 's/cfg = \[4, 4, 0, 8, 8\]; //' -e 's/ pretrained = "[^"]*";//' "$T/srgan.cfg" > "$T/srgan_default.cfg"
grep -q "layer_ids = \[7\]" "$T/srgan_default.cfg" || fail "srgan_default.cfg: $(cat "$T/srgan_default.cfg")"
if TORCH_HOME="$T/th" "$DUET" train "$T/srgan_default.cfg" --dry-run > /dev/null 2> "$T/default.err"; then
  fail "a torchvision VGG without weights was accepted"
fi
grep -q "pretrained = 'torchvision://vgg19': .*vgg19-dcbb9e9d.pth is not there" "$T/default.err" \
  || fail "MMEditing's default pretrained: $(cat "$T/default.err")"
sed -i 's/layer_weights = \[1.0\];/layer_weights = [1.0]; pretrained = "";/' "$T/srgan_default.cfg"
if "$DUET" train "$T/srgan_default.cfg" --dry-run > /dev/null 2> "$T/empty.err"; then
  fail "pretrained = \"\" was accepted"
fi
grep -q 'pretrained = "": .*pretrained = "random"' "$T/empty.err" || fail "pretrained empty: $(cat "$T/empty.err")"
echo "test_convert_pth: torchvision://vgg19 from TORCH_HOME/hub/checkpoints and a .pth give the hand-converted VGG's perceptual loss ($by_hand)"

# ---- back to PyTorch: duet checkpoints as MMEditing .pth files ----
# The converted MMEditing checkpoint, back again: torch.load gives the
# original weights bit for bit, and PyTorch's MSRResNet loads them strictly.
"$PY" "$CONVERT" "$T/mmedit.safetensors" -o "$T/back.pth" > "$T/back.out" \
  || { cat "$T/back.out"; fail "safetensors -> pth"; }
# A duet training checkpoint (with optimizer state): weights and meta kept,
# the optimizer left out and said so.
"$DUET" train "$T/msrresnet.cfg" --work-dir "$T/w" --set total_iters=2 --set data.train.gt_patch_size=32 --set data.samples_per_gpu=2 --set checkpoint_config.interval=2 \
  > "$T/train.out" 2>&1 || { cat "$T/train.out"; fail "duet train for a checkpoint"; }
"$PY" "$CONVERT" "$T/w/latest.safetensors" -o "$T/trained.pth" > "$T/trained.out" \
  || { cat "$T/trained.out"; fail "duet checkpoint -> pth"; }
grep -q "left out [0-9]* 'optimizer.\*' entries" "$T/trained.out" || fail "no optimizer note: $(cat "$T/trained.out")"
"$PY" - "$T" "$SRC/tests/ref" <<'PY_BACK'
import collections, json, struct, sys
T, REF = sys.argv[1], sys.argv[2]
sys.path.insert(0, REF)
import torch
from mmedit_torch import MSRResNet
orig = torch.load(T + "/mmedit.pth")["state_dict"]
back = torch.load(T + "/back.pth")
assert set(back) == {"meta", "state_dict"}, back.keys()
sd = back["state_dict"]
want = collections.OrderedDict((k.replace("module.", ""), v) for k, v in orig.items())
assert list(sd) == list(want), (list(sd)[:4], list(want)[:4])
for k, v in want.items():
    assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), k
g = MSRResNet(3, 3, mid_channels=8, num_blocks=2, upscale_factor=4, mmedit_init=False,
              inplace=False)
g.load_state_dict({k[len("generator."):]: v for k, v in sd.items()}, strict=True)
t = torch.load(T + "/trained.pth")
b = open(T + "/w/latest.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert t["meta"]["iter"] == int(h["__metadata__"]["iter"]) == 2, t["meta"]
for k, v in t["state_dict"].items():
    e = h[k]
    raw = b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
    assert v.numpy().tobytes() == raw and list(v.shape) == e["shape"], k
assert not any(k.startswith("optimizer") for k in t["state_dict"])
g.load_state_dict({k[len("generator."):]: v for k, v in t["state_dict"].items()}, strict=True)
# CycleGAN's dict parts and the EMA copy convert (under their MMEditing names).
torch.save({"state_dict": collections.OrderedDict([
    ("generators.module.a.conv.weight", torch.ones(2, 2)), ("generators.module.b.conv.weight", torch.zeros(2)),
    ("discriminators.module.a.w", torch.ones(1)), ("generator_ema.conv.weight", torch.ones(3))])},
    T + "/cyclegan_ema.pth")
print("test_convert_pth: duet -> .pth: torch.load gives the weights bit for bit, PyTorch's "
      "MSRResNet loads them strictly (a converted and a trained checkpoint)")
PY_BACK
"$PY" "$CONVERT" "$T/cyclegan_ema.pth" -o "$T/cyclegan_ema.safetensors" > "$T/cg.out" \
  || { cat "$T/cg.out"; fail "CycleGAN / EMA names"; }
"$PY" -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]]); h.pop('__metadata__')
assert sorted(h) == ['discriminators.a.w', 'generator_ema.conv.weight', 'generators.a.conv.weight',
                     'generators.b.conv.weight'], sorted(h)" "$T/cyclegan_ema.safetensors" \
  || fail "CycleGAN / EMA names not kept"

# A .pth handed to duet itself is converted on the fly through the same
# script (issue 33): duet test on it equals duet test on the converted file.
"$DUET" test "$T/msrresnet.cfg" "$T/mmedit.pth" --json > "$T/pth.json" 2> "$T/pth.err" \
  || { cat "$T/pth.err"; fail "duet test on a .pth"; }
"$DUET" test "$T/msrresnet.cfg" "$T/mmedit.safetensors" --json > "$T/st.json" 2> /dev/null \
  || fail "duet test on the converted .pth"
cmp -s "$T/pth.json" "$T/st.json" || fail "a .pth on the fly: $(cat "$T/pth.json") vs $(cat "$T/st.json")"
# A file that is neither still says what it is not.
printf 'not a checkpoint' > "$T/junk.pth"
if "$DUET" test "$T/msrresnet.cfg" "$T/junk.pth" > /dev/null 2> "$T/junk.err"; then
  fail "duet test accepted a junk .pth"
fi
grep -q "junk.pth: .*refused it" "$T/junk.err" || fail "junk .pth: $(cat "$T/junk.err")"

# ---- refusals: the key and the reason, exit status 2, no file ----
refuse() {  # file, then strings the message must hold
  local f=$1; shift
  set +e
  "$PY" "$CONVERT" "$T/$f.pth" -o "$T/$f.safetensors" > /dev/null 2> "$T/$f.err"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$f: exit status $rc, want 2 ($(cat "$T/$f.err"))"
  [ ! -e "$T/$f.safetensors" ] || fail "$f: wrote a file although it refused"
  for s in "$@"; do
    grep -qF -- "$s" "$T/$f.err" || fail "$f: message lacks '$s': $(cat "$T/$f.err")"
  done
}
refuse bad_dtype "key 'generator.conv_first.weight'" "int32" "not a floating-point type"
refuse bad_entry "key 'generator.scale'" "not a tensor"
refuse bad_prefix "key 'ema.conv_first.weight'" "unknown prefix 'ema'"
refuse bad_vgg_bn "key 'features.1.running_mean'" "batch-norm VGG"
refuse bad_top "top-level key 'epoch'"
echo "test_convert_pth: refusals name the key and the reason"
echo "test_convert_pth: ok"
