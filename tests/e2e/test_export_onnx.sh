#!/usr/bin/env bash
# duet export CONFIG CKPT OUT.onnx (issue 23): for a tiny MSRResNet (x4 and
# x3), a tiny RRDBNet (ESRGAN, also exported with an EMA copy), Pix2Pix's
# UnetGenerator (batch norm with the image's statistics, as its test runs;
# dropout off, since infer's is random) and CycleGAN's ResnetGenerator
# (instance norm, reflection padding; generators.a by default), after two
# training iterations, onnx.checker accepts the file and onnxruntime's output
# on a photo-like image equals `duet infer`'s PNG of the same image: the
# ONNX float output mapped to [0, 255] as infer maps it is within 0.5
# (rounding) plus 1e-3 of every PNG value. A Pix2Pix with dropout exports
# with a note that its dropout is left out. Errors: an unknown part (naming
# the parts), a network the exporter does not know (naming its type), an
# unwritable output.
# Needs DUET_EXE (set by CTest), python3 and the tools venv
# (scripts/make-tools-venv.sh; make test makes it): without it the test
# skips and says how to make it, except under CI, where it fails.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_export_onnx
HERE=$(cd "$(dirname "$0")" && pwd)
venv=${DUET_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/tools-venv}
if ! "$venv/bin/python" -c "import onnxruntime, onnx" 2> /dev/null; then
  [ "${CI:-}" != true ] || fail "no onnxruntime in $venv under CI"
  echo "SKIP: no onnxruntime at $venv; make it with: bash scripts/make-tools-venv.sh"
  exit 77
fi

e2e_pngs "$T/data" 2 24
e2e_photo "$T/in.png" 29 19
common="total_iters = 2;
checkpoint_config = { interval = 2; };
log_config = { interval = 1000; };"
e2e_tiny_cfg "$T/msr4.cfg" "$T/data" 8 2 "$common"
e2e_tiny_cfg "$T/msr3.cfg" "$T/data" 8 1 "$common"
sed -i 's/upscale_factor = 4;/upscale_factor = 3;/; s/scale = 4; gt_patch_size = 8;/scale = 3; gt_patch_size = 9;/' "$T/msr3.cfg"
e2e_tiny_cfg "$T/rrdb.cfg" "$T/data" 8 2 "$common"
sed -i 's/type = "MSRResNet"; in_channels = 3; out_channels = 3;/type = "RRDBNet"; in_channels = 3; out_channels = 3; growth_channels = 4;/; s/upscale_factor = 4; //' "$T/rrdb.cfg"
cp "$T/rrdb.cfg" "$T/rrdb_ema.cfg"
cat >> "$T/rrdb_ema.cfg" <<'CFG'
custom_hooks = ( { type = "ExponentialMovingAverageHook"; module_keys = ["generator_ema"];
                   interval = 1; interp_cfg = { momentum = 0.9; }; } );
CFG

# Translation data: A|B pairs for Pix2Pix, unpaired folders for CycleGAN.
for i in 0 1; do
  e2e_photo "$T/p2p/train/$i.png" 128 64 "$i"; e2e_photo "$T/p2p/test/$i.png" 128 64 "$((i + 2))"
  for s in trainA trainB testA testB; do e2e_photo "$T/cg/$s/$i.png" 64 64 "$((i + ${#s}))"; done
done
e2e_photo "$T/in_tr.png" 64 64 7
ROOT=$(cd "$HERE/../.." && pwd)
P2P=(--set "data.train.dataroot=\"$T/p2p\"" --set "data.val.dataroot=\"$T/p2p\"")
CG=(--set "data.train.dataroot=\"$T/cg\"" --set "data.val.dataroot=\"$T/cg\"")
cp "$ROOT/configs/pix2pix_tiny.cfg" "$T/pix2pix.cfg"
cp "$ROOT/configs/cyclegan_tiny.cfg" "$T/cyclegan.cfg"

