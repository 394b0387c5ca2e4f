#!/usr/bin/env bash
# `duet infer` bounds its memory by what the output needs (issue 20,
# finding 8): a 9000 x 9000 PNG (a few hundred KB, under the pixel limit)
# given to an x4 MSRResNet would need tens of GB for its forward; with the
# process held to 6 GB (`ulimit -d`, as a batch system's memory limit) it is
# refused before the forward, naming the image, its size, the estimate and
# the limit; with --tile 3000 the estimate is for the largest tile with its
# context (3080 x 3080 at --tile-pad 40) and the advice a smaller tile; a
# 300 x 200 image under the same limit is upscaled; duet test bounds a
# validation image's forward the same way.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_infer_memory

"$PY" - "$T" <<'PY_IMAGES'
import os, random, struct, sys, zlib
T = sys.argv[1]
def png(path, w, h, row_of):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(b"\x00" + row_of(y)) for y in range(h)) + z.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
rng = random.Random(0)
os.makedirs(T + "/data/train")
for i in range(2):
    png(T + "/data/train/%02d.png" % i, 16, 16, lambda y: bytes(rng.randint(0, 255) for _ in range(48)))
png(T + "/big.png", 9000, 9000, lambda y, row=bytes([90, 140, 200]) * 9000: row)
png(T + "/small.png", 300, 200, lambda y: bytes((x * 7 + y) % 256 for x in range(900)))
# A validation pair for duet test: a 2000 x 2000 input and its 8000 x 8000
# ground truth (64 M pixels, under the pixel limit).
os.makedirs(T + "/val/lq"); os.makedirs(T + "/val/gt")
png(T + "/val/lq/00.png", 2000, 2000, lambda y, row=bytes([90, 140, 200]) * 2000: row)
png(T + "/val/gt/00.png", 8000, 8000, lambda y, row=bytes([90, 140, 200]) * 8000: row)
PY_IMAGES
[ "$(stat -c %s "$T/big.png")" -lt 1000000 ] || fail "the big PNG is not small on disk"

e2e_tiny_cfg "$T/tiny.cfg" "$T/data/train" 8 1 "total_iters = 1;
checkpoint_config = { interval = 1; };"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" > "$T/train.out" 2>&1 || { cat "$T/train.out"; fail "train"; }

set +e
(ulimit -d 6000000; exec "$DUET" infer "$T/tiny.cfg" "$T/w/latest.safetensors" "$T/big.png" \
  --out "$T/out_big") > "$T/big.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "the 9000 x 9000 image was accepted under a 6 GB limit"
grep -q "big.png: 9000 x 9000 pixels: the forward over the whole image would need about" \
  "$T/big.out" || { cat "$T/big.out"; fail "no size estimate in the refusal"; }
grep -q "more than the 6.1 GB this process may use" "$T/big.out" \
  || { cat "$T/big.out"; fail "the refusal does not name the limit"; }
[ ! -e "$T/out_big/big.png" ] || fail "an output was written"
# With --tile the check is on the largest tile with its context (an inner
# one: the tile plus the pad on both sides), and the remedy a smaller tile.
set +e
(ulimit -d 6000000; exec "$DUET" infer "$T/tiny.cfg" "$T/w/latest.safetensors" "$T/big.png" \
  --out "$T/out_big" --tile 3000 --tile-pad 40) > "$T/bigt.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "a 3080 x 3080 tile was accepted under a 6 GB limit"
grep -q "big.png (a 3080 x 3080 tile with its context): 3080 x 3080 pixels: the forward over it would need about .*: give a smaller --tile" \
  "$T/bigt.out" || { cat "$T/bigt.out"; fail "no per-tile estimate in the refusal"; }
(ulimit -d 6000000; exec "$DUET" infer "$T/tiny.cfg" "$T/w/latest.safetensors" "$T/small.png" \
  --out "$T/out_small") > "$T/small.out" 2>&1 || { cat "$T/small.out"; fail "the small image under the same limit"; }
[ -s "$T/out_small/small.png" ] || fail "no output for the small image"
echo "test_infer_memory: $(grep -o 'would need about [0-9.]* GB' "$T/big.out") for 9000 x 9000:" \
  "refused under 6 GB; 300 x 200 upscaled"

# duet test: the same bound on a validation image (here 2000 x 2000 in,
# about 4.6 GB for the forward, under a 3 GB limit; the images themselves
# take 1 GB).
set +e
(ulimit -d 3000000; exec "$DUET" test "$T/tiny.cfg" "$T/w/latest.safetensors" \
  --set "data.val={type=\"SRFolderDataset\"; lq_folder=\"$T/val/lq\"; gt_folder=\"$T/val/gt\"; scale=4;}") \
  > "$T/test.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "duet test ran a 2000 x 2000 forward under a 3 GB limit"
grep -q "00.png: 2000 x 2000 pixels: the forward over the whole image would need about" "$T/test.out" \
  || { cat "$T/test.out"; fail "duet test: no size estimate in the refusal"; }
echo "test_infer_memory: duet test: $(grep -o 'would need about [0-9.]* GB' "$T/test.out") for a" \
  "2000 x 2000 validation input: refused under 3 GB"
echo "test_infer_memory: ok"
