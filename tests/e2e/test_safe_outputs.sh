#!/usr/bin/env bash
# `duet infer` and `duet test --out` never replace an input or each other and
# never write through a symlink (issue 10, defect 1):
#   - infer with --out the input's own folder is refused, the input intact;
#   - a write that fails (a full disk, made here by `ulimit -f` with SIGXFSZ
#     ignored) leaves the file it would have replaced as it was;
#   - test --out the validation folder is refused, the folder unchanged, and
#     the next test still counts 3 images;
#   - two inputs with one output name (a.png and a.jpg, or two a.png in two
#     folders) are refused, naming both, and nothing is written;
#   - a symlink at an output path is refused, its target intact;
#   - the "N images upscaled" line counts the files written (2 processes).
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/duet_safe_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn DUET_PROGRESS=0
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_safe_outputs: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}
sums() { (cd "$1" && find . -type f -o -type l | LC_ALL=C sort | xargs -r sha256sum); }

"$PY" - "$T/data" <<'PY_IMAGES'
import os, random, struct, sys, zlib
def png(path, w, h, rng):
    raw = b"".join(b"\x00" + bytes(rng.randint(0, 255) for _ in range(w * 3)) for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rng = random.Random(0)
for sub, n, size in (("train", 4, 32), ("val", 3, 16)):
    os.makedirs(os.path.join(sys.argv[1], sub))
    for i in range(n):
        png(os.path.join(sys.argv[1], sub, "%02d.png" % i), size, size, rng)
PY_IMAGES

cat > "$T/tiny.cfg" <<CFG_END
model = {
  type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3;
                mid_channels = 4; num_blocks = 1; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; };
  test_cfg = { metrics = ["PSNR", "SSIM"]; crop_border = 0; };
};
data = {
  samples_per_gpu = 1;
  train = { type = "SRFolderGTDataset"; gt_folder = "$T/data/train"; scale = 4; gt_patch_size = 16; };
  val = { type = "SRFolderGTDataset"; gt_folder = "$T/data/val"; scale = 4; };
};
optimizers = { generator = { type = "Adam"; lr = 1e-3; }; };
total_iters = 1;
log_config = { interval = 1; };
seed = 1;
CFG_END
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" > "$T/train.out" 2>&1 || { cat "$T/train.out"; fail "train"; }
CK="$T/w/latest.safetensors"
set +e

# 1. --out is the input's folder: photo.png would be overwritten.
mkdir "$T/in" && cp "$T/data/val/00.png" "$T/in/photo.png"
before=$(sums "$T/in")
"$DUET" infer "$T/tiny.cfg" "$CK" "$T/in/photo.png" --out "$T/in" > "$T/1.out" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "infer onto its own input must fail"
grep -q "would replace the input $T/in/photo.png" "$T/1.out" || { cat "$T/1.out"; fail "message 1"; }
[ "$(sums "$T/in")" = "$before" ] || fail "the input folder changed"

# 2. The disk fills up while the output is written: the file at the output
#    path (an earlier output here) must survive, and no temporary is left.
mkdir "$T/out2" && echo "an earlier output" > "$T/out2/photo.png"
#    (PMIx's shared-memory store and MPI's shared-memory transport would hit
#    the limit at start-up: this single process needs neither.)
(trap '' XFSZ; ulimit -f 4; export PMIX_MCA_gds=hash OMPI_MCA_btl=self
 exec timeout 120 "$DUET" infer "$T/tiny.cfg" "$CK" "$T/in/photo.png" \
  --out "$T/out2") > "$T/2.out" 2>&1; rc=$?
[ $rc -ne 0 ] || { cat "$T/2.out"; fail "a write past the file size limit must fail"; }
[ "$(cat "$T/out2/photo.png" 2>/dev/null)" = "an earlier output" ] \
  || { cat "$T/2.out"; fail "a failed write destroyed $T/out2/photo.png"; }
