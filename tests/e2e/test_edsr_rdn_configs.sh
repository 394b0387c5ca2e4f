#!/usr/bin/env bash
# MMEditing 0.16.1's own EDSR and RDN configs (restorers/edsr/*.py,
# restorers/rdn/*.py from the MMEditing venv of scripts/make-mmedit-venv.sh)
# through scripts/convert-config.py, then `duet train --dry-run` accepts each
# as it is, run in a folder holding the data the config names (a stand-in
# DIV2K: sub-image folders and annotation file, Set5 folders, every image a
# random PNG of a size each scale divides). Only load_from and resume_from
# are cleared: the x3 and x4 EDSR configs start from the x2 run's
# iter_300000.pth, and rdn_x3 resumes from its own iter_315000.pth, files
# that do not exist here. Then the tiny configs (configs/edsr_x4_tiny.cfg,
# rdn_x4_tiny.cfg) train 2 iterations, resume and test on stand-in photos.
# Without the venv the MMEditing part skips, saying so.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_edsr_rdn_configs
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CONVERT="$ROOT/scripts/convert-config.py"

# ---- the tiny configs: train, resume, test ----
e2e_pngs "$T/photos/train" 2 64
e2e_pngs "$T/photos/val" 1 48
for name in edsr rdn; do
  data=(--set "data.train.gt_folder=\"$T/photos/train\"" --set "data.val.gt_folder=\"$T/photos/val\""
        --set data.samples_per_gpu=2 --set checkpoint_config.interval=1 --set evaluation.interval=2)
  "$DUET" train "$ROOT/configs/${name}_x4_tiny.cfg" --work-dir "$T/w_$name" --set total_iters=1 \
    "${data[@]}" > "$T/$name.train" 2>&1 || fail "$name: train: $(tail -5 "$T/$name.train")"
  "$DUET" train "$ROOT/configs/${name}_x4_tiny.cfg" --work-dir "$T/w_$name" --set total_iters=2 \
    --resume "${data[@]}" > "$T/$name.resume" 2>&1 || fail "$name: resume: $(tail -5 "$T/$name.resume")"
  "$DUET" test "$ROOT/configs/${name}_x4_tiny.cfg" "$T/w_$name/latest.safetensors" \
    "${data[@]}" > "$T/$name.test" 2>&1 || fail "$name: test: $(tail -5 "$T/$name.test")"
  grep -q "PSNR" "$T/$name.test" || fail "$name: no PSNR: $(cat "$T/$name.test")"
done

VENV=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
MIM=$(ls -d "$VENV"/lib/python3*/site-packages/mmedit/.mim/configs/restorers 2> /dev/null | head -1 || true)
if [ -z "$MIM" ]; then
  echo "test_edsr_rdn_configs: MMEditing's own configs not checked: no MMEditing venv at $VENV (scripts/make-mmedit-venv.sh)"
  echo "test_edsr_rdn_configs: ok"
  exit 0
fi

# Every folder and annotation file the configs name, relative to $T/run.
"$PY" - "$T/run" <<'PY_DATA'
import os, random, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
root = sys.argv[1]
rng = random.Random(3)
def png(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_png(path, size, size, 3, [rng.randint(0, 255) for _ in range(size * size * 3)])
GT = 240  # divided by 2, 3 and 4; above EDSR x4's 196-pixel GT patches
names = ["0001_s001.png", "0002_s001.png"]
d = os.path.join(root, "data", "DIV2K")
for n in names:
    png(os.path.join(d, "DIV2K_train_HR_sub", n), GT)
    for s in (2, 3, 4):
        png(os.path.join(d, "DIV2K_train_LR_bicubic", "X%d_sub" % s, n), GT // s)
with open(os.path.join(d, "meta_info_DIV2K800sub_GT.txt"), "w") as f:
    f.writelines("%s (%d,%d,3)\n" % (n, GT, GT) for n in names)
v = os.path.join(root, "data", "val_set5")
for n in ("baby.png", "bird.png"):
    for gt in ("Set5", "Set5_mod12"):
        png(os.path.join(v, gt, n), 120)
    for s in (2, 3, 4):
        png(os.path.join(v, "Set5_bicLRx%d" % s, n), 120 // s)
PY_DATA

checked=0
for c in edsr/edsr_x2c64b16_g1_300k_div2k edsr/edsr_x3c64b16_g1_300k_div2k \
         edsr/edsr_x4c64b16_g1_300k_div2k rdn/rdn_x2c64b16_g1_1000k_div2k \
         rdn/rdn_x3c64b16_g1_1000k_div2k rdn/rdn_x4c64b16_g1_1000k_div2k; do
  n=$(basename "$c")
  "$PY" "$CONVERT" "$MIM/$c.py" -o "$T/$n.cfg" > "$T/$n.conv" 2>&1 || fail "convert $c: $(cat "$T/$n.conv")"
  (cd "$T/run" && "$DUET" train "$T/$n.cfg" --dry-run --set 'load_from=""' \
    --set 'resume_from=""') > "$T/$n.dry" 2>&1 \
    || fail "$c: duet train --dry-run: $(tail -5 "$T/$n.dry")"
  grep -q "is ready to train; nothing was written" "$T/$n.dry" || fail "$c: $(cat "$T/$n.dry")"
  type=${n%%_*}
  grep -q "generator: .* parameters" "$T/$n.dry" || fail "$c: no model line: $(cat "$T/$n.dry")"
  grep -qi "type = \"${type}\"" "$T/$n.cfg" || fail "$c: no generator type ${type}"
  checked=$((checked + 1))
done
[ "$checked" = 6 ] || fail "checked $checked configs"
echo "test_edsr_rdn_configs: MMEditing 0.16.1's 6 EDSR and RDN configs converted and accepted by duet train --dry-run"
echo "test_edsr_rdn_configs: ok"
