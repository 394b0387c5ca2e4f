# Shared by the e2e scripts (sourced, not a test): the set-up every script
# makes, random RGB PNGs and a tiny x4 MSRResNet config on them. Needs
# python3 (standard library only). The Python snippets below read and write
# PNGs through tests/e2e/pngio.py (E2E_DIR, on their path).
export E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# e2e_begin NAME: DUET (from DUET_EXE, set by CTest), PY, a fresh folder T
# (removed on exit unless KEEP=1), fail() that names the test, one BLAS
# thread, warnings only, no progress bar, no DUET_TIMEOUT from outside.
e2e_begin() {
  E2E_NAME=$1
  DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
  PY=${PYTHON:-python3}
  T=$(mktemp -d "/tmp/duet_${1}_XXXXXX")
  [ -d "$T" ] || exit 1
  trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
  export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn DUET_PROGRESS=0
  unset DUET_TIMEOUT
}
fail() { echo "${E2E_NAME:-e2e}: FAIL: $*" >&2; exit 1; }

# e2e_pngs DIR COUNT [SIZE]: COUNT random SIZE x SIZE (default 16) PNGs,
# 00.png, 01.png, ..., seeded (the same bytes every run).
e2e_pngs() {
  "${PY:-python3}" - "$1" "$2" "${3:-16}" <<'PY_PNGS'
import os, random, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
folder, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
os.makedirs(folder, exist_ok=True)
for i in range(count):
    write_png(os.path.join(folder, "%02d.png" % i), size, size, 3,
              [rng.randint(0, 255) for _ in range(size * size * 3)])
PY_PNGS
}

# e2e_photo PATH W H [SEED]: a smooth, photo-like W x H RGB PNG (sines
# whose frequencies follow SEED), for inputs whose outputs are compared:
# random noise would make every difference look alike.
e2e_photo() {
  "${PY:-python3}" - "$@" <<'PY_PHOTO'
import math, os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
fx, fy = 0.3 - 0.01 * seed, 0.17 + 0.02 * seed
write_png(path, w, h, 3, [int(127 + 120 * math.sin(fx * x + fy * y * (c + 1) + c))
                          for y in range(h) for x in range(w) for c in range(3)])
PY_PHOTO
}

# e2e_tiny_cfg FILE GT_FOLDER MID BLOCKS [MORE]: a BasicRestorer config
# (MSRResNet x4 of MID channels and BLOCKS blocks, L1, Adam, one image per
# process, 8 px crops), then MORE (more top-level settings) verbatim.
e2e_tiny_cfg() {
  cat > "$1" <<CFG_END
# written by tests/e2e/common.sh
model = {
  type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3;
                mid_channels = $3; num_blocks = $4; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; };
};
data = {
  samples_per_gpu = 1;
  train = { type = "SRFolderGTDataset"; gt_folder = "$2"; scale = 4; gt_patch_size = 8; };
};
optimizers = { generator = { type = "Adam"; lr = 1e-3; }; };
seed = 1;
${5:-}
CFG_END
}

# e2e_inpainting_photos DIR W H CROP TRAIN_TXT VAL_TXT: smooth W x H stand-ins
# for the sample photos under the names the annotation files list (as .png),
# for the inpainting configs: sines whose frequencies follow each photo's
# index, scaled so that a CROP crop resized to CROP / 4 looks alike whatever
# CROP (a hole is then filled well by what surrounds it, which a short run
# can learn); the held-out photos' frequencies lie between the training
# photos'. Also writes DIR/train.txt and DIR/val.txt pointing at the PNGs.
e2e_inpainting_photos() {
  "${PY:-python3}" - "$@" <<'PY_INPAINT'
import math, os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
root, w, h, crop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
train = [l.split()[0] for l in open(sys.argv[5]) if l.strip()]
val = [l.split()[0] for l in open(sys.argv[6]) if l.strip()]
named = list(zip(train, range(len(train)))) + list(zip(val, (1.5, 3.5)))
scale = 128.0 / crop
for name, k in named:
    fx, fy = (0.012 + 0.003 * k) * scale, (0.02 - 0.002 * k) * scale
    write_png(os.path.join(root, os.path.splitext(name)[0] + ".png"), w, h, 3,
              [int(127 + 100 * math.sin(fx * x + (c + 1) * fy * y + 2 * c + k))
               for y in range(h) for x in range(w) for c in range(3)])
for src, dst in ((sys.argv[5], "train.txt"), (sys.argv[6], "val.txt")):
    with open(os.path.join(root, dst), "w") as f:
        for l in open(src):
            if l.strip():
                f.write(os.path.splitext(l.split()[0])[0] + ".png\n")
PY_INPAINT
}