[ "$(ls -A "$T/out2")" = "photo.png" ] || { ls -la "$T/out2"; fail "a temporary file was left"; }

# 3. test --out the validation folder.
before=$(sums "$T/data/val")
"$DUET" test "$T/tiny.cfg" "$CK" --out "$T/data/val" --json > "$T/3.out" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "test --out the validation folder must fail"
grep -q "is the input folder" "$T/3.out" || { cat "$T/3.out"; fail "message 3"; }
[ "$(sums "$T/data/val")" = "$before" ] || fail "the validation folder changed"
"$DUET" test "$T/tiny.cfg" "$CK" --json > "$T/3b.out" 2>&1 || { cat "$T/3b.out"; fail "test"; }
grep -q '"images": 3' "$T/3b.out" || { cat "$T/3b.out"; fail "test counts other than 3 images"; }

# 4. Two inputs, one output name: a.png and a.jpg (a PNG under a .jpg name:
#    duet reads the bytes, not the name), and a.png in two folders.
mkdir -p "$T/x" "$T/y" "$T/out4"
cp "$T/data/val/00.png" "$T/x/a.png"; cp "$T/data/val/01.png" "$T/x/a.jpg"
cp "$T/data/val/02.png" "$T/y/a.png"
"$DUET" infer "$T/tiny.cfg" "$CK" "$T/x/a.png" "$T/x/a.jpg" --out "$T/out4" > "$T/4.out" 2>&1; rc=$?
[ $rc -ne 0 ] || { cat "$T/4.out"; fail "a.png and a.jpg into one a.png must fail"; }
grep -q "$T/x/a.png and $T/x/a.jpg would both be written to $T/out4/a.png" "$T/4.out" \
  || { cat "$T/4.out"; fail "message 4"; }
"$DUET" infer "$T/tiny.cfg" "$CK" "$T/x/a.png" "$T/y/a.png" --out "$T/out4" > "$T/4b.out" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "x/a.png and y/a.png into one a.png must fail"
[ -z "$(ls -A "$T/out4")" ] || fail "a refused run wrote $(ls "$T/out4")"

# 5. A symlink at the output path.
mkdir "$T/out5" && echo "precious" > "$T/precious.txt" && ln -s "$T/precious.txt" "$T/out5/a.png"
"$DUET" infer "$T/tiny.cfg" "$CK" "$T/x/a.png" --out "$T/out5" > "$T/5.out" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "an output symlink must be refused"
grep -q "$T/out5/a.png (for $T/x/a.png) is a symbolic link" "$T/5.out" || { cat "$T/5.out"; fail "message 5"; }
[ "$(cat "$T/precious.txt")" = "precious" ] || fail "the symlink's target was written"
set -e

# 6. The count is what was written, over 2 processes (and a pixel limit
#    from the config that these 16x16 images pass).
DUET_LOG=info "${MPI[@]}" "$DUET" infer "$T/tiny.cfg" "$CK" "$T/x/a.png" "$T/data/val/01.png" \
  "$T/data/val/02.png" --out "$T/out6" --set data.max_image_pixels=256 > "$T/6.out" 2>&1 \
  || { cat "$T/6.out"; fail "infer on 2 processes"; }
grep -q "infer: 3 images upscaled into $T/out6/" "$T/6.out" || { cat "$T/6.out"; fail "count"; }
[ "$(ls "$T/out6" | wc -l)" -eq 3 ] || fail "want 3 outputs, got $(ls "$T/out6")"
# One pixel fewer and the same images are refused before decoding.
set +e
"$DUET" infer "$T/tiny.cfg" "$CK" "$T/x/a.png" --out "$T/out7" --set data.max_image_pixels=255 \
  > "$T/7.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] && grep -q "16x16 = 256 pixels, more than the limit of 255" "$T/7.out" \
  || { cat "$T/7.out"; fail "pixel limit from data.max_image_pixels"; }
[ $nfail -eq 0 ] || exit 1
echo "test_safe_outputs: PASS"
