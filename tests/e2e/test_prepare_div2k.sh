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
#   - duet prepare div2k --lmdb-only writes MMEditing's LMDBs
#     (DIV2K_train_HR_sub.lmdb, DIV2K_train_LR_bicubic_X<s>_sub.lmdb: keys
#     without .png, meta_info.txt "0001_s001.png (480,480,3) 1"), read back
#     with python3-lmdb (keys, PNG values equal to the sub-images); where
#     MMEditing's venv is, MMEditing's own SRLmdbDataset + LoadImageFromFile
#     (io_backend 'lmdb') reads duet's LMDBs into the sub-images' pixels, and
#     MMEditing's own make_lmdb writes LMDBs duet trains from;
#   - SRLmdbDataset (io_backend "lmdb") trains with the same losses as the
#     folders, at world size 1 and 2; a missing key, a damaged LMDB and
#     backend/dataset mismatches are errors naming what is wrong;
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
sr_cfg() { # FILE DATASET-LINES [LQ-BACKEND GT-BACKEND]
  local disk='io_backend = "disk";'
  local lqb=${3:-$disk} gtb=${4:-$disk}
  cat > "$1" <<CFG
model = { type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3; mid_channels = 8;
                num_blocks = 1; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; }; };
data = { samples_per_gpu = 2;
  train = { type = "RepeatDataset"; times = 10; dataset = { $2 scale = 4;
    pipeline = ( { type = "LoadImageFromFile"; $lqb key = "lq"; flag = "unchanged"; },
                 { type = "LoadImageFromFile"; $gtb key = "gt"; flag = "unchanged"; },
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

# LMDB: MMEditing's make_lmdb layout, from the sub-image folders made above.
"$DUET" prepare div2k "$D" --scales 2,4 --threads 2 --lmdb-only > "$T/lmdb.out" 2>&1 \
  || fail "prepare --lmdb-only: $(cat "$T/lmdb.out")"
cat "$T/lmdb.out"
for l in DIV2K_train_HR_sub.lmdb:480 DIV2K_train_LR_bicubic_X2_sub.lmdb:240 DIV2K_train_LR_bicubic_X4_sub.lmdb:120; do
  f=${l%%:*} side=${l##*:}
  [ -f "$D/$f/data.mdb" ] && [ "$(wc -l < "$D/$f/meta_info.txt")" = 40 ] || fail "$f: no data.mdb or not 40 lines"
  [ "$(head -1 "$D/$f/meta_info.txt")" = "0001_s001.png ($side,$side,3) 1" ] \
    && [ "$(tail -1 "$D/$f/meta_info.txt")" = "0010_s004.png ($side,$side,3) 1" ] \
    || fail "$f/meta_info.txt: $(head -1 "$D/$f/meta_info.txt")"
done
if "$DUET" prepare div2k "$D" --scales 4 --lmdb-only > "$T/again.out" 2>&1; then fail "LMDB made twice"; fi
grep -q "DIV2K_train_HR_sub.lmdb: File exists (it exists already" "$T/again.out" || fail "again: $(cat "$T/again.out")"
if /usr/bin/python3 -c "import lmdb" 2>/dev/null; then
  /usr/bin/python3 - "$D" "$ROOT/tests/e2e" <<'PY' || fail "LMDB contents"
import os, sys
import lmdb
root = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from pngio import read_png
names = sorted(os.listdir(os.path.join(root, "DIV2K_train_HR_sub")))
for db, folder, side in (("DIV2K_train_HR_sub.lmdb", "DIV2K_train_HR_sub", 480),
                         ("DIV2K_train_LR_bicubic_X4_sub.lmdb", "DIV2K_train_LR_bicubic/X4_sub", 120)):
    env = lmdb.open(os.path.join(root, db), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k.decode() for k, _ in txn.cursor()]
        assert keys == [n[:-4] for n in names], (db, keys[:3])
        for n in names:
            v = txn.get(n[:-4].encode())
            assert v[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(v[16:20], "big") == side, (db, n)
            if side == 120:  # pixels (a pure-Python decoder: the small ones only)
                tmp = os.path.join(root, "v.png")
                open(tmp, "wb").write(v)
                assert read_png(tmp) == read_png(os.path.join(root, folder, n)), (db, n)
print("test_prepare_div2k: LMDB keys = sub-image names, values PNGs of the sub-images")
PY
else
  [ "${CI:-}" != true ] || fail "no python3-lmdb under CI (scripts/install-deps.sh)"
  echo "test_prepare_div2k: LMDB contents not read back: no python3-lmdb"
fi

L4="$D/DIV2K_train_LR_bicubic_X4_sub.lmdb" LH="$D/DIV2K_train_HR_sub.lmdb"
sr_cfg "$T/lmdb.cfg" "type = \"SRLmdbDataset\"; lq_folder = \"$L4\"; gt_folder = \"$LH\";" \
  "io_backend = \"lmdb\"; db_path = \"$L4\";" "io_backend = \"lmdb\"; db_path = \"$LH\";"
"$DUET" train "$T/lmdb.cfg" --work-dir "$T/w_lmdb" > "$T/lmdb.out" 2>&1 || fail "lmdb: $(tail -3 "$T/lmdb.out")"
[ "$(losses "$T/w_lmdb/log.jsonl")" = "$(losses "$T/w_fold/log.jsonl")" ] \
  || fail "LMDB and folder losses differ: $(losses "$T/w_lmdb/log.jsonl") vs $(losses "$T/w_fold/log.jsonl")"
echo "test_prepare_div2k: SRLmdbDataset = SRFolderDataset losses"
# World size 2 (one sample per rank) against 1 (both samples): the same batches.
mpiexec --allow-run-as-root -n 2 "$DUET" train "$T/lmdb.cfg" --work-dir "$T/w_lmdb2" \
  --set data.samples_per_gpu=1 > "$T/lmdb2.out" 2>&1 || fail "lmdb -n 2: $(tail -3 "$T/lmdb2.out")"
close() { "$PY" -c "
import json, sys
a, b = ([r['loss'] for r in map(json.loads, open(f)) if r['mode'] == 'train'] for f in sys.argv[1:3])
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 * max(1, abs(y)) for x, y in zip(a, b)), (a, b)
" "$1" "$2"; }
close "$T/w_lmdb2/log.jsonl" "$T/w_lmdb/log.jsonl" || fail "LMDB at world size 2 differs from 1"
echo "test_prepare_div2k: SRLmdbDataset at world size 2 = world size 1"

# LMDB errors.
cp -r "$LH" "$T/missing.lmdb"
echo "0099_s001.png (480,480,3) 1" >> "$T/missing.lmdb/meta_info.txt"
lmdb_err() { # NAME EXPECTED ARGS...
  local name=$1 want=$2; shift 2
  if "$DUET" train "$T/lmdb.cfg" --work-dir "$T/w_$name" "$@" > "$T/$name.out" 2>&1; then fail "$name accepted"; fi
  grep -qF -- "$want" "$T/$name.out" || fail "$name: want '$want', got: $(cat "$T/$name.out")"
}
lmdb_err missing "missing.lmdb/meta_info.txt, entry 41: LMDB $T/missing.lmdb has no key \"0099_s001\"" \
  --set "data.train.dataset.gt_folder=\"$T/missing.lmdb\"" --set "data.train.dataset.pipeline.[1].db_path=\"$T/missing.lmdb\""
mkdir "$T/damaged.lmdb"
head -c 20000 /dev/urandom > "$T/damaged.lmdb/data.mdb"
cp "$LH/meta_info.txt" "$T/damaged.lmdb/"
lmdb_err damaged "cannot open LMDB $T/damaged.lmdb:" \
  --set "data.train.dataset.gt_folder=\"$T/damaged.lmdb\"" --set "data.train.dataset.pipeline.[1].db_path=\"$T/damaged.lmdb\""
lmdb_err dbpath "'db_path' \"$L4\" is not the dataset's gt_folder" --set "data.train.dataset.pipeline.[1].db_path=\"$L4\""
lmdb_err disk "'io_backend' is \"disk\", but SRLmdbDataset's images are in LMDB" \
  --set 'data.train.dataset.pipeline.[0].io_backend="disk"'
if "$DUET" train "$T/fold.cfg" --work-dir "$T/w_x" --set 'data.train.dataset.pipeline.[0].io_backend="lmdb"' \
    > "$T/x.out" 2>&1; then fail "lmdb backend on a folder set accepted"; fi
grep -q "'io_backend' is \"lmdb\", which reads SRLmdbDataset's keys" "$T/x.out" || fail "lmdb on folders: $(cat "$T/x.out")"

# MMEditing's own LMDB code: its SRLmdbDataset reads duet's LMDBs, and duet
# trains from LMDBs its make_lmdb writes (Debian's python3-lmdb in the venv).
if [ -x "$venv/bin/python" ] && /usr/bin/python3 -c "import lmdb" 2>/dev/null; then
  "$venv/bin/python" - "$D" <<'PY' 2>/dev/null || fail "MMEditing's LMDB code against duet's"
import os, sys, types
sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-lmdb, the same Python 3.11
import cv2, numpy as np
import mmedit
from mmedit.datasets import SRLmdbDataset
sys.path.insert(0, os.path.join(os.path.dirname(mmedit.__file__), ".mim", "tools", "data",
                                "super-resolution", "div2k"))
import preprocess_div2k_dataset as p
root = sys.argv[1]
lq, gt = root + "/DIV2K_train_LR_bicubic_X4_sub.lmdb", root + "/DIV2K_train_HR_sub.lmdb"
ds = SRLmdbDataset(lq_folder=lq, gt_folder=gt, scale=4, pipeline=[
    dict(type="LoadImageFromFile", io_backend="lmdb", db_path=lq, key="lq", flag="unchanged"),
    dict(type="LoadImageFromFile", io_backend="lmdb", db_path=gt, key="gt", flag="unchanged")])
assert len(ds) == 40
for i in range(len(ds)):
    r = ds[i]
    for k, d in (("gt", "DIV2K_train_HR_sub"), ("lq", "DIV2K_train_LR_bicubic/X4_sub")):
        ref = cv2.imread(os.path.join(root, d, r["gt_path"] + ".png"), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(r[k], ref), (k, r["gt_path"])
for d, out in (("DIV2K_train_HR_sub", "mm_HR.lmdb"), ("DIV2K_train_LR_bicubic/X4_sub", "mm_X4.lmdb")):
    paths, keys = p.prepare_keys_div2k(os.path.join(root, d))
    p.make_lmdb(os.path.join(root, d), os.path.join(root, out), paths, keys)
PY
  echo "test_prepare_div2k: MMEditing's SRLmdbDataset read duet's LMDBs: the sub-images, pixel for pixel"
  sr_cfg "$T/mm.cfg" "type = \"SRLmdbDataset\"; lq_folder = \"$D/mm_X4.lmdb\"; gt_folder = \"$D/mm_HR.lmdb\";" \
    "io_backend = \"lmdb\"; db_path = \"$D/mm_X4.lmdb\";" "io_backend = \"lmdb\"; db_path = \"$D/mm_HR.lmdb\";"
  "$DUET" train "$T/mm.cfg" --work-dir "$T/w_mm" > "$T/mm.out" 2>&1 || fail "MMEditing's LMDB: $(tail -3 "$T/mm.out")"
  [ "$(losses "$T/w_mm/log.jsonl")" = "$(losses "$T/w_fold/log.jsonl")" ] || fail "MMEditing's LMDB losses differ"
  echo "test_prepare_div2k: duet trained from MMEditing's make_lmdb LMDBs: the folder losses"
else
  [ "${CI:-}" != true ] || fail "no MMEditing venv or python3-lmdb under CI"
  echo "test_prepare_div2k: MMEditing's LMDB code not compared: no venv or python3-lmdb"
fi

# MMEditing's own SRGAN config, converted, trains on the prepared data.
MMCFG="$venv/lib/python3.11/site-packages/mmedit/.mim/configs/restorers/srresnet_srgan/srgan_x4c64b16_g1_1000k_div2k.py"
if [ -f "$MMCFG" ]; then
  "$PY" "$ROOT/scripts/convert-config.py" "$MMCFG" -o "$T/srgan.cfg" > "$T/conv.out" 2>&1 || fail "convert: $(cat "$T/conv.out")"
  # Set14's stand-in: two sub-images (the run evaluates at its end; 40 full-size
  # images through the 64x16 network took minutes of the test's time).
  mkdir -p "$T/set14/gt" "$T/set14/lq"
  cp "$D"/DIV2K_train_HR_sub/0001_s00[12].png "$T/set14/gt/"
  cp "$D"/DIV2K_train_LR_bicubic/X4_sub/0001_s00[12].png "$T/set14/lq/"
  sed -i "s|data/DIV2K|$D|g; s|data/val_set14/Set14_bicLRx4|$T/set14/lq|; s|data/val_set14/Set14|$T/set14/gt|" "$T/srgan.cfg"
  "$DUET" train "$T/srgan.cfg" --work-dir "$T/w_srgan" --set total_iters=2 \
    --set data.train_dataloader.samples_per_gpu=1 --set 'model.perceptual_loss.pretrained="random"' \
    --set 'load_from=""' --set evaluation.interval=1000 > "$T/srgan.out" 2>&1 \
    || fail "MMEditing's SRGAN config: $(grep -v INFO "$T/srgan.out" | tail -5)"
  [ -f "$T/w_srgan/iter_2.safetensors" ] || fail "no checkpoint from MMEditing's SRGAN config"
  echo "test_prepare_div2k: MMEditing's srgan_x4c64b16_g1_1000k_div2k.py, converted, trained 2 iterations"
fi
echo "test_prepare_div2k: ok"