# e2e_mask_png PATH SIZE TOP LEFT H W: a SIZE x SIZE grey mask PNG, 255 in
# the H x W box at (TOP, LEFT) (the hole), 0 elsewhere.
e2e_mask_png() {
  "${PY:-python3}" - "$@" <<'PY_MASK'
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
path, n, top, left, h, w = sys.argv[1], *map(int, sys.argv[2:7])
write_png(path, n, n, 1, [255 if top <= y < top + h and left <= x < left + w else 0
                          for y in range(n) for x in range(n)])
PY_MASK
}

# e2e_inpaint_outputs CFG SIZE TOP LEFT H W: what an inpaintor's run under
# $T/w (trained with the overrides in SETS on the stand-in photos of
# e2e_inpainting_photos) must give: `duet test --out` names the masked
# input's row and writes both held-out photos; `duet infer --mask` with a
# TOP LEFT H x W hole in the SIZE x SIZE view the val pipeline makes
# ($T/hole.png) writes the filled SIZE x SIZE RGB image; `duet infer`
# without --mask is refused with the reason.
e2e_inpaint_outputs() {
  local CFG=$1 SIZE=$2
  "$DUET" test "$CFG" "$T/w/latest.safetensors" "${SETS[@]}" --out "$T/filled" > "$T/test.out" \
    2>&1 || { cat "$T/test.out"; fail "test"; }
  grep -q "input .*(the masked input itself)" "$T/test.out" || { cat "$T/test.out"; fail "no input row"; }
  for n in motorcycle_left rocket; do
    [ -s "$T/filled/val/$n.png" ] || [ -s "$T/filled/$n.png" ] || { ls -R "$T/filled"; fail "no $n.png"; }
  done
  e2e_mask_png "$T/hole.png" "$SIZE" "$3" "$4" "$5" "$6"
  "$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/sample/val/rocket.png" --mask "$T/hole.png" \
    --out "$T/inf" "${SETS[@]}" > "$T/infer.out" 2>&1 || { cat "$T/infer.out"; fail "infer --mask"; }
  [ -s "$T/inf/rocket.png" ] || fail "infer wrote no rocket.png"
  "$PY" - "$T/inf/rocket.png" "$SIZE" <<'PY_SIZE' || fail "the filled image is not ${SIZE}x${SIZE} RGB"
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import read_png
w, h, c, _ = read_png(sys.argv[1])
n = int(sys.argv[2])
assert (w, h, c) == (n, n, 3), (w, h, c)
PY_SIZE
  if "$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/sample/val/rocket.png" --out "$T/inf2" \
    "${SETS[@]}" > "$T/nomask.out" 2>&1; then
    fail "infer without --mask succeeded for an inpaintor"
  fi
  grep -q "give the hole as --mask MASK" "$T/nomask.out" || { cat "$T/nomask.out"; fail "no clear error"; }
  # A mask of the wrong size: the error gives the size it must have (issue 33).
  e2e_mask_png "$T/big_hole.png" $((SIZE + 8)) "$3" "$4" "$5" "$6"
  if "$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/sample/val/rocket.png" --mask "$T/big_hole.png" \
    --out "$T/inf3" "${SETS[@]}" > "$T/bigmask.out" 2>&1; then
    fail "infer with a mask of the wrong size succeeded"
  fi
  grep -q "the mask is $((SIZE + 8))x$((SIZE + 8)) (WxH), but .* the mask must be ${SIZE}x${SIZE} (duet infer --mask: a ${SIZE}x${SIZE} image" \
    "$T/bigmask.out" || { cat "$T/bigmask.out"; fail "the wrong-mask error does not give the size"; }
}

