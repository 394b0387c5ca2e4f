#!/usr/bin/env bash
# End to end for DeepFillv2 (TwoStageInpaintor) on 2 processes:
# configs/deepfillv2_tiny.cfg (its annotation files, data_prefix pointed at
# smooth stand-in photos this script writes under the sample photos' names,
# so nothing is downloaded) trains 40 iterations of free-form masks:
# - the log holds both stages' L1 terms, the adversarial term and the
#   discriminator's hinge losses, and stage 2's L1 in the hole falls;
# - the final generator fills the held-out images better than the masked
#   input itself (PSNR and L1 in the hole, `duet test --json`), and the
#   test writes the filled images;
# - the evaluation picture is where the log says;
# - `duet infer --mask` writes the filled 72x72 image; without --mask it is
#   refused with the reason.
source "$(dirname "$0")/common.sh"
e2e_begin deepfillv2_e2e
export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

e2e_inpainting_photos "$T/sample" 300 300 288 "$ROOT/configs/inpainting_tiny/train.txt" \
  "$ROOT/configs/inpainting_tiny/val.txt"
SETS=(--set "data.train.ann_file=\"$T/sample/train.txt\"" --set "data.train.data_prefix=\"$T/sample\""
      --set "data.val.ann_file=\"$T/sample/val.txt\"" --set "data.val.data_prefix=\"$T/sample\""
      --set total_iters=100 --set checkpoint_config.interval=50 --set evaluation.interval=100
      --set log_config.interval=10)
CFG="$ROOT/configs/deepfillv2_tiny.cfg"
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/w" "${SETS[@]}" > "$T/train.out" 2>&1 \
  || { cat "$T/train.out"; fail "train"; }

"$PY" - "$T/w/log.jsonl" <<'PY_LOG' || fail "the log lacks a term or the L1 did not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_iter = {r["iter"]: r for r in rows if r.get("mode") == "train"}
for i in (10, 50, 100):
    for k in ("real_loss", "fake_loss", "stage1_loss_l1_hole", "stage1_loss_l1_valid",
              "stage2_loss_l1_hole", "stage2_loss_l1_valid", "stage2_loss_g_fake"):
        assert k in by_iter[i], (i, k, by_iter[i])
assert by_iter[100]["stage2_loss_l1_hole"] < by_iter[10]["stage2_loss_l1_hole"], by_iter
PY_LOG

pic=$(sed -n 's/.*evaluation images (input | output | ground truth): \(.*\)$/\1/p' "$T/train.out" \
  | tail -1)
[ -n "$pic" ] && [ -s "$pic" ] || { cat "$T/train.out"; fail "no evaluation picture at '$pic'"; }

"$DUET" test "$CFG" "$T/w/latest.safetensors" "${SETS[@]}" --json > "$T/test.json" \
  2> "$T/test.err" || { cat "$T/test.err"; fail "test --json"; }
"$PY" - "$T/test.json" <<'PY_TEST' || { cat "$T/test.json"; fail "no better than the masked input"; }
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["images"] == 2, r
assert r["psnr"] > r["psnr_input"] + 0.5, r
assert r["l1"] < 0.9 * r["l1_input"], r
PY_TEST
"$DUET" test "$CFG" "$T/w/latest.safetensors" "${SETS[@]}" --out "$T/filled" > "$T/test.out" \
  2>&1 || { cat "$T/test.out"; fail "test"; }
grep -q "input .*(the masked input itself)" "$T/test.out" || { cat "$T/test.out"; fail "no input row"; }
for n in motorcycle_left rocket; do
  [ -s "$T/filled/val/$n.png" ] || [ -s "$T/filled/$n.png" ] || { ls -R "$T/filled"; fail "no $n.png"; }
done

# A hole in the middle of the 72x72 view the val pipeline makes of the
# photo (centre crop 288, resize 72); the mask is at that size, as LoadMask
# gives it.
e2e_mask_png "$T/hole.png" 72 24 20 24 28
"$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/sample/val/rocket.png" --mask "$T/hole.png" \
  --out "$T/inf" "${SETS[@]}" > "$T/infer.out" 2>&1 || { cat "$T/infer.out"; fail "infer --mask"; }
[ -s "$T/inf/rocket.png" ] || fail "infer wrote no rocket.png"
"$PY" - "$T/inf/rocket.png" <<'PY_SIZE' || fail "the filled image is not 72x72 RGB"
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "e2e"))
from pngio import read_png
w, h, c, _ = read_png(sys.argv[1])
assert (w, h, c) == (72, 72, 3), (w, h, c)
PY_SIZE
if "$DUET" infer "$CFG" "$T/w/latest.safetensors" "$T/sample/val/rocket.png" --out "$T/inf2" \
    "${SETS[@]}" > "$T/nomask.out" 2>&1; then
  fail "infer without --mask succeeded for an inpaintor"
fi
grep -q "give the hole as --mask MASK" "$T/nomask.out" || { cat "$T/nomask.out"; fail "no clear error"; }
echo "test_deepfillv2_e2e: ok"
