#!/usr/bin/env bash
# DIV2K preparation and MMEditing's SR data (issue 23), on a 10-image
# stand-in of DIV2K (600 x 520 HR photos-like images and their X2, X4):
#   - duet prepare div2k cuts HR, X2 and X4 into MMEditing's sub-images
#     (crop 480 / 240 / 120, step 240 / 120 / 60, thresh 0): 4 per image,
#     0001_s001.png .. 0010_s004.png in each folder, the same names, the
#     sizes divided by the scale, and writes meta_info_DIV2K800sub_GT.txt
#     ("0001_s001.png (480,480,3)"); run again, it refuses the existing
#     folders; where MMEditing's venv is, MMEditing's own worker() (its
#     preprocess_div2k_dataset.py) cuts the same images into the same
#     pixels, file by file;
#   - SRAnnotationDataset over the prepared folders trains with the same
#     losses as SRFolderDataset over them (the same sample order), and a
#     missing listed file is an error naming it;
#   - MMEditing's own SRGAN DIV2K config, converted by
#     scripts/convert-config.py, trains 2 iterations on the prepared data
#     (paths, VGG weights and batch set on the command line).
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_prepare_div2k
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D="$T/DIV2K"

"$PY" - "$D" <<'PY'
import math, os, struct, sys, zlib
root = sys.argv[1]
def png(path, w, h, seed):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    a, b = 0.02 + 0.003 * seed, 0.031 + 0.002 * seed
    row = lambda y: b"\x00" + bytes(int(127 + 120 * math.sin(a * x * 600 / w + b * y * 520 / h + c))
                                    for x in range(w) for c in range(3))
    raw = b"".join(row(y) for y in range(h))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
