#!/usr/bin/env bash
# duet prepare div2k on hostile folders (issue 35, classes 3, 7 and 8):
#   - --threads 1000000 (a SIGSEGV in libgomp before) runs on the cores,
#     with a note saying so;
#   - 0001.png and 0001x2.png in the HR folder (both would give
#     0001_s001.png ...) are refused naming both, before anything is cut;
#   - an LR image of the wrong size is refused naming both sizes, up front;
#   - a name with a newline (which an annotation file cannot hold) is
#     refused, shown as \x0a;
#   - an image that fails to decode on an OpenMP worker gives its own
#     message (it was an empty "duet: error:"), and no _sub folder or
#     temporary is left; the same for --lmdb-only (a half LMDB was left
#     under its final name);
#   - the two damaged data.mdb files fuzz/fuzz_lmdb.c found (SIGBUS inside
#     liblmdb) are refused before they are mapped, by --dry-run too.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_prepare_hostile
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_prepare_hostile: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}
# div2k ROOT NAME... : HR 32x32 and X2 16x16 PNGs; "NAME:WxH" overrides the LR size.
div2k() {
  "$PY" - "$@" <<'PY'
import os, random, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from pngio import write_png
root, rng = sys.argv[1], random.Random(0)
for spec in sys.argv[2:]:
    name, _, lr = spec.partition(":")
    lw, lh = map(int, lr.split("x")) if lr else (16, 16)
    for d, w, h, n in (("DIV2K_train_HR", 32, 32, name + ".png"),
                       ("DIV2K_train_LR_bicubic/X2", lw, lh, name + "x2.png")):
        os.makedirs(os.path.join(root, d), exist_ok=True)
        write_png(os.path.join(root, d, n), w, h, 3, [rng.randint(0, 255) for _ in range(w * h * 3)])
PY
}
prep() { "$DUET" prepare div2k "$1" --scales 2 --crop-size 16 --step 16 "${@:2}"; }
nothing_made() {
  [ ! -e "$1/DIV2K_train_HR_sub" ] && [ ! -e "$1/meta_info_DIV2K800sub_GT.txt" ] \
    && ! ls -AR "$1" | grep -q '\.duet-' || fail "$2: something was left: $(ls -AR "$1")"
}

div2k "$T/a" 0001 0002
prep "$T/a" --threads 1000000 > "$T/a.out" 2>&1 || fail "--threads 1000000: $(cat "$T/a.out")"
grep -q "note: --threads 1000000 is more than the [0-9]* cores this process may run on; using" "$T/a.out" \
  || fail "no note on the thread cap: $(cat "$T/a.out")"
[ "$(wc -l < "$T/a/meta_info_DIV2K800sub_GT.txt")" = 8 ] || fail "--threads 1000000: wrong annotation"

div2k "$T/b" 0001 0002
cp "$T/b/DIV2K_train_HR/0002.png" "$T/b/DIV2K_train_HR/0001x2.png"
if prep "$T/b" > "$T/b.out" 2>&1; then fail "0001.png and 0001x2.png accepted"; fi
grep -q "0001.png and 0001x2.png would both give 0001_s001.png" "$T/b.out" || fail "collision: $(cat "$T/b.out")"
nothing_made "$T/b" collision

div2k "$T/c" 0001 0002:15x16
if prep "$T/c" > "$T/c.out" 2>&1; then fail "an LR image of the wrong size accepted"; fi
grep -q "0002x2.png is 15x16, but its HR image .*0002.png is 32x32: at x2 it must be 16x16" "$T/c.out" \
  || fail "size mismatch: $(cat "$T/c.out")"
nothing_made "$T/c" "size mismatch"

div2k "$T/d" 0001 "$(printf '00\n02')"
if prep "$T/d" > "$T/d.out" 2>&1; then fail "a name with a newline accepted"; fi
grep -qF '00\x0a02.png: the name holds a space or a control byte' "$T/d.out" || fail "newline: $(cat "$T/d.out")"
nothing_made "$T/d" newline

