#!/usr/bin/env bash
# duet infer --tile N [--tile-pad P] (issue 23): super-resolution tile by
# tile, memory bounded by a tile.
#   - with the default pad (the generator's receptive radius, measured) the
#     tiled output is the whole-image output: on a 37 x 23 image (neither
#     side a multiple of the tile) with 8-pixel tiles, every value equal
#     (at most 1 level would be float rounding; this prints the count);
#   - a tile larger than the image is the whole image;
#   - --tile-pad 0 makes seams (values differ) and warns naming the radius;
#   - bad values are usage errors; a translation model refuses --tile.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_infer_tile
HERE=$(cd "$(dirname "$0")" && pwd)

e2e_pngs "$T/data" 2
e2e_tiny_cfg "$T/tiny.cfg" "$T/data" 8 2 "total_iters = 2;
checkpoint_config = { interval = 2; };
log_config = { interval = 1000; };"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" > "$T/train.out" 2>&1 || fail "train: $(cat "$T/train.out")"
e2e_photo "$T/in.png" 37 23
CK="$T/w/latest.safetensors"
infer() { # OUT ARGS...
  local out=$1; shift
  "$DUET" infer "$T/tiny.cfg" "$CK" "$T/in.png" --out "$T/$out" "$@" > "$T/$out.log" 2>&1 \
    || fail "infer $out: $(cat "$T/$out.log")"
}
infer whole
infer tiled --tile 8
infer big --tile 64
infer seams --tile 8 --tile-pad 0
grep -q "tile-pad 0 is below the generator's receptive radius (.* input pixels, measured)" "$T/seams.log" \
  || fail "no warning for a small pad: $(cat "$T/seams.log")"
! grep -q "receptive radius" "$T/tiled.log" || fail "warned with the default pad: $(cat "$T/tiled.log")"
"$PY" - "$T" "$HERE" <<'PY' || fail "tiled against whole"
import sys
sys.path.insert(0, sys.argv[2])
from pngio import read_png
T = sys.argv[1]
def img(name):
    w, h, ch, rows = read_png("%s/%s/in.png" % (T, name))
    return (w, h), [v for r in rows for v in r]
size, whole = img("whole")
assert size == (148, 92), size
for name, want_equal in (("tiled", True), ("big", True), ("seams", False)):
    s, v = img(name)
    assert s == size, (name, s)
    diff = [abs(a - b) for a, b in zip(whole, v)]
    n = sum(d > 0 for d in diff)
    print("test_infer_tile: %s against whole: max %d levels, %d of %d values differ"
          % (name, max(diff), n, len(diff)))
    if want_equal:
        assert max(diff) <= 1 and n <= len(diff) // 1000, (name, max(diff), n)
    else:
        assert n > 0, "--tile-pad 0 gave no seams: the test would not see a wrong stitch"
PY
# Usage errors.
for bad in "--tile 0" "--tile 1" "--tile 7" "--tile -3" "--tile x" "--tile 8 --tile-pad -1" "--tile-pad 4"; do
  # shellcheck disable=SC2086
  if "$DUET" infer "$T/tiny.cfg" "$CK" "$T/in.png" --out "$T/bad" $bad > "$T/bad.log" 2>&1; then
    fail "accepted: $bad"
  fi
  grep -q "^duet: --tile" "$T/bad.log" || fail "$bad: $(head -2 "$T/bad.log")"
done
echo "test_infer_tile: ok"
