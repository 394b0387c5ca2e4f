#!/usr/bin/env bash
# Weights back to MMEditing (issue 23): for each of duet's MMEditing models
# (BasicRestorer/MSRResNet, SRGAN, ESRGAN, Pix2Pix, CycleGAN), one training
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

# Images of any size (smooth, seeded): png W H PATH.
png() {
  "$PY" - "$@" <<'PY_PNG'
import math, os, random, struct, sys, zlib
w, h, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(path)
a = [rng.uniform(0.05, 0.3) for _ in range(6)]
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
raw = b"".join(b"\x00" + bytes(int(127 + 120 * math.sin(a[c] * x + a[c + 3] * y + c))
                               for x in range(w) for c in range(3)) for y in range(h))
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY_PNG
}
for i in 0 1; do
  png 128 128 "$T/sr/$i.png"
  png 128 64 "$T/p2p/train/$i.png"; png 128 64 "$T/p2p/test/$i.png"
  for s in trainA trainB testA testB; do png 64 64 "$T/cg/$s/$i.png"; done
done
png 24 20 "$T/in_sr.png"
png 64 64 "$T/in_tr.png"

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
run srgan srgan_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}" "${gan[@]}"
run esrgan esrgan_x4_tiny.cfg "$T/in_sr.png" "${sr_data[@]}" "${gan[@]}"
run pix2pix pix2pix_tiny.cfg "$T/in_tr.png" --set "data.train.dataroot=\"$T/p2p\"" \
  --set "data.val.dataroot=\"$T/p2p\"" --set model.generator.use_dropout=false
run cyclegan cyclegan_tiny.cfg "$T/in_tr.png" --set "data.train.dataroot=\"$T/cg\"" \
  --set "data.val.dataroot=\"$T/cg\""
echo "test_export_pth_mmedit: ok"
