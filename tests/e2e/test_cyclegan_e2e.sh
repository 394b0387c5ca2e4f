#!/usr/bin/env bash
# End to end for CycleGAN on unpaired data, on 2 processes:
# scripts/make_translation_data.py makes photos (trainA) and recoloured
# photos (trainB) from stand-in photos this script writes under the sample
# photos' names; configs/cyclegan_tiny.cfg trains on them
# (GenerationUnpairedDataset) with pools of 8 images, so the pools are full
# after 2 iterations and every later one draws; a run stopped at iteration 4
# and resumed must end bitwise equal to the uninterrupted one (the pools'
# images, their rng and the step counter included), with both pools in the
# checkpoint; `duet test` writes the outputs.
# Needs DUET_EXE (set by CTest), python3 with numpy, and the translation
# datasets and scripts/make_translation_data.py (the data branch): without
# that script it says so and stops without running (exit 77: skipped).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$ROOT/scripts/make_translation_data.py" ]; then
  echo "test_cyclegan_e2e: SKIPPED: no scripts/make_translation_data.py in this tree"
  exit 77 # CTest's SKIP_RETURN_CODE
fi
PY=${PYTHON:-python3}
"$PY" -c 'import numpy' 2> /dev/null || PY=/usr/bin/python3
T=$(mktemp -d /tmp/duet_cg_e2e_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn
fail() { echo "test_cyclegan_e2e: FAIL: $*" >&2; exit 1; }

# ---- stand-in photos (smooth colours, discs), then the tiny data ----
"$PY" - "$T/sample" <<'PY_PHOTOS'
import os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ.get("ROOT", "."), "scripts"))
root = sys.argv[1]
rng = np.random.default_rng(1)
def photo(h, w):
    y, x = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3))
    for c in range(3):
        a, b = rng.uniform(0.02, 0.1, 2)
        img[:, :, c] = 128 + 90 * np.sin(a * x + b * y + c)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(8, 30)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    return np.clip(img, 0, 255).astype(np.uint8)
import make_translation_data as m
for sub, names in (("train", m.TRAIN), ("val", m.TEST)):
    os.makedirs(os.path.join(root, sub))
    for n in names:
        open(os.path.join(root, sub, n), "wb").write(m.png_bytes(photo(140, 200)))
PY_PHOTOS
"$PY" "$ROOT/scripts/make_translation_data.py" "$T/sample" "$T/data" > "$T/mk.out" \
  || { cat "$T/mk.out"; fail "make_translation_data"; }
D="$T/data/cyclegan_tiny"
for s in trainA trainB testA testB; do [ -n "$(ls "$D/$s")" ] || fail "no images in $s"; done

# ---- train: uninterrupted, and stopped at 4 then resumed ----
SETS=(--set "data.train.dataroot=\"$D\"" --set "data.val.dataroot=\"$D\""
      --set total_iters=8 --set checkpoint_config.interval=4 --set evaluation.interval=4
      --set evaluation.num_images=2 --set log_config.interval=2 --set data.samples_per_gpu=2
      --set model.train_cfg.buffer_size=8)
CFG="$ROOT/configs/cyclegan_tiny.cfg"
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/a" "${SETS[@]}" > "$T/a.out" 2>&1 \
  || { cat "$T/a.out"; fail "train"; }
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/b" "${SETS[@]}" --set total_iters=4 \
  > "$T/b.out" 2>&1 || { cat "$T/b.out"; fail "train to 4"; }
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/b" "${SETS[@]}" --resume >> "$T/b.out" 2>&1 \
  || { cat "$T/b.out"; fail "resume"; }
grep -q "resumed from .*latest.safetensors at iteration 4" "$T/b.out" \
  || { cat "$T/b.out"; fail "no resume message"; }
[ -s "$T/a/val/iter_8.png" ] || fail "no evaluation picture"

"$PY" - "$T" <<'PY_CHECK'
import json, struct, sys
T = sys.argv[1]
def st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}, meta
train = [json.loads(l) for l in open(T + "/a/log.jsonl")]
train = [r for r in train if r["mode"] == "train"]
assert [r["iter"] for r in train] == [2, 4, 6, 8], train
for r in train:
    for k in ("loss_id_a", "loss_id_b", "loss_gan_g_a", "loss_gan_g_b", "loss_cycle_a",
              "loss_cycle_b", "loss_gan_d_a", "loss_gan_d_b"):
        assert k in r and r[k] > 0, (k, r)
    # MMEditing's total: the generators' parse_losses (issue 33).
    g = sum(r[k] for k in ("loss_id_a", "loss_id_b", "loss_gan_g_a", "loss_gan_g_b",
                           "loss_cycle_a", "loss_cycle_b"))
    assert "loss" in r and abs(r["loss"] - g) <= 1e-6 * g, (r.get("loss"), g)
