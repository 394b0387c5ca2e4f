#!/usr/bin/env bash
# duet export for the translation generators (issue 23): a tiny Pix2Pix
# UnetGenerator (BatchNorm, which the model tests with the batch's
# statistics, as MMEditing's forward_test does; use_dropout off, since
# test-time dropout draws other units in ONNX) and a tiny CycleGAN
# ResnetGenerator (InstanceNorm, reflection padding, transposed
# convolutions; default part the generator duet infer runs: generators.a
# for a2b, generators.b for test_direction b2a), after one training
# iteration each: onnx.checker accepts the file and onnxruntime on the
# image, prepared as data.val.pipeline prepares it (RGB / 255 * 2 - 1 at
# the pipeline's 64x64), equals `duet infer`'s PNG: (y + 1) / 2 * 255 within
# 0.5 (rounding) plus 1e-3. Also: a second, different image through the
# same file (dynamic height and width: 64x128); the warning when the Unet
# keeps its dropout; opsets 13 and 18 equal to 17 (19 refused); a
# discriminator refused by its type's name. Needs DUET_EXE (set by CTest)
# and the tools venv (scripts/make-tools-venv.sh; make test makes it):
# without it the test skips and says how to make it, except under CI,
# where it fails.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_export_onnx_gan
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
venv=${DUET_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/tools-venv}
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy" 2> /dev/null; then
  [ "${CI:-}" != true ] || fail "no onnxruntime in $venv under CI"
  echo "SKIP: no onnxruntime at $venv; make it with: bash scripts/make-tools-venv.sh"
  exit 77
fi
VPY="$venv/bin/python"

# Stand-in photos -> the tiny translation data (scripts/make_translation_data.py).
"$VPY" - "$T" "$ROOT/scripts" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import make_translation_data as m
T = sys.argv[1]
rng = np.random.default_rng(5)
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
# Inputs for infer: 64x64 (the val pipeline's Resize leaves it as it is).
os.makedirs(os.path.join(T, "in"))
open(os.path.join(T, "in", "x.png"), "wb").write(m.png_bytes(photo(64, 64)))
PY
"$VPY" "$ROOT/scripts/make_translation_data.py" "$T/sample" "$T/data" > "$T/mk.out" \
  || fail "make_translation_data: $(cat "$T/mk.out")"

sets=(--set total_iters=1 --set checkpoint_config.interval=1 --set evaluation.interval=100
      --set log_config.interval=100)
p2p=("$ROOT/configs/pix2pix_tiny.cfg" --set "data.train.dataroot=\"$T/data/pix2pix_tiny\""
     --set "data.val.dataroot=\"$T/data/pix2pix_tiny\"" --set model.generator.use_dropout=false)
cyc=("$ROOT/configs/cyclegan_tiny.cfg" --set "data.train.dataroot=\"$T/data/cyclegan_tiny\""
     --set "data.val.dataroot=\"$T/data/cyclegan_tiny\"")

# run NAME CONFIG-ARGS...: train, export, infer; the ONNX model against infer's PNG.
run() {
  local name=$1; shift
  "$DUET" train "$@" "${sets[@]}" --work-dir "$T/w_$name" > "$T/$name.train" 2>&1 \
    || fail "$name: train: $(tail -5 "$T/$name.train")"
  "$DUET" export "$1" "$T/w_$name/latest.safetensors" "$T/$name.onnx" "${@:2}" "${sets[@]}" \
    > "$T/$name.export" 2>&1 || fail "$name: export: $(cat "$T/$name.export")"
  "$DUET" infer "$1" "$T/w_$name/latest.safetensors" "$T/in/x.png" --out "$T/out_$name" \
    "${@:2}" "${sets[@]}" > "$T/$name.infer" 2>&1 || fail "$name: infer: $(cat "$T/$name.infer")"
  "$VPY" - "$T/$name.onnx" "$T/in/x.png" "$T/out_$name/x.png" "$HERE" "$name" <<'PY' \
    || fail "$name: onnxruntime"
import sys
import numpy as np
import onnx
import onnxruntime as ort
sys.path.insert(0, sys.argv[4])
from pngio import read_png
model, inp, duet_out, name = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
onnx.checker.check_model(onnx.load(model), full_check=True)
def img(path):
    w, h, ch, rows = read_png(path)
    return np.array([list(r) for r in rows], dtype=np.float32).reshape(h, w, ch)
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
x = img(inp).transpose(2, 0, 1)[None] / 255.0 * 2.0 - 1.0
y = sess.run(None, {"input": x.astype(np.float32)})[0]
theirs = img(duet_out).transpose(2, 0, 1)[None]
assert y.shape == theirs.shape, (y.shape, theirs.shape)
d = np.abs((np.clip(y, -1, 1) + 1.0) / 2.0 * 255.0 - theirs)
print("test_export_onnx_gan: %s: onnxruntime against duet infer: max |(onnx+1)/2*255 - png| "
      "%.4f (rounding alone: 0.5), mean %.4f, %d values" % (name, d.max(), d.mean(), d.size))
assert d.max() <= 0.501, d.max()
# Height and width are symbolic: a 64x128 input runs through the same file.
x2 = np.concatenate([x, x[:, :, :, ::-1]], axis=3)
y2 = sess.run(None, {"input": x2})[0]
assert y2.shape == (1, y.shape[1], 64, 128), y2.shape
PY
}
run pix2pix "${p2p[@]}"
grep -q "generator of .*BatchNorm with the batch's statistics" "$T/pix2pix.export" \
  || fail "pix2pix: export line: $(cat "$T/pix2pix.export")"
