#!/usr/bin/env bash
# MMEditing 0.16.1's own PConv configs (inpainting/partial_conv/*.py from
# the MMEditing venv of scripts/make-mmedit-venv.sh) through
# scripts/convert-config.py, then `duet train --dry-run` accepts each as it
# is, run in a folder holding the data the config names (stand-in Places
# and CelebA folders, annotation files, 400x400 random PNGs for the 384
# crops). Only the perceptual loss's pretrained = 'torchvision://vgg16' is
# cleared: duet reads VGG weights from a safetensors file the user converts
# (scripts/convert-pth.py), and without one it says so and starts from a
# seeded random VGG. Stage 2 (norm_eval: the encoder's BatchNorm frozen)
# builds too. First configs/pconv_tiny.cfg trains 2 iterations on 2
# processes, resumes to 3 and is tested, on stand-in photos. Without the
# venv the MMEditing part is skipped, saying so.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_pconv_configs
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CONVERT="$ROOT/scripts/convert-config.py"

# ---- the tiny config: train, resume, test ----
e2e_inpainting_photos "$T/sample" 300 280 256 "$ROOT/configs/inpainting_tiny/train.txt" \
  "$ROOT/configs/inpainting_tiny/val.txt"
sed 's/\.jpg$/.png/' "$ROOT/configs/inpainting_tiny/train.txt" > "$T/train.txt"
sed 's/\.jpg$/.png/' "$ROOT/configs/inpainting_tiny/val.txt" > "$T/val.txt"
SETS=(--set "data.train.ann_file=\"$T/train.txt\"" --set "data.train.data_prefix=\"$T/sample\""
      --set "data.val.ann_file=\"$T/val.txt\"" --set "data.val.data_prefix=\"$T/sample\""
      --set checkpoint_config.interval=1 --set evaluation.interval=3 --set data.samples_per_gpu=1)
MPI=(mpiexec -n 2 --oversubscribe)
"${MPI[@]}" "$DUET" train "$ROOT/configs/pconv_tiny.cfg" --work-dir "$T/w" --set total_iters=2 \
  "${SETS[@]}" > "$T/train.out" 2>&1 || fail "pconv_tiny: train: $(tail -5 "$T/train.out")"
"${MPI[@]}" "$DUET" train "$ROOT/configs/pconv_tiny.cfg" --work-dir "$T/w" --set total_iters=3 \
  --resume "${SETS[@]}" > "$T/resume.out" 2>&1 || fail "pconv_tiny: resume: $(tail -5 "$T/resume.out")"
"$DUET" test "$ROOT/configs/pconv_tiny.cfg" "$T/w/latest.safetensors" "${SETS[@]}" \
  > "$T/test.out" 2>&1 || fail "pconv_tiny: test: $(tail -5 "$T/test.out")"
grep -qi "psnr" "$T/test.out" || fail "pconv_tiny: no PSNR: $(cat "$T/test.out")"

VENV=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
MIM=$(ls -d "$VENV"/lib/python3*/site-packages/mmedit/.mim/configs/inpainting/partial_conv 2> /dev/null | head -1 || true)
if [ -z "$MIM" ]; then
  echo "test_pconv_configs: MMEditing's own configs not checked: no MMEditing venv at $VENV (scripts/make-mmedit-venv.sh)"
  echo "test_pconv_configs: ok"
  exit 0
fi
checked=0
for c in "$MIM"/pconv_*.py; do
  n=$(basename "$c" .py)
  "$PY" "$CONVERT" "$c" -o "$T/$n.cfg" > "$T/$n.conv" 2>&1 || fail "convert $n: $(cat "$T/$n.conv")"
  # every ann_file the config names, under its data_prefix, with two images
  "$PY" - "$T/$n.cfg" "$T/run" <<'PY_DATA'
import os, re, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
import random
text, root = open(sys.argv[1]).read(), sys.argv[2]
rng = random.Random(4)
for ann, prefix in re.findall(r'ann_file = "([^"]+)";\s*data_prefix = "([^"]+)";', text):
    os.makedirs(os.path.join(root, prefix), exist_ok=True)
    names = ["a.png", "b.png"]
    with open(os.path.join(root, ann), "w") as f:
        f.writelines(n + "\n" for n in names)
    for n in names:
        p = os.path.join(root, prefix, n)
        if not os.path.exists(p):
            write_png(p, 400, 400, 3, [rng.randint(0, 255) for _ in range(400 * 400 * 3)])
PY_DATA
  (cd "$T/run" && "$DUET" train "$T/$n.cfg" --dry-run \
     --set 'model.loss_composed_percep.pretrained="random"') > "$T/$n.dry" 2>&1 \
    || fail "$n: duet train --dry-run: $(tail -5 "$T/$n.dry")"
  grep -q "is ready to train; nothing was written" "$T/$n.dry" || fail "$n: $(cat "$T/$n.dry")"
  grep -q "generator: .* parameters" "$T/$n.dry" || fail "$n: no model line: $(cat "$T/$n.dry")"
  checked=$((checked + 1))
done
[ "$checked" = 4 ] || fail "checked $checked configs, expected MMEditing's 4"
echo "test_pconv_configs: MMEditing 0.16.1's $checked PConv configs converted and accepted by duet train --dry-run"
echo "test_pconv_configs: ok"
