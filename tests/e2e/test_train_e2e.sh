#!/usr/bin/env bash
# End to end on 2 processes: `duet train` (tiny BasicRestorer on images this
# script writes), a stopped-and-resumed run that must end bitwise equal to
# the uninterrupted one, `duet test --json`, `duet infer`, usage and config
# errors, and a corrupt image met during training, which must end the whole
# job naming the file (no rank left hanging) with the last checkpoint still
# readable.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/duet_e2e_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn
fail() { echo "test_train_e2e: FAIL: $*" >&2; exit 1; }

# ---- images: smooth colour fields with discs and stripes (PNG by hand) ----
"$PY" - "$T/data" <<'PY_IMAGES'
import math, os, random, struct, sys, zlib
def png(path, w, h, px):
    raw = b"".join(b"\x00" + bytes(px[y * w * 3:(y + 1) * w * 3]) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rng = random.Random(0)
def image(w, h):
    col = [[rng.randint(30, 225) for _ in range(3)] for _ in range(3)]
    f, a = rng.uniform(0.2, 0.6), rng.uniform(0, math.pi)
    discs = [(rng.random() * w, rng.random() * h, rng.uniform(3, w / 4), rng.randint(1, 2))
             for _ in range(3)]
    px = []
    for y in range(h):
        for x in range(w):
            s = math.sin(f * (x * math.cos(a) + y * math.sin(a)))
            c = [col[0][k] * (0.6 + 0.4 * s) for k in range(3)]
            for dx, dy, r, ci in discs:
                if (x - dx) ** 2 + (y - dy) ** 2 < r * r:
                    c = [0.3 * c[k] + 0.7 * col[ci][k] for k in range(3)]
            px += [max(0, min(255, int(v))) for v in c]
    return px
root = sys.argv[1]
for sub, n, size in (("train", 6, 48), ("val", 3, 32)):
    os.makedirs(os.path.join(root, sub))
    for i in range(n):
        png(os.path.join(root, sub, "%02d.png" % i), size, size, image(size, size))
PY_IMAGES

cat > "$T/tiny.cfg" <<CFG_END
model = {
  type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3;
                mid_channels = 8; num_blocks = 1; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; };
  test_cfg = { metrics = ["PSNR", "SSIM"]; crop_border = 0; };
};
data = {
  samples_per_gpu = 2;
  train = { type = "SRFolderGTDataset"; gt_folder = "$T/data/train"; scale = 4;
            gt_patch_size = 16; times = 2; };
  val = { type = "SRFolderGTDataset"; gt_folder = "$T/data/val"; scale = 4; };
};
optimizers = { generator = { type = "Adam"; lr = 2e-3; betas = [0.9, 0.999]; }; };
lr_config = { policy = "Step"; by_epoch = false; step = [5]; gamma = 0.5; };
total_iters = 8;
checkpoint_config = { interval = 2; by_epoch = false; };
evaluation = { interval = 4; save_image = true; num_images = 2; };
log_config = { interval = 2; };
wrapper = { type = "DistributedDataParallelWrapper"; broadcast_buffers = false; };
seed = 1;
work_dir = "$T/unused";
CFG_END

# ---- train, uninterrupted, and stopped at 3 then resumed ----
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/a" > "$T/a.out" 2>&1 \
  || { cat "$T/a.out"; fail "train"; }
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/b" --set total_iters=3 > "$T/b.out" 2>&1 \
  || { cat "$T/b.out"; fail "train to 3"; }
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/b" --resume >> "$T/b.out" 2>&1 \
  || { cat "$T/b.out"; fail "resume"; }
grep -q "resumed from .*latest.safetensors at iteration 3" "$T/b.out" \
  || { cat "$T/b.out"; fail "no resume message"; }
for f in iter_2 iter_4 iter_6 iter_8 latest; do
  [ -s "$T/a/$f.safetensors" ] || fail "missing $T/a/$f.safetensors"
done
[ -s "$T/a/val/iter_4.png" ] && [ -s "$T/a/val/iter_8.png" ] || fail "no evaluation grid"
[ -s "$T/a/config.cfg" ] || fail "no config.cfg in the work dir"
# Issue 33: no duet.lock left behind by a finished run; resuming a finished
# run trains nothing and says how to go on.
[ ! -e "$T/a/duet.lock" ] && [ ! -e "$T/b/duet.lock" ] || fail "duet.lock left in the work dir"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/a" --resume > "$T/done.out" 2>&1 \
  || { cat "$T/done.out"; fail "resuming a finished run"; }
grep -q "is at iteration 8 and total_iters is 8: the run is finished, nothing is trained; to train on, raise total_iters (e.g. --set total_iters=16)" \
  "$T/done.out" || { cat "$T/done.out"; fail "no hint when resuming a finished run"; }

# The log, the checkpoints' contents, and the resume comparison.
"$PY" - "$T" <<'PY_CHECK'
import json, struct, sys
T = sys.argv[1]
def st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}, meta
recs = [json.loads(l) for l in open(T + "/a/log.jsonl")]
train = [r for r in recs if r["mode"] == "train"]
val = [r for r in recs if r["mode"] == "val"]
assert [r["iter"] for r in train] == [2, 4, 6, 8], train
assert [r["iter"] for r in val] == [4, 8], val
for r in train:
    assert set(r) >= {"lr", "loss_pix", "time", "data_time"}, r
    assert r["loss_pix"] > 0 and r["time"] > 0