run cyclegan "${cyc[@]}"
grep -q "generators.a of" "$T/cyclegan.export" || fail "cyclegan: default part: $(cat "$T/cyclegan.export")"
! grep -q "BatchNorm" "$T/cyclegan.export" || fail "cyclegan: no BatchNorm: $(cat "$T/cyclegan.export")"
# With test_direction b2a infer runs generators.b, and so does the default export.
run cyclegan_b2a "${cyc[@]}" --set 'model.test_cfg.test_direction="b2a"'
grep -q "generators.b of" "$T/cyclegan_b2a.export" || fail "b2a: default part: $(cat "$T/cyclegan_b2a.export")"

# The Unet with dropout: exported, with the warning that says why it cannot match.
"$DUET" export "$ROOT/configs/pix2pix_tiny.cfg" "$T/w_pix2pix/latest.safetensors" "$T/drop.onnx" \
  --set "data.train.dataroot=\"$T/data/pix2pix_tiny\"" --set "data.val.dataroot=\"$T/data/pix2pix_tiny\"" \
  "${sets[@]}" > "$T/drop.export" 2>&1 || fail "dropout: export: $(cat "$T/drop.export")"
grep -q "generator has 1 Dropout layer(s); the Pix2Pix tests with them active" "$T/drop.export" \
  || fail "dropout warning: $(cat "$T/drop.export")"
# Other opsets (13: IR 7; 18: ReduceMean's axes an input) give the same outputs.
for op in 13 18; do
  "$DUET" export "${p2p[0]}" "$T/w_pix2pix/latest.safetensors" "$T/p2p_$op.onnx" "${p2p[@]:1}" \
    "${sets[@]}" --opset $op > "$T/op$op.export" 2>&1 || fail "--opset $op: $(cat "$T/op$op.export")"
  grep -q "ONNX opset $op," "$T/op$op.export" || fail "--opset $op: $(cat "$T/op$op.export")"
  "$VPY" - "$T/pix2pix.onnx" "$T/p2p_$op.onnx" $op <<'PY' || fail "--opset $op: onnxruntime"
import sys
import numpy as np
import onnx
import onnxruntime as ort
ref, other, op = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = onnx.load(other)
onnx.checker.check_model(m, full_check=True)
assert [o.version for o in m.opset_import] == [op] and m.ir_version == (7 if op <= 14 else 8)
x = np.random.default_rng(op).uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32)
run = lambda f: ort.InferenceSession(f, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
d = np.abs(run(ref) - run(other)).max()
print("test_export_onnx_gan: opset %d against 17: max abs diff %.3g (batch of 2)" % (op, d))
assert d <= 1e-5, d
PY
done
if "$DUET" export "${p2p[0]}" "$T/w_pix2pix/latest.safetensors" "$T/x.onnx" --opset 19 > "$T/e0" 2>&1; then
  fail "--opset 19 accepted"; fi
grep -q "opset from 13 to 18, got 19" "$T/e0" || fail "--opset 19: $(cat "$T/e0")"

# A network the exporter does not know is refused by name, not written wrong.
if "$DUET" export "${cyc[0]}" "$T/w_cyclegan/latest.safetensors" "$T/d.onnx" "${cyc[@]:1}" \
    --part discriminators.a "${sets[@]}" > "$T/e1" 2>&1; then fail "a discriminator was exported"; fi
grep -q "discriminators.a is a PatchDiscriminator, which duet cannot write as ONNX yet" "$T/e1" \
  || fail "unknown type: $(cat "$T/e1")"
[ ! -e "$T/d.onnx" ] || fail "a refused export left a file"
# A wrong name inside a dict part lists that dict's entries.
if "$DUET" export "${cyc[0]}" "$T/w_cyclegan/latest.safetensors" "$T/d.onnx" "${cyc[@]:1}" \
    --part generators.c "${sets[@]}" > "$T/e2" 2>&1; then fail "generators.c was exported"; fi
grep -q "has no part 'generators.c' (its parts: generators.a, generators.b)" "$T/e2" \
  || fail "unknown part: $(cat "$T/e2")"
echo "test_export_onnx_gan: ok"
