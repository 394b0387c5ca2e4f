#!/usr/bin/env bash
# End to end for `duet infer` with the translation configs: after 2
# iterations of configs/pix2pix_tiny.cfg and configs/cyclegan_tiny.cfg,
# infer on the model's input image (Pix2Pix a2b and b2a: the A or B half of
# each test pair; CycleGAN a2b and b2a: the testA or testB images) must
# write exactly the PNG `duet test --out` writes for that sample: the input
# goes through data.val.pipeline (Resize, RescaleToZeroOne, Normalize to
# [-1, 1]) and the output is mapped back from [-1, 1] to [0, 255]. Both
# refuse a checkpoint of another model (CycleGAN's with Pix2Pix's weights).
# Needs DUET_EXE (set by CTest) and python3 with numpy.
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
"$PY" -c 'import numpy' 2> /dev/null || PY=/usr/bin/python3
T=$(mktemp -d /tmp/duet_tinfer_e2e_XXXXXX)
[ -d "$T" ] || exit 1
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn
fail() { echo "test_translation_infer_e2e: FAIL: $*" >&2; exit 1; }

# ---- stand-in photos, the tiny data, and the infer inputs ----
"$PY" - "$T" <<'PY_DATA'
import os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["ROOT"], "scripts"))
import make_translation_data as m
T = sys.argv[1]
rng = np.random.default_rng(3)
def photo(h, w):
    y, x = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3))
    for c in range(3):
        a, b = rng.uniform(0.02, 0.1, 2)
        img[:, :, c] = 128 + 90 * np.sin(a * x + b * y + c)
    return np.clip(img, 0, 255).astype(np.uint8)
for sub, names in (("train", m.TRAIN), ("val", m.TEST)):
    os.makedirs(os.path.join(T, "sample", sub))
    for n in names:
        open(os.path.join(T, "sample", sub, n), "wb").write(m.png_bytes(photo(140, 200)))
PY_DATA
"$PY" "$ROOT/scripts/make_translation_data.py" "$T/sample" "$T/data" > "$T/mk.out" \
  || { cat "$T/mk.out"; fail "make_translation_data"; }
P="$T/data/pix2pix_tiny" C="$T/data/cyclegan_tiny"
# The halves of each test pair, named as the pair (outputs are <stem>.png).
"$PY" - "$P/test" "$T/halfA" "$T/halfB" <<'PY_HALVES'
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "scripts"))
import make_translation_data as m
src, da, db = sys.argv[1:4]
os.makedirs(da), os.makedirs(db)
for n in sorted(os.listdir(src)):
    img = m.read_png(os.path.join(src, n))
    w = img.shape[1] // 2
    open(os.path.join(da, n), "wb").write(m.png_bytes(img[:, :w].copy()))
    open(os.path.join(db, n), "wb").write(m.png_bytes(img[:, w:].copy()))
PY_HALVES

# check NAME CFG INPUT_DIR SETS...: train 2 iterations, duet test --out,
# duet infer on every image of INPUT_DIR, same bytes.
check() {
  local name=$1 cfg=$2 in=$3; shift 3
  local sets=(--set total_iters=2 --set checkpoint_config.interval=2
              --set evaluation.interval=100 --set log_config.interval=1 "$@")
  "$DUET" train "$cfg" --work-dir "$T/$name" "${sets[@]}" > "$T/$name.out" 2>&1 \
    || { cat "$T/$name.out"; fail "$name: train"; }
  "$DUET" test "$cfg" "$T/$name/latest.safetensors" "${sets[@]}" --out "$T/$name.test" \
    > "$T/$name.test.out" 2>&1 || { cat "$T/$name.test.out"; fail "$name: duet test"; }
  DUET_LOG=info "$DUET" infer "$cfg" "$T/$name/latest.safetensors" "$in"/*.png --out "$T/$name.infer" \
    "${sets[@]}" > "$T/$name.infer.out" 2>&1 || { cat "$T/$name.infer.out"; fail "$name: infer"; }
  grep -q "translated into" "$T/$name.infer.out" || { cat "$T/$name.infer.out"; fail "$name: log"; }
  local n=0
  for f in "$in"/*.png; do
    local b=$(basename "$f")
    cmp -s "$T/$name.test/$b" "$T/$name.infer/$b" \
      || fail "$name: infer's $b differs from duet test's"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] && [ "$(ls "$T/$name.test" | wc -l)" -ge "$n" ] || fail "$name: $n images"
  echo "test_translation_infer_e2e: $name: infer == duet test on $n images"
  # --tile would change the output (the generators normalise over the image).
  if "$DUET" infer "$cfg" "$T/$name/latest.safetensors" "$in"/*.png --out "$T/$name.tile" \
      --tile 16 "${sets[@]}" > "$T/$name.tile.out" 2>&1; then fail "$name: --tile accepted"; fi
  grep -q "cannot be made tile by tile; run without --tile" "$T/$name.tile.out" \
    || { cat "$T/$name.tile.out"; fail "$name: --tile refusal"; }
}
PC="$ROOT/configs/pix2pix_tiny.cfg" CC="$ROOT/configs/cyclegan_tiny.cfg"
PS=(--set "data.train.dataroot=\"$P\"" --set "data.val.dataroot=\"$P\"")
CS=(--set "data.train.dataroot=\"$C\"" --set "data.val.dataroot=\"$C\"")
check pix2pix_a2b "$PC" "$T/halfA" "${PS[@]}"
check pix2pix_b2a "$PC" "$T/halfB" "${PS[@]}" --set 'model.train_cfg.direction="b2a"' \
  --set 'model.test_cfg.direction="b2a"'
check cyclegan_a2b "$CC" "$C/testA" "${CS[@]}"
# MMEditing's CycleGAN reads test_cfg.test_direction; testB has 4 images
# (test sample i pairs testA[i] with testB[i % 4], under testA[i]'s name,
# which is testB[i]'s for i < 4).
check cyclegan_b2a "$CC" "$C/testB" "${CS[@]}" --set 'model.test_cfg.test_direction="b2a"'

# A checkpoint of another model is refused, naming the file and the part
# the model evaluates with (CycleGAN's "generators"), rather than run with
# random weights: duet test and duet infer of CycleGAN with Pix2Pix's.
wrong() {
  local what=$1; shift
  if "$DUET" "$@" > "$T/wrong.out" 2>&1; then
    cat "$T/wrong.out"; fail "$what: ran CycleGAN with a Pix2Pix checkpoint"
  fi
  grep -q "pix2pix_a2b/latest.safetensors lacks .*(generators\.\*)" "$T/wrong.out" \
    || { cat "$T/wrong.out"; fail "$what: no error naming the file and generators.*"; }
  echo "test_translation_infer_e2e: $what refuses a Pix2Pix checkpoint for CycleGAN"
}
wrong "duet test" test "$CC" "$T/pix2pix_a2b/latest.safetensors" "${CS[@]}"
wrong "duet infer" infer "$CC" "$T/pix2pix_a2b/latest.safetensors" "$C/testA"/*.png \
  --out "$T/wrong.infer" "${CS[@]}"
echo "test_translation_infer_e2e: OK"