for i in range(1, 11):
    png("%s/DIV2K_train_HR/%04d.png" % (root, i), 600, 520, i)
    for s in (2, 4):
        png("%s/DIV2K_train_LR_bicubic/X%d/%04dx%d.png" % (root, s, i, s), 600 // s, 520 // s, i)
PY

"$DUET" prepare div2k "$D" --scales 2,4 --threads 2 > "$T/prep.out" 2>&1 || fail "prepare: $(cat "$T/prep.out")"
cat "$T/prep.out"
for f in DIV2K_train_HR_sub DIV2K_train_LR_bicubic/X2_sub DIV2K_train_LR_bicubic/X4_sub; do
  [ "$(ls "$D/$f" | wc -l)" = 40 ] || fail "$f: $(ls "$D/$f" | wc -l) files, want 40"
  [ "$(ls "$D/$f" | head -1)" = 0001_s001.png ] && [ "$(ls "$D/$f" | tail -1)" = 0010_s004.png ] \
    || fail "$f: names $(ls "$D/$f" | head -2)"
done
cmp <(ls "$D/DIV2K_train_HR_sub") <(ls "$D/DIV2K_train_LR_bicubic/X4_sub") || fail "names differ"
[ "$(wc -l < "$D/meta_info_DIV2K800sub_GT.txt")" = 40 ] || fail "annotation lines"
[ "$(head -1 "$D/meta_info_DIV2K800sub_GT.txt")" = "0001_s001.png (480,480,3)" ] \
  || fail "annotation format: $(head -1 "$D/meta_info_DIV2K800sub_GT.txt")"
if "$DUET" prepare div2k "$D" --scales 4 > "$T/again.out" 2>&1; then fail "prepared twice"; fi
grep -q "DIV2K_train_HR_sub: File exists (it exists already" "$T/again.out" || fail "again: $(cat "$T/again.out")"

# MMEditing's own script cuts the same pixels (needs its venv: cv2, mmcv).
venv=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
if [ -x "$venv/bin/python" ]; then
  "$venv/bin/python" - "$D" <<'PY' || fail "against MMEditing's preprocess_div2k_dataset.py"
import glob, os, sys, types
import cv2, numpy as np
sys.modules.setdefault("lmdb", types.ModuleType("lmdb"))  # the script imports it; worker() does not use it
import mmedit
sys.path.insert(0, os.path.join(os.path.dirname(mmedit.__file__), ".mim", "tools", "data",
                                "super-resolution", "div2k"))
import preprocess_div2k_dataset as p
root = sys.argv[1]
n = 0
for src, dst, crop in (("DIV2K_train_HR", "DIV2K_train_HR_sub", 480),
                       ("DIV2K_train_LR_bicubic/X4", "DIV2K_train_LR_bicubic/X4_sub", 120)):
    out = os.path.join(root, "mm_" + dst.replace("/", "_"))
    os.makedirs(out)
    opt = dict(crop_size=crop, step=crop // 2, thresh_size=0, save_folder=out, compression_level=3)
    for f in sorted(glob.glob(os.path.join(root, src, "*.png"))):
        p.worker(f, opt)
    ours = sorted(os.listdir(os.path.join(root, dst)))
    assert sorted(os.listdir(out)) == ours, (dst, len(ours))
    for name in ours:
        a = cv2.imread(os.path.join(out, name), cv2.IMREAD_UNCHANGED)
        b = cv2.imread(os.path.join(root, dst, name), cv2.IMREAD_UNCHANGED)
        assert a.shape == b.shape and np.array_equal(a, b), name
        n += 1
print("test_prepare_div2k: MMEditing's worker() made the same %d sub-images, pixel for pixel" % n)
PY
else
  [ "${CI:-}" != true ] || fail "no MMEditing venv under CI"
  echo "test_prepare_div2k: MMEditing's script not compared: no venv at $venv"
fi

# SRAnnotationDataset against SRFolderDataset over the same folders.
sr_cfg() { # FILE DATASET-LINES
  cat > "$1" <<CFG
model = { type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3; mid_channels = 8;
                num_blocks = 1; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; }; };
data = { samples_per_gpu = 2;
  train = { type = "RepeatDataset"; times = 10; dataset = { $2 scale = 4;
    pipeline = ( { type = "LoadImageFromFile"; io_backend = "disk"; key = "lq"; flag = "unchanged"; },
                 { type = "LoadImageFromFile"; io_backend = "disk"; key = "gt"; flag = "unchanged"; },
                 { type = "RescaleToZeroOne"; keys = ["lq", "gt"]; },
                 { type = "Normalize"; keys = ["lq", "gt"]; mean = [0, 0, 0]; std = [1, 1, 1]; to_rgb = true; },
                 { type = "PairedRandomCrop"; gt_patch_size = 64; },
                 { type = "Flip"; keys = ["lq", "gt"]; flip_ratio = 0.5; direction = "horizontal"; },
                 { type = "Flip"; keys = ["lq", "gt"]; flip_ratio = 0.5; direction = "vertical"; },
                 { type = "RandomTransposeHW"; keys = ["lq", "gt"]; transpose_ratio = 0.5; },
                 { type = "Collect"; keys = ["lq", "gt"]; meta_keys = ["lq_path", "gt_path"]; },
                 { type = "ImageToTensor"; keys = ["lq", "gt"]; } ); }; }; };
optimizers = { generator = { type = "Adam"; lr = 1e-3; }; };
total_iters = 3; seed = 3;
log_config = { interval = 1; };
checkpoint_config = { interval = 3; };
CFG
}
sr_cfg "$T/ann.cfg" "type = \"SRAnnotationDataset\"; lq_folder = \"$D/DIV2K_train_LR_bicubic/X4_sub\";
  gt_folder = \"$D/DIV2K_train_HR_sub\"; ann_file = \"$D/meta_info_DIV2K800sub_GT.txt\"; filename_tmpl = \"{}\";"
sr_cfg "$T/fold.cfg" "type = \"SRFolderDataset\"; lq_folder = \"$D/DIV2K_train_LR_bicubic/X4_sub\";
  gt_folder = \"$D/DIV2K_train_HR_sub\";"
"$DUET" train "$T/ann.cfg" --work-dir "$T/w_ann" > "$T/ann.out" 2>&1 || fail "annotation: $(tail -3 "$T/ann.out")"
"$DUET" train "$T/fold.cfg" --work-dir "$T/w_fold" > "$T/fold.out" 2>&1 || fail "folders: $(tail -3 "$T/fold.out")"
losses() { "$PY" -c "import json,sys; print([r['loss'] for r in map(json.loads, open(sys.argv[1])) if r['mode']=='train'])" "$1"; }
[ "$(losses "$T/w_ann/log.jsonl")" = "$(losses "$T/w_fold/log.jsonl")" ] \
  || fail "annotation and folder losses differ: $(losses "$T/w_ann/log.jsonl") vs $(losses "$T/w_fold/log.jsonl")"
echo "test_prepare_div2k: SRAnnotationDataset = SRFolderDataset losses: $(losses "$T/w_ann/log.jsonl")"
head -3 "$D/meta_info_DIV2K800sub_GT.txt" > "$T/short.txt"
echo "0099_s001.png (480,480,3)" >> "$T/short.txt"
if "$DUET" train "$T/ann.cfg" --work-dir "$T/w_bad" --set "data.train.dataset.ann_file=\"$T/short.txt\"" \
    > "$T/bad.out" 2>&1; then fail "a missing listed file was accepted"; fi
grep -q "short.txt, entry 4, names $D/DIV2K_train_HR_sub/0099_s001.png, which is missing" "$T/bad.out" \
  || fail "missing entry: $(cat "$T/bad.out")"

# MMEditing's own SRGAN config, converted, trains on the prepared data.
MMCFG="$venv/lib/python3.11/site-packages/mmedit/.mim/configs/restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py"
if [ -f "$MMCFG" ]; then
  "$PY" "$ROOT/scripts/convert-config.py" "$MMCFG" -o "$T/srgan.cfg" > "$T/conv.out" 2>&1 || fail "convert: $(cat "$T/conv.out")"
  sed -i "s|data/DIV2K|$D|g; s|data/val_set14/Set14_bicLRx4|$D/DIV2K_train_LR_bicubic/X4_sub|; s|data/val_set14/Set14|$D/DIV2K_train_HR_sub|" "$T/srgan.cfg"
  "$DUET" train "$T/srgan.cfg" --work-dir "$T/w_srgan" --set total_iters=2 \
    --set data.train_dataloader.samples_per_gpu=1 --set 'model.perceptual_loss.pretrained=""' \
    --set 'load_from=""' --set evaluation.interval=1000 > "$T/srgan.out" 2>&1 \
    || fail "MMEditing's SRGAN config: $(grep -v INFO "$T/srgan.out" | tail -5)"
  [ -f "$T/w_srgan/iter_2.safetensors" ] || fail "no checkpoint from MMEditing's SRGAN config"
  echo "test_prepare_div2k: MMEditing's srgan_x4c64b16_g1_1000k_div2k.py, converted, trained 2 iterations"
fi
echo "test_prepare_div2k: ok"
