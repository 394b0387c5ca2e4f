#!/usr/bin/env bash
# End to end for the Global&Local inpaintor on 2 processes: configs/gl_tiny.cfg
# (its annotation files, data_prefix pointed at smooth stand-in photos this
# script writes under the sample photos' names, so nothing is downloaded)
# trains 60 iterations with the schedule shortened to iter_tc 40, iter_td 50:
# - the log shows each phase: L1 alone first, then the discriminators'
#   losses, then the adversarial term;
# - at the end of the L1 phase the generator fills the held-out images
#   better than the masked input itself (PSNR and L1 in the hole, `duet test
#   --json`); the final model's test writes the filled images;
# - the evaluation picture is where the log says;
# - `duet infer --mask` writes the filled 32x32 image; without --mask it is
#   refused with the reason.
source "$(dirname "$0")/common.sh"
e2e_begin gl_inpainting_e2e
export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

# Smooth photos: at the 32x32 the model sees (a 128 crop resized by 4) a
# hole is filled well by what surrounds it, which a short run can learn.
# (e2e_inpainting_photos at a 128 crop: the photos' frequencies as written
# for 32x32.)
e2e_inpainting_photos "$T/sample" 200 160 128 "$ROOT/configs/inpainting_tiny/train.txt" \
  "$ROOT/configs/inpainting_tiny/val.txt"
# The annotation files name .jpg files too: point them at the PNGs.
sed 's/\.jpg$/.png/' "$ROOT/configs/inpainting_tiny/train.txt" > "$T/train.txt"
sed 's/\.jpg$/.png/' "$ROOT/configs/inpainting_tiny/val.txt" > "$T/val.txt"

SETS=(--set "data.train.ann_file=\"$T/train.txt\"" --set "data.train.data_prefix=\"$T/sample\""
      --set "data.val.ann_file=\"$T/val.txt\"" --set "data.val.data_prefix=\"$T/sample\""
      --set total_iters=60 --set model.train_cfg.iter_tc=40 --set model.train_cfg.iter_td=50
      --set checkpoint_config.interval=20 --set evaluation.interval=60 --set log_config.interval=10
      --set data.samples_per_gpu=2)
CFG="$ROOT/configs/gl_tiny.cfg"
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/w" "${SETS[@]}" > "$T/train.out" 2>&1 \
  || { cat "$T/train.out"; fail "train"; }

"$PY" - "$T/w/log.jsonl" <<'PY_LOG' || fail "the log does not show the schedule's phases"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
train = [r for r in rows if r.get("mode") == "train"]
by_iter = {r["iter"]: r for r in train}
# iterations 1..40 (cur_iter 0..39): the generator alone on L1
for i in (10, 20, 30, 40):
    assert "loss_l1_hole" in by_iter[i] and "real_loss" not in by_iter[i], by_iter[i]
# 42..50: the discriminators alone; 51..60: the adversarial term too
assert "real_loss" in by_iter[50] and "fake_loss" in by_iter[50], by_iter[50]
assert "loss_g_fake" not in by_iter[50], by_iter[50]
assert "loss_g_fake" in by_iter[60] and "loss_l1_hole" in by_iter[60], by_iter[60]
assert by_iter[40]["loss_l1_hole"] < by_iter[10]["loss_l1_hole"], (by_iter[10], by_iter[40])
PY_LOG

pic=$(sed -n 's/.*evaluation images (input | output | ground truth): \(.*\)$/\1/p' "$T/train.out" \
  | tail -1)
[ -n "$pic" ] && [ -s "$pic" ] || { cat "$T/train.out"; fail "no evaluation picture at '$pic'"; }

# The generator at the end of its L1 phase (iteration 40) fills the
# held-out holes better than the masked input; the final model (after the
# adversarial phase began) is tested and its outputs written.
"$DUET" test "$CFG" "$T/w/iter_40.safetensors" "${SETS[@]}" --json > "$T/test40.json" \
  2> "$T/test40.err" || { cat "$T/test40.err"; fail "test at 40"; }
"$PY" - "$T/test40.json" <<'PY_TEST' || { cat "$T/test40.json"; fail "no better than the masked input"; }
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["images"] == 2, r
assert r["psnr"] > r["psnr_input"] + 0.5, r
assert r["l1"] < 0.9 * r["l1_input"], r
PY_TEST
# A hole in the middle of the 32x32 view the val pipeline makes of the
# photo (centre crop 128, resize 32): the mask is at that size, as
# MMEditing's LoadMask gives it (the pipeline resizes gt_img only).
e2e_inpaint_outputs "$CFG" 32 10 8 12 12
echo "test_gl_inpainting_e2e: ok"
