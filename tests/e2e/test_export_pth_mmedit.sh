#!/usr/bin/env bash
# Weights back to MMEditing (issue 23): for each of duet's MMEditing models
# (BasicRestorer around MSRResNet, EDSR and RDN, SRGAN, ESRGAN, Pix2Pix,
# CycleGAN), one training
# iteration of its tiny config in duet, scripts/export-pth.py, then MMEditing
# 0.16.1's own model (its own config scaled down the same way) takes the
# .pth with load_checkpoint(strict=True), holds every tensor bit for bit as
# duet's checkpoint has it, and its generator gives the image `duet infer`
# writes within one 8-bit level (tests/mmedit/export_check.py).
# Needs DUET_EXE (set by CTest), python3 (standard library) and the MMEditing
# venv (scripts/make-mmedit-venv.sh; make test makes it): without it the
# test skips and says how to make it, except under CI, where it fails.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_export_pth_mmedit
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
venv=${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/duet-stamp" ]; then
  [ "${CI:-}" != true ] || fail "no MMEditing venv at $venv under CI"
  echo "SKIP: no MMEditing venv at $venv; make it with: bash scripts/make-mmedit-venv.sh"
  exit 77
fi

for i in 0 1; do
  e2e_photo "$T/sr/$i.png" 128 128 "$i"
  e2e_photo "$T/p2p/train/$i.png" 128 64 "$i"; e2e_photo "$T/p2p/test/$i.png" 128 64 "$((i + 2))"
  for s in trainA trainB testA testB; do e2e_photo "$T/cg/$s/$i.png" 64 64 "$((i + ${#s}))"; done
done
e2e_photo "$T/in_sr.png" 24 20 5
e2e_photo "$T/in_tr.png" 64 64 6

sr_data=(--set "data.train.gt_folder=\"$T/sr\"" --set "data.val.gt_folder=\"$T/sr\""
         --set data.samples_per_gpu=1)
gan=(--set 'load_from=""' --set model.discriminator.input_size=128
     --set data.train.gt_patch_size=128
     --set 'model.perceptual_loss.cfg=[8, 8, 0, 16, 16]' --set 'model.perceptual_loss.layer_ids=[7]')
run() { # NAME CONFIG INPUT ARGS...
  local name=$1 cfg=$2 input=$3; shift 3
  "$DUET" train "$ROOT/configs/$cfg" --work-dir "$T/w_$name" --set total_iters=1 \
    --set checkpoint_config.interval=1 "$@" > "$T/$name.train" 2>&1 || fail "$name: train: $(tail -5 "$T/$name.train")"
  "$PY" "$ROOT/scripts/export-pth.py" "$T/w_$name/latest.safetensors" -o "$T/$name.pth" \
    > "$T/$name.export" 2>&1 || fail "$name: export: $(cat "$T/$name.export")"
  "$DUET" infer "$ROOT/configs/$cfg" "$T/w_$name/latest.safetensors" "$input" --out "$T/out_$name" \
    "$@" > "$T/$name.infer" 2>&1 || fail "$name: infer: $(cat "$T/$name.infer")"
  "$venv/bin/python" "$ROOT/tests/mmedit/export_check.py" "$name" "$T/w_$name/latest.safetensors" \
    "$T/$name.pth" "$input" "$T/out_$name/$(basename "$input")" > "$T/$name.check" 2>&1 \
    || fail "$name: MMEditing: $(tail -5 "$T/$name.check")"
  grep "export_check:" "$T/$name.check"
}
run msrresnet msrresnet_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}"
run edsr edsr_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}"
run rdn rdn_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}"
run srgan srgan_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}" "${gan[@]}"
run esrgan esrgan_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}" "${gan[@]}"
run pix2pix pix2pix_tiny.cfg "$T/in_tr.png" --set "data.train.dataroot=\"$T/p2p\"" \
  --set "data.val.dataroot=\"$T/p2p\"" --set model.generator.use_dropout=false
run cyclegan cyclegan_tiny.cfg "$T/in_tr.png" --set "data.train.dataroot=\"$T/cg\"" \
  --set "data.val.dataroot=\"$T/cg\""
echo "test_export_pth_mmedit: ok"
