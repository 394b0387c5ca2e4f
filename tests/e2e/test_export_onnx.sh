#!/usr/bin/env bash
# duet export CONFIG CKPT OUT.onnx (issue 23): for a tiny MSRResNet (x4 and
# x3) and a tiny RRDBNet (ESRGAN, also exported with an EMA copy), after two
# training iterations, onnx.checker accepts the file and onnxruntime's output
# on a photo-like image equals `duet infer`'s PNG of the same image: the
# ONNX float output times 255 is within 0.5 (rounding) plus 1e-3 of every
# PNG value; --opset 13 gives the same output as the default 17. Errors:
# an unknown part (naming the parts), a network the exporter does not know
# (naming its type), an unwritable output.
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

for name in msr4 msr3 rrdb rrdb_ema; do
  "$DUET" train "$T/$name.cfg" --work-dir "$T/w_$name" > "$T/$name.train" 2>&1 \
    || fail "$name: train: $(tail -3 "$T/$name.train")"
  "$DUET" export "$T/$name.cfg" "$T/w_$name/latest.safetensors" "$T/$name.onnx" > "$T/$name.export" 2>&1 \
    || fail "$name: export: $(cat "$T/$name.export")"
  "$DUET" infer "$T/$name.cfg" "$T/w_$name/latest.safetensors" "$T/in.png" --out "$T/out_$name" \
    > "$T/$name.infer" 2>&1 || fail "$name: infer: $(cat "$T/$name.infer")"
  "$venv/bin/python" - "$T/$name.onnx" "$T/in.png" "$T/out_$name/in.png" "$HERE" "$name" <<'PY' \
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
x = img(inp).transpose(2, 0, 1)[None] / 255.0
y = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
theirs = img(duet_out).transpose(2, 0, 1)[None]
assert y.shape == theirs.shape, (y.shape, theirs.shape)
d = np.abs(np.clip(y, 0, 1) * 255.0 - theirs)
print("test_export_onnx: %s: onnxruntime against duet infer: max |onnx*255 - png| %.4f "
      "(rounding alone: 0.5), mean %.4f, %d values" % (name, d.max(), d.mean(), d.size))
assert d.max() <= 0.501, d.max()
PY
done
grep -q "generator_ema of" "$T/rrdb_ema.export" || fail "the EMA copy was not the default part: $(cat "$T/rrdb_ema.export")"

# --opset 13 (IR 7; Resize and DepthToSpace as opset 13 has them) gives the same output.
"$DUET" export "$T/msr4.cfg" "$T/w_msr4/latest.safetensors" "$T/msr4_13.onnx" --opset 13 > "$T/op13" 2>&1 \
  || fail "--opset 13: $(cat "$T/op13")"
"$venv/bin/python" - "$T/msr4.onnx" "$T/msr4_13.onnx" <<'PY' || fail "--opset 13: onnxruntime"
import sys
import numpy as np
import onnx
import onnxruntime as ort
m = onnx.load(sys.argv[2])
onnx.checker.check_model(m, full_check=True)
assert [o.version for o in m.opset_import] == [13] and m.ir_version == 7
x = np.random.default_rng(1).uniform(0, 1, (1, 3, 13, 11)).astype(np.float32)
run = lambda f: ort.InferenceSession(f, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
d = np.abs(run(sys.argv[1]) - run(sys.argv[2])).max()
print("test_export_onnx: msr4 opset 13 against 17: max abs diff %.3g" % d)
assert d <= 1e-6, d
PY

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
