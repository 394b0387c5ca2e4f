#!/usr/bin/env bash
# log_config.hooks' TensorboardLoggerHook (issue 23): a run writes
# WORK_DIR/tf_logs/events.out.tfevents.* with mmcv's tags (train/<loss>,
# learning_rate/<optimizer>, train/time, train/data_time, val/<metric>) at
# every logged iteration, the same values as log.jsonl, and each evaluation
# grid (WORK_DIR/val/iter_N.png, byte for byte) as the image val/images.
# The file is decoded here by a reader written from the format's
# definition (TFRecord framing with masked CRC-32C, the Event / Summary /
# Value / Image protocol buffers), independent of duet's writer; then
# TensorBoard 2.21's own EventAccumulator (from the venv that
# scripts/make-tools-venv.sh makes, which make test runs; or
# DUET_TB_PYTHON) must read the same scalars and images. Without that venv
# the second check skips, saying so, except under CI, where it fails.
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_tensorboard
e2e_pngs "$T/data/train" 2
e2e_pngs "$T/data/val" 1 48
e2e_tiny_cfg "$T/tb.cfg" "$T/data/train" 4 1 'total_iters = 6;
log_config = { interval = 2; hooks = ( { type = "TextLoggerHook"; by_epoch = false; },
                                       { type = "TensorboardLoggerHook"; } ); };
evaluation = { interval = 3; };'
sed -i "s|^  train = {.*|&\n  val = { type = \"SRFolderGTDataset\"; gt_folder = \"$T/data/val\"; scale = 4; };|" "$T/tb.cfg"
sed -i '0,/^};$/s//  test_cfg = { metrics = ["PSNR"]; crop_border = 0; };\n};/' "$T/tb.cfg"
"$DUET" train "$T/tb.cfg" --work-dir "$T/w" > "$T/run.out" 2>&1 || { cat "$T/run.out"; fail "train"; }
ls "$T/w/tf_logs/"events.out.tfevents.* > /dev/null || fail "no event file in tf_logs"

"$PY" - "$T/w" <<'PY_READ' || fail "the event file"
import glob, json, struct, sys
wd = sys.argv[1]
def crc32c(data):
    c = 0xffffffff
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7f) << s; s += 7
        if x < 0x80:
            return v, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise AssertionError("wire type %d" % w)
        yield f, v
(path,) = glob.glob(wd + "/tf_logs/events.out.tfevents.*")
data, i, events = open(path, "rb").read(), 0, []
while i < len(data):
    head = data[i:i + 8]
    (n,) = struct.unpack("<Q", head)
    assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(head), "length CRC at %d" % i
    payload = data[i + 12:i + 12 + n]
    assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == masked(payload), "data CRC at %d" % i
    events.append(dict(fields(payload)))
    i += 16 + n
assert events[0][3] == b"brain.Event:2", events[0]
got = {}
for e in events[1:]:
    step = e[2]
    for f, v in fields(e[5]):
        val = dict(fields(v))
        if 4 in val:  # Summary.Image: height 1, width 2, colorspace 3, encoded PNG 4
            img = dict(fields(val[4]))
            png = img[4]
            assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:8]
            w, h = struct.unpack(">II", png[16:24])
            assert (img[1], img[2], img[3]) == (h, w, 3), (img[1], img[2], img[3], h, w)
            with open("%s/val/iter_%d.png" % (wd, step), "rb") as f:
                assert f.read() == png, "image at %d differs from val/iter_%d.png" % (step, step)
            got.setdefault(val[1].decode(), []).append((step, None))
            continue
        got.setdefault(val[1].decode(), []).append((step, struct.unpack("<f", val[2])[0]))
want = {}
for r in map(json.loads, open(wd + "/log.jsonl")):
    if r["mode"] == "train":
        want.setdefault("train/loss_pix", []).append((r["iter"], r["loss_pix"]))
        want.setdefault("learning_rate/generator", []).append((r["iter"], r["lr"]["generator"]))
        want.setdefault("train/time", []).append((r["iter"], r["time"]))
    elif r["mode"] == "val":
        want.setdefault("val/PSNR", []).append((r["iter"], r["PSNR"]))
assert [s for s, _ in want["train/loss_pix"]] == [2, 4, 6], want
assert [s for s, _ in want["val/PSNR"]] == [3, 6], want
assert [s for s, _ in got["val/images"]] == [3, 6], got.get("val/images")
for tag, pts in want.items():
    assert [s for s, _ in got[tag]] == [s for s, _ in pts], (tag, got[tag], pts)
    for (_, a), (_, b) in zip(got[tag], pts):
        assert abs(a - b) <= 1e-6 * max(1.0, abs(b)), (tag, a, b)
assert "train/data_time" in got and "train/loss" in got, sorted(got)
print("test_tensorboard: %d events, tags %s, equal to log.jsonl" % (len(events), ", ".join(sorted(got))))
PY_READ

# TensorBoard's reader: DUET_TB_PYTHON, else the venv
# scripts/make-tools-venv.sh makes (make test makes it), else $PY.
TBPY=${DUET_TB_PYTHON:-}
tbvenv=${DUET_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/tools-venv}
[ -n "$TBPY" ] || { [ -x "$tbvenv/bin/python" ] && TBPY=$tbvenv/bin/python; } || TBPY=$PY
if "$TBPY" -c "import tensorboard.backend.event_processing.event_accumulator" 2> /dev/null; then
  "$TBPY" - "$T/w/tf_logs" <<'PY_TB' || fail "TensorBoard's own reader"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
assert [e.step for e in ea.Scalars("train/loss_pix")] == [2, 4, 6]
assert [e.step for e in ea.Scalars("val/PSNR")] == [3, 6]
imgs = ea.Images("val/images")
assert [e.step for e in imgs] == [3, 6] and imgs[0].width > 0 and imgs[0].height > 0, imgs
assert imgs[0].encoded_image_string[:4] == b"\x89PNG"
print("test_tensorboard: TensorBoard's EventAccumulator reads the same scalars and the "
      "evaluation images (%dx%d)" % (imgs[0].width, imgs[0].height))
PY_TB
elif [ "${CI:-}" = true ]; then
  fail "no tensorboard package for $TBPY under CI (make test runs scripts/make-tools-venv.sh)"
else
  echo "test_tensorboard: TensorBoard's own reader not checked: no tensorboard package for $TBPY" \
       "(make it with: bash scripts/make-tools-venv.sh)"
fi
# The shipped full-size SRGAN config says what a run does (issue 33): it
# names MMEditing's TensorboardLoggerHook, and no config claims duet has
# no TensorBoard writer.
ROOT_CFG="$(cd "$(dirname "$0")/../.." && pwd)/configs"
grep -q 'type = "TensorboardLoggerHook"' "$ROOT_CFG/srgan_x4c64b16_div2k.cfg" \
  || fail "srgan_x4c64b16_div2k.cfg has no TensorboardLoggerHook"
! grep -qi "no TensorBoard writer" "$ROOT_CFG"/*.cfg || fail "a config says duet has no TensorBoard writer"
echo "test_tensorboard: ok"