# One DeepFill tiny config end to end on 2 processes (test_deepfillv1_e2e.sh,
# test_deepfillv2_e2e.sh): E2E_DEEPFILL_GAIN_DB=X e2e_deepfill CFG LOG_KEY...
# trains CFG 100 iterations on smooth stand-in photos written under the
# sample photos' names (nothing is downloaded), then checks:
# - every LOG_KEY is in the log at iterations 10, 50 and 100, and stage 2's
#   L1 in the hole falls;
# - `duet test --json` on the two held-out stand-ins: the filled images beat
#   the masked input itself by at least X dB of PSNR, and by L1 in the hole;
#   `duet test --out` writes the filled images;
# - the evaluation picture is where the log says;
# - `duet infer --mask` writes the filled 72x72 image, in RGB (a red photo
#   stays red outside the hole); without --mask it is refused with the
#   reason.
# X is a third or less of what the scripts' runs measured (README,
# "Inpainting": v1 +8.7 dB, v2 +5.0 dB), so the verdict does not turn on
# last-bit differences; with MMEditing's 0.02 init instead of the configs'
# init_cfg.gain, v2 fills its holes with one flat colour and scores 1.6 dB
# below the masked input, which this check refuses.
e2e_deepfill() {
  local CFG=$1
  shift
  [ -n "${E2E_DEEPFILL_GAIN_DB:-}" ] || fail "e2e_deepfill: set E2E_DEEPFILL_GAIN_DB"
  export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
  MPI=(mpiexec -n 2 --oversubscribe)
  [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

  e2e_inpainting_photos "$T/sample" 300 300 288 "$ROOT/configs/inpainting_tiny/train.txt" \
    "$ROOT/configs/inpainting_tiny/val.txt"
  SETS=(--set "data.train.ann_file=\"$T/sample/train.txt\"" --set "data.train.data_prefix=\"$T/sample\""
      --set "data.val.ann_file=\"$T/sample/val.txt\"" --set "data.val.data_prefix=\"$T/sample\""
      --set total_iters=100 --set checkpoint_config.interval=50 --set evaluation.interval=100
      --set log_config.interval=10)
  "${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/w" "${SETS[@]}" > "$T/train.out" 2>&1 \
    || { cat "$T/train.out"; fail "train"; }

  "$PY" - "$T/w/log.jsonl" "$@" <<'PY_LOG' || fail "the log lacks a term or the L1 did not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_iter = {r["iter"]: r for r in rows if r.get("mode") == "train"}
for i in (10, 50, 100):
    for k in sys.argv[2:]:
        assert k in by_iter[i], (i, k, by_iter[i])
assert by_iter[100]["stage2_loss_l1_hole"] < by_iter[10]["stage2_loss_l1_hole"], by_iter
PY_LOG

  pic=$(sed -n 's/.*evaluation images (input | output | ground truth): \(.*\)$/\1/p' "$T/train.out" \
    | tail -1)
  [ -n "$pic" ] && [ -s "$pic" ] || { cat "$T/train.out"; fail "no evaluation picture at '$pic'"; }

  "$DUET" test "$CFG" "$T/w/latest.safetensors" "${SETS[@]}" --json > "$T/test.json" \
    2> "$T/test.err" || { cat "$T/test.err"; fail "test --json"; }
  echo "e2e_deepfill: held-out stand-ins after 100 iterations: $(cat "$T/test.json")"
  "$PY" - "$T/test.json" "$E2E_DEEPFILL_GAIN_DB" <<'PY_TEST' \
    || { cat "$T/test.json"; fail "test --json: a metric missing, or the fill not better than the masked input by $E2E_DEEPFILL_GAIN_DB dB"; }
import json, math, sys
r = json.loads(open(sys.argv[1]).read())
assert r["images"] == 2, r
for k in ("l1", "psnr", "ssim", "l1_input", "psnr_input", "ssim_input"):
    assert math.isfinite(r[k]), (k, r)
assert r["psnr"] >= r["psnr_input"] + float(sys.argv[2]), r
assert r["l1"] < r["l1_input"], r
PY_TEST
  # A hole in the middle of the 72x72 view the val pipeline makes of the
  # photo (centre crop 288, resize 72); the mask is at that size, as LoadMask
  # gives it. The red photo below reuses it ($T/hole.png).
  e2e_inpaint_outputs "$CFG" 72 24 20 24 28
  # The written images are RGB: the pipeline loads BGR (MMEditing's
  # default, as its inpainting configs do), so the writer swaps back. A red
  # photo stays red outside the hole.
  "$PY" - "$T/red/red.png" <<'PY_RED'
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
write_png(sys.argv[1], 300, 300, 3, bytes((230, 20, 10)) * (300 * 300))
PY_RED
  "$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/red/red.png" --mask "$T/hole.png" \
    --out "$T/inf_red" "${SETS[@]}" > "$T/infer_red.out" 2>&1 || { cat "$T/infer_red.out"; fail "infer red"; }
  "$PY" - "$T/inf_red/red.png" <<'PY_RGB' || fail "infer wrote the channels in the wrong order"
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "e2e"))
from pngio import read_png
w, h, c, rows = read_png(sys.argv[1])
corner = list(rows[0][0:3])  # row 0, column 0: outside the hole
assert abs(corner[0] - 230) <= 1 and abs(corner[1] - 20) <= 1 and abs(corner[2] - 10) <= 1, corner
PY_RGB
}