import glob
# ... and in mmcv's .log.json and the text log beside it.
js = [json.loads(l) for f in glob.glob(T + "/a/*.log.json") for l in open(f)]
assert any("loss" in j and j.get("mode") == "train" for j in js), js[:3]
assert any(", loss: " in l for f in glob.glob(T + "/a/*.log") for l in open(f))
a, ma = st(T + "/a/latest.safetensors")
b, mb = st(T + "/b/latest.safetensors")
assert ma["iter"] == "8" and mb["iter"] == "8", (ma, mb)
assert "generators.a.model.0.conv.weight" in a and "discriminators.b.model.4.bias" in a
# 8 iterations x 2 ranks x 2 images: both pools full (8 images of 3x64x64).
for p in ("a", "b"):
    assert ma["cyclegan.pool_%s.count" % p] == "8", ma
    assert len(a["state.cyclegan.pool_" + p]) == 8 * 3 * 64 * 64 * 4
assert int(ma["cyclegan.pool_rng_counter"]) > 0 and ma["cyclegan.step_counter"] == "8", ma
assert set(a) == set(b), set(a) ^ set(b)
diff = [k for k in a if a[k] != b[k]]
assert not diff, "the resumed run differs from the uninterrupted one in: %s" % diff[:5]
for k in ma:
    if k.startswith("cyclegan."):
        assert ma[k] == mb[k], (k, ma[k], mb[k])
print("test_cyclegan_e2e: resumed == uninterrupted on 2 processes (%d tensors, pools "
      "included, bitwise)" % len(a))
PY_CHECK

# ---- duet test: one output per test image ----
"${MPI[@]}" "$DUET" test "$CFG" "$T/a/latest.safetensors" "${SETS[@]}" --json --out "$T/test" \
  > "$T/test.json" 2> "$T/test.err" || { cat "$T/test.err"; fail "duet test"; }
n=$(ls "$D/testA" | wc -l)
[ "$(ls "$T/test" | wc -l)" -eq "$n" ] || { ls "$T/test"; fail "duet test: want $n outputs"; }
# ---- metrics only where computed; the grid follows the direction (issue 33) ----
# CycleGAN's test_cfg names no metrics: no PSNR/SSIM in the log or in duet
# test --json (MMEditing computes none for translation).
"$PY" - "$T/a/log.jsonl" "$T/test.json" <<'PY_METRICS' || fail "metrics that were never computed"
import json, sys
val = [r for r in map(json.loads, open(sys.argv[1])) if r["mode"] == "val"]
assert val, "no val records"
for r in val:
    assert not ({"PSNR", "SSIM"} & set(r)), r
t = json.load(open(sys.argv[2]))
assert set(t) == {"images"}, t
PY_METRICS
# One iteration evaluated in each direction: the b2a grid's first column
# is the a2b grid's last (real B is the input), and the titles differ.
for d in a2b b2a; do
  "$DUET" train "$CFG" --work-dir "$T/dir_$d" "${SETS[@]}" --set total_iters=1 --set evaluation.interval=1 \
    --set "model.test_cfg.direction=\"$d\"" --set "model.train_cfg.direction=\"$d\"" > "$T/dir_$d.out" 2>&1 \
    || { cat "$T/dir_$d.out"; fail "train $d"; }
done
"$PY" - "$T/dir_a2b/val/iter_1.png" "$T/dir_b2a/val/iter_1.png" <<'PY_GRID' || fail "the grid does not follow the direction"
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "e2e"))
from pngio import read_png
def panels(path):
    w, h, c, rows = read_png(path)
    px = bytes(b"".join(rows))
    strip = 7 + 6                       # the titles' strip (64 px panels: scale 1)
    pw = (w - 8) // 3
    def panel(k, y0, y1):
        return [px[(y * w + x) * c:(y * w + x) * c + 3] for y in range(y0, y1)
                for x in range(k * (pw + 4), k * (pw + 4) + pw)]
    return [panel(k, strip, strip + pw) for k in range(3)], [panel(k, 0, strip) for k in range(3)]
(a, ta), (b, tb) = panels(sys.argv[1]), panels(sys.argv[2])
assert a[0] == b[2] and a[2] == b[0], "real A / real B columns do not swap with the direction"
assert a[0] != a[2]
for t in ta + tb:                       # each title has dark pixels on white
    assert any(p == b"\x00\x00\x00" for p in t) and any(p == b"\xff\xff\xff" for p in t)
assert ta[0] != tb[0] and ta[1] != tb[1], "the titles do not follow the direction"
print("test_cyclegan_e2e: the grid reads real A | fake B | real B in each direction, titled")
PY_GRID
echo "test_cyclegan_e2e: OK"
