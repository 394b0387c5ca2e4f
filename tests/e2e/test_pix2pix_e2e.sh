#!/usr/bin/env bash
# End to end for Pix2Pix on translation data, on 2 processes:
# scripts/make_translation_data.py makes edge-map | photo pairs (from stand-in
# photos this script writes under the sample photos' names, so no download is
# needed) twice, and the second run must change nothing; configs/pix2pix_tiny.cfg
# trains on them (GenerationPairedDataset with MMEditing's pipeline); a run
# stopped at iteration 4 and resumed must end bitwise equal to the
# uninterrupted one (dropout RNG, step counter and the BatchNorm statistics
# evaluation moved, which the checkpoint is written again for); `duet test`
# writes the outputs; the evaluation picture has img_a | output | img_b rows.
# Needs DUET_EXE (set by CTest) and python3 with numpy (Debian's python3-numpy
# is at /usr/bin/python3).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
export ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
"$PY" -c 'import numpy' 2> /dev/null || PY=/usr/bin/python3
T=$(mktemp -d /tmp/duet_p2p_e2e_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn
fail() { echo "test_pix2pix_e2e: FAIL: $*" >&2; exit 1; }

# ---- stand-in photos (smooth colours, discs), then the tiny pairs ----
"$PY" - "$T/sample" <<'PY_PHOTOS'
import os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ.get("ROOT", "."), "scripts"))
root = sys.argv[1]
rng = np.random.default_rng(0)
def photo(h, w):
    y, x = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3))
    for c in range(3):
        a, b = rng.uniform(0.02, 0.1, 2)
        img[:, :, c] = 128 + 90 * np.sin(a * x + b * y + c)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(8, 30)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    return np.clip(img, 0, 255).astype(np.uint8)
import make_translation_data as m
for sub, names in (("train", m.TRAIN), ("val", m.TEST)):
    os.makedirs(os.path.join(root, sub))
    for n in names:
        open(os.path.join(root, sub, n), "wb").write(m.png_bytes(photo(140, 200)))
PY_PHOTOS
[ -s "$T/sample/val/motorcycle_left.png" ] || fail "no stand-in photos"
"$PY" "$ROOT/scripts/make_translation_data.py" "$T/sample" "$T/data" > "$T/mk1.out" \
  || { cat "$T/mk1.out"; fail "make_translation_data"; }
sum1=$(cd "$T/data" && find . -type f | sort | xargs md5sum)
"$PY" "$ROOT/scripts/make_translation_data.py" "$T/sample" "$T/data" > "$T/mk2.out"
sum2=$(cd "$T/data" && find . -type f | sort | xargs md5sum)
[ "$sum1" = "$sum2" ] || fail "a second make_translation_data run changed the data"
grep -q "0 files written" "$T/mk2.out" || { cat "$T/mk2.out"; fail "second run wrote files"; }
[ "$(ls "$T/data/pix2pix_tiny/train" | wc -l)" -eq 24 ] || fail "want 24 training pairs"
[ "$(ls "$T/data/cyclegan_tiny/trainA" | wc -l)" -eq 12 ] || fail "want 12 trainA images"

# ---- train: uninterrupted, and stopped at 4 then resumed ----
SETS=(--set "data.train.dataroot=\"$T/data/pix2pix_tiny\""
      --set "data.val.dataroot=\"$T/data/pix2pix_tiny\""
      --set total_iters=8 --set checkpoint_config.interval=4 --set evaluation.interval=4
      --set evaluation.num_images=2 --set log_config.interval=2 --set data.samples_per_gpu=2)
CFG="$ROOT/configs/pix2pix_tiny.cfg"
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/a" "${SETS[@]}" > "$T/a.out" 2>&1 \
  || { cat "$T/a.out"; fail "train"; }
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/b" "${SETS[@]}" --set total_iters=4 \
  > "$T/b.out" 2>&1 || { cat "$T/b.out"; fail "train to 4"; }
"${MPI[@]}" "$DUET" train "$CFG" --work-dir "$T/b" "${SETS[@]}" --resume >> "$T/b.out" 2>&1 \
  || { cat "$T/b.out"; fail "resume"; }