# lr_config: halved from iteration 5 on.
assert abs(train[0]["lr"]["generator"] - 2e-3) < 1e-9, train[0]
assert abs(train[-1]["lr"]["generator"] - 1e-3) < 1e-9, train[-1]
for r in val:
    assert 10 < r["PSNR"] < 60 and 0 < r["SSIM"] <= 1, r
# The evaluation picture: num_images = 2 rows (image 0 from rank 0, image 1
# from rank 1) of input | output | ground truth, 32x32 panels, 4-pixel gaps.
png = open(T + "/a/val/iter_8.png", "rb").read()
# + the column titles strip (7 px text + 6, on 32 px panels)
assert struct.unpack(">II", png[16:24]) == (3 * 32 + 2 * 4, 2 * 32 + 4 + 13), struct.unpack(">II", png[16:24])
a, ma = st(T + "/a/latest.safetensors")
b, mb = st(T + "/b/latest.safetensors")
assert ma["iter"] == "8" and mb["iter"] == "8" and ma["world_size"] == "2", (ma, mb)
assert "generator.conv_first.weight" in a, sorted(a)[:5]
assert any(k.startswith("optimizer.generator.") for k in a), sorted(a)
assert set(a) == set(b), set(a) ^ set(b)
diff = [k for k in a if a[k] != b[k]]
assert not diff, "the resumed run differs from the uninterrupted one in: %s" % diff
print("test_train_e2e: log.jsonl and checkpoints ok; resumed == uninterrupted on 2 processes "
      "(%d tensors, bitwise)" % len(a))
PY_CHECK

# ---- duet test --json and duet infer ----
"${MPI[@]}" "$DUET" test "$T/tiny.cfg" "$T/a/latest.safetensors" --json --out "$T/test" \
  > "$T/test.json" 2> "$T/test.err" || { cat "$T/test.err"; fail "test"; }
"$PY" - "$T/test.json" <<'PY_TEST'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == 1, lines          # one JSON object, from rank 0 only
r = json.loads(lines[0])
assert r["images"] == 3, r
for k in ("PSNR", "SSIM", "PSNR_bicubic", "SSIM_bicubic"):
    assert isinstance(r[k], float), r
print("test_train_e2e: duet test:", lines[0].strip())
PY_TEST
ls "$T/test/00.png" "$T/test/01.png" "$T/test/02.png" > /dev/null || fail "duet test saved no outputs"
"${MPI[@]}" "$DUET" infer "$T/tiny.cfg" "$T/a/latest.safetensors" "$T/data/val/00.png" \
  "$T/data/val/01.png" --out "$T/infer" > "$T/infer.out" 2>&1 || { cat "$T/infer.out"; fail "infer"; }
"$PY" - "$T/infer" <<'PY_INFER'
import struct, sys
for n in ("00", "01"):
    b = open("%s/%s.png" % (sys.argv[1], n), "rb").read()
    assert struct.unpack(">II", b[16:24]) == (128, 128), n   # 32x32 upscaled x4
PY_INFER

# ---- usage and config errors ----
"$DUET" train --help | grep -q "usage: duet train" || fail "train --help"
"$DUET" test --help | grep -q "usage: duet test" || fail "test --help"
"$DUET" infer --help | grep -q "usage: duet infer" || fail "infer --help"
set +e
"$DUET" train > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "missing CONFIG must exit 2, got $rc"
"$DUET" frobnicate > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "an unknown command must exit 2, got $rc"
cp "$T/tiny.cfg" "$T/typo.cfg"
echo "totl_iters = 3;" >> "$T/typo.cfg"
line=$(wc -l < "$T/typo.cfg")
"${MPI[@]}" "$DUET" train "$T/typo.cfg" --work-dir "$T/c" > "$T/c.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] || fail "an unknown key must fail"
grep -q "typo.cfg:$line: unknown key 'totl_iters'" "$T/c.out" || { cat "$T/c.out"; fail "unknown key message"; }
[ "$(grep -c "unknown key" "$T/c.out")" -eq 1 ] || { cat "$T/c.out"; fail "the error must be printed once"; }

# ---- a corrupt image met mid-run on one rank ends the job ----
# Images are decoded on access (lazy); the file is corrupted once the run has
# written a checkpoint, so the error comes mid-run, on the rank that reads it.
start=$(date +%s)
timeout 120 "${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/d" --set data.train.lazy=true \
  --set data.samples_per_gpu=1 --set checkpoint_config.interval=1 --set total_iters=1000000 \
  > "$T/d.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -e "$T/d/iter_3.safetensors" ] && break
  kill -0 $pid 2> /dev/null || break
  sleep 0.1
done
[ -e "$T/d/iter_3.safetensors" ] || { cat "$T/d.out"; fail "no checkpoint before the corruption"; }
head -c 200 "$T/data/train/03.png" > "$T/bad.png"
mv "$T/bad.png" "$T/data/train/03.png"
set +e
wait $pid; rc=$?
set -e
[ $rc -ne 0 ] || fail "a corrupt image must fail the run"
[ $rc -ne 124 ] || { cat "$T/d.out"; fail "the job hung after an error on one rank"; }
grep -q "rank [01]: .*03.png" "$T/d.out" || { cat "$T/d.out"; fail "the error must name the rank and the file"; }
"$DUET" test "$T/tiny.cfg" "$T/d/latest.safetensors" --json > /dev/null 2>&1 \
  || fail "the last checkpoint before the error must stay readable"
echo "test_train_e2e: a corrupt image ended the job in $(( $(date +%s) - start ))s (exit $rc)," \
  "$(ls "$T/d" | grep -c '^iter_') checkpoints kept:"
grep "03.png" "$T/d.out" | head -2
echo "test_train_e2e: PASS"