# A PNG whose header is whole (its size is read) but whose pixels are not.
div2k "$T/e" 0001 0002 0003
head -c 60 "$T/e/DIV2K_train_HR/0002.png" > "$T/e/x" && mv "$T/e/x" "$T/e/DIV2K_train_HR/0002.png"
if prep "$T/e" --threads 2 > "$T/e.out" 2>&1; then fail "a broken PNG accepted"; fi
grep -q "duet: error: .*0002.png" "$T/e.out" || fail "the worker's message was lost: $(cat "$T/e.out")"
! grep -q "duet: error: *$" "$T/e.out" || fail "an empty error: $(cat "$T/e.out")"
nothing_made "$T/e" "broken PNG"

div2k "$T/f" 0001 0002 0003
prep "$T/f" > "$T/f.out" 2>&1 || fail "prepare f: $(cat "$T/f.out")"
head -c 60 "$T/f/DIV2K_train_HR_sub/0002_s001.png" > "$T/f/x" && mv "$T/f/x" "$T/f/DIV2K_train_HR_sub/0002_s001.png"
if prep "$T/f" --lmdb-only --threads 2 > "$T/f2.out" 2>&1; then fail "--lmdb-only over a broken PNG accepted"; fi
grep -q "duet: error: .*0002_s001.png" "$T/f2.out" || fail "--lmdb-only: the worker's message was lost: $(cat "$T/f2.out")"
[ ! -e "$T/f/DIV2K_train_HR_sub.lmdb" ] && ! ls -A "$T/f" | grep -q '\.duet-' \
  || fail "--lmdb-only left a partial LMDB: $(ls -A "$T/f")"
# LMDBs damaged inside (the two inputs fuzz/fuzz_lmdb.c found: meta pages of
# two page sizes, a leaf node past its page) are refused before liblmdb maps
# them (SIGBUS inside liblmdb before), by --dry-run too.
div2k "$T/g" 0001 0002
prep "$T/g" --lmdb > "$T/g.out" 2>&1 || fail "prepare --lmdb: $(cat "$T/g.out")"
SEEDS="$(cd "$(dirname "$0")/../.." && pwd)/fuzz/corpus/lmdb"
for seed in meta_psize_mismatch leaf_node_past_page; do
  cp -r "$T/g/DIV2K_train_HR_sub.lmdb" "$T/g/$seed.lmdb"
  cp "$SEEDS/$seed.mdb" "$T/g/$seed.lmdb/data.mdb"
  cat > "$T/g/$seed.cfg" <<CFG
model = { type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3; mid_channels = 4;
                num_blocks = 1; upscale_factor = 2; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; }; };
data = { samples_per_gpu = 1;
  train = { type = "SRLmdbDataset"; lq_folder = "$T/g/DIV2K_train_LR_bicubic_X2_sub.lmdb";
    gt_folder = "$T/g/$seed.lmdb"; scale = 2;
    pipeline = ( { type = "LoadImageFromFile"; io_backend = "lmdb";
                   db_path = "$T/g/DIV2K_train_LR_bicubic_X2_sub.lmdb"; key = "lq"; channel_order = "rgb"; },
                 { type = "LoadImageFromFile"; io_backend = "lmdb"; db_path = "$T/g/$seed.lmdb";
                   key = "gt"; channel_order = "rgb"; },
                 { type = "RescaleToZeroOne"; keys = ["lq", "gt"]; },
                 { type = "PairedRandomCrop"; gt_patch_size = 16; },
                 { type = "Collect"; keys = ["lq", "gt"]; meta_keys = []; },
                 { type = "ImageToTensor"; keys = ["lq", "gt"]; } ); }; };
optimizers = { generator = { type = "Adam"; lr = 1e-3; }; };
total_iters = 1;
CFG
  for dry in --dry-run ""; do
    set +e
    "$DUET" train "$T/g/$seed.cfg" --work-dir "$T/g/w_$seed" $dry > "$T/g/$seed.out" 2>&1; rc=$?
    set -e
    [ $rc -eq 1 ] && grep -q "cannot open LMDB $T/g/$seed.lmdb: .*data.mdb has no valid meta page" "$T/g/$seed.out" \
      || fail "$seed ${dry:-train}: rc $rc, $(tail -2 "$T/g/$seed.out")"
  done
done
[ $nfail -eq 0 ] || exit 1
echo "test_prepare_hostile: PASS"