grep -q "resumed from .*latest.safetensors at iteration 4" "$T/b.out" \
  || { cat "$T/b.out"; fail "no resume message"; }
[ -s "$T/a/val/iter_8.png" ] || fail "no evaluation picture"
# The last iteration's checkpoint is written once (issue 33: the evaluation,
# which moves BatchNorm's statistics, goes first there); iteration 4's
# twice (checkpoint, evaluation, the checkpoint again with the new
# statistics), which the resume above relies on.
[ "$(grep -c "saved checkpoint .*/iter_8.safetensors" "$T/a.out")" = 1 ] \
  || { grep "saved checkpoint" "$T/a.out"; fail "the final checkpoint is not written once"; }
[ "$(grep -c "saved checkpoint .*/iter_4.safetensors" "$T/a.out")" = 2 ] \
  || { grep "saved checkpoint" "$T/a.out"; fail "iteration 4's checkpoint is not rewritten after the evaluation"; }

"$PY" - "$T" <<'PY_CHECK'
import json, struct, sys
T = sys.argv[1]
def st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}, meta
train = [json.loads(l) for l in open(T + "/a/log.jsonl")]
train = [r for r in train if r["mode"] == "train"]
assert [r["iter"] for r in train] == [2, 4, 6, 8], train
for r in train:
    for k in ("loss_gan_d_fake", "loss_gan_d_real", "loss_gan_g", "loss_pixel"):
        assert k in r and r[k] > 0, (k, r)
# img_a | output | img_b rows of 64x64 panels, 4-pixel gaps, 2 rows.
png = open(T + "/a/val/iter_8.png", "rb").read()
# + the column titles strip (7 px text + 6, on 64 px panels)
assert struct.unpack(">II", png[16:24]) == (3 * 64 + 2 * 4, 2 * 64 + 4 + 13), struct.unpack(">II", png[16:24])
a, ma = st(T + "/a/latest.safetensors")
b, mb = st(T + "/b/latest.safetensors")
assert ma["iter"] == "8" and mb["iter"] == "8", (ma, mb)
assert any(k.startswith("generator.model.") for k in a), sorted(a)[:5]
assert set(a) == set(b), set(a) ^ set(b)
diff = [k for k in a if a[k] != b[k]]
assert not diff, "the resumed run differs from the uninterrupted one in: %s" % diff[:5]
for k in ma:
    if k.startswith("pix2pix."):
        assert ma[k] == mb[k], (k, ma[k], mb[k])
print("test_pix2pix_e2e: resumed == uninterrupted on 2 processes (%d tensors, bitwise)" % len(a))
PY_CHECK

# ---- duet test: one output per test pair ----
"${MPI[@]}" "$DUET" test "$CFG" "$T/a/latest.safetensors" "${SETS[@]}" --json --out "$T/test" \
  > "$T/test.json" 2> "$T/test.err" || { cat "$T/test.err"; fail "duet test"; }
grep -q '"images": 6' "$T/test.json" || { cat "$T/test.json"; fail "duet test: want 6 images"; }
# No metrics (test_cfg.metrics = []) and no bicubic comparison for translation data.
[ "$(grep -v '^[0-9-]* [0-9:]* - duet' "$T/test.json")" = '{"images": 6}' ] \
  || { cat "$T/test.json"; fail "duet test: want only the image count"; }
[ "$(ls "$T/test" | wc -l)" -eq 6 ] || fail "duet test: want 6 outputs"

# ---- a bad pair (odd width) fails naming the file ----
"$PY" -c "
import sys; sys.path.insert(0, '$ROOT/scripts'); import make_translation_data as m, numpy as np
open('$T/data/pix2pix_tiny/test/odd.png', 'wb').write(m.png_bytes(np.zeros((64, 127, 3), np.uint8)))"
set +e
"$DUET" test "$CFG" "$T/a/latest.safetensors" "${SETS[@]}" > "$T/odd.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] || fail "an odd-width pair must fail"
grep -q "odd.png.*even width" "$T/odd.out" || { cat "$T/odd.out"; fail "the error must name the file"; }
echo "test_pix2pix_e2e: PASS"