check() { # NAME CONFIG INPUT MAPPING(sr|signed) SETS...
  local name=$1 cfg=$2 input=$3 map=$4; shift 4
  local sets=(--set total_iters=2 --set checkpoint_config.interval=2 --set log_config.interval=1000 "$@")
  "$DUET" train "$cfg" --work-dir "$T/w_$name" "${sets[@]}" > "$T/$name.train" 2>&1 \
    || fail "$name: train: $(tail -3 "$T/$name.train")"
  "$DUET" export "$cfg" "$T/w_$name/latest.safetensors" "$T/$name.onnx" "${sets[@]}" > "$T/$name.export" 2>&1 \
    || fail "$name: export: $(cat "$T/$name.export")"
  "$DUET" infer "$cfg" "$T/w_$name/latest.safetensors" "$input" --out "$T/out_$name" "${sets[@]}" \
    > "$T/$name.infer" 2>&1 || fail "$name: infer: $(cat "$T/$name.infer")"
  "$venv/bin/python" - "$T/$name.onnx" "$input" "$T/out_$name/$(basename "$input")" "$HERE" "$name" "$map" <<'PY' \
    || fail "$name: onnxruntime"
import sys
import numpy as np
import onnx
import onnxruntime as ort
sys.path.insert(0, sys.argv[4])
from pngio import read_png
model, inp, duet_out, name, signed = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5], sys.argv[6] == "signed"
onnx.checker.check_model(onnx.load(model), full_check=True)
def img(path):
    w, h, ch, rows = read_png(path)
    return np.array([list(r) for r in rows], dtype=np.float32).reshape(h, w, ch)
x = img(inp).transpose(2, 0, 1)[None] / 255.0
if signed:  # the translation configs' Normalize to [-1, 1]; infer maps the output back
    x = (x - 0.5) / 0.5
y = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
if signed:
    y = (np.clip(y, -1, 1) + 1) / 2
theirs = img(duet_out).transpose(2, 0, 1)[None]
assert y.shape == theirs.shape, (y.shape, theirs.shape)
d = np.abs(np.clip(y, 0, 1) * 255.0 - theirs)
print("test_export_onnx: %s: onnxruntime against duet infer: max |onnx*255 - png| %.4f "
      "(rounding alone: 0.5), mean %.4f, %d values" % (name, d.max(), d.mean(), d.size))
assert d.max() <= 0.501, d.max()
PY
}
for name in msr4 msr3 rrdb rrdb_ema; do check "$name" "$T/$name.cfg" "$T/in.png" sr; done
grep -q "generator_ema of" "$T/rrdb_ema.export" || fail "the EMA copy was not the default part: $(cat "$T/rrdb_ema.export")"
check pix2pix "$T/pix2pix.cfg" "$T/in_tr.png" signed "${P2P[@]}" --set model.generator.use_dropout=false
check cyclegan "$T/cyclegan.cfg" "$T/in_tr.png" signed "${CG[@]}"
grep -q "generators.a of" "$T/cyclegan.export" || fail "CycleGAN's default part: $(cat "$T/cyclegan.export")"
"$DUET" export "$T/pix2pix.cfg" "$T/w_pix2pix/latest.safetensors" "$T/drop.onnx" "${P2P[@]}" > "$T/drop.export" 2>&1 \
  || fail "pix2pix with dropout: $(cat "$T/drop.export")"
grep -q "Dropout layers\{0,1\} written as identity" "$T/drop.export" || fail "no dropout note: $(cat "$T/drop.export")"

# Errors.
if "$DUET" export "$T/msr4.cfg" "$T/w_msr4/latest.safetensors" "$T/x.onnx" --part generatr > "$T/e1" 2>&1; then
  fail "an unknown part was exported"; fi
grep -q "has no part 'generatr' (its parts: generator, pixel_loss)" "$T/e1" || fail "unknown part: $(cat "$T/e1")"
if "$DUET" export "$T/msr4.cfg" "$T/w_msr4/latest.safetensors" "$T/x.onnx" --part pixel_loss > "$T/e2" 2>&1; then
  fail "a loss was exported"; fi
grep -q "pixel_loss is a L1Loss, which duet cannot write as ONNX yet" "$T/e2" || fail "unknown type: $(cat "$T/e2")"
if "$DUET" export "$T/msr4.cfg" "$T/w_msr4/latest.safetensors" "$T/nodir/x.onnx" > "$T/e3" 2>&1; then
  fail "wrote into a missing folder"; fi
grep -q "cannot write $T/nodir/x.onnx" "$T/e3" || fail "unwritable: $(cat "$T/e3")"
[ ! -e "$T/x.onnx" ] || fail "a failed export left a file"
echo "test_export_onnx: ok"
