#!/usr/bin/env bash
# What `duet train` refuses before it does harm (issue 10, defects 2, 5, 6, 7):
#   - a second run in a busy work dir is refused on every rank (2 processes,
#     bounded by a timeout: no hang), naming the first run's pid and host;
#   - temporary checkpoint files a killed write left are removed at start,
#     nothing else is;
#   - resume metadata out of range (iter -5 or 999999999999, world_size 0 or
#     -2) and total_iters below the checkpoint's iteration are errors; a
#     checkpoint of another batch size resumes with a warning;
#   - config values that would overflow, wrap or make no sense are refused at
#     load with file, line and key.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/duet_guards_XXXXXX)
[ -d "$T" ] || exit 1
bg=
cleanup() {
  [ -n "$bg" ] && kill -KILL "$bg" 2> /dev/null
  rm -rf "$T"
}
trap cleanup EXIT
MPI=(mpiexec -n 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 DUET_LOG=warn DUET_PROGRESS=0
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_run_guards: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}

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
os.makedirs(os.path.join(sys.argv[1], "train"))
for i in range(4):
    png(os.path.join(sys.argv[1], "train", "%02d.png" % i), 16, 16, rng)
PY_IMAGES

cat > "$T/tiny.cfg" <<CFG_END
model = {
  type = "BasicRestorer";
  generator = { type = "MSRResNet"; in_channels = 3; out_channels = 3;
                mid_channels = 4; num_blocks = 1; upscale_factor = 4; };
  pixel_loss = { type = "L1Loss"; loss_weight = 1.0; reduction = "mean"; };
  test_cfg = { metrics = ["PSNR"]; crop_border = 0; };
};
data = {
  samples_per_gpu = 2;
  train = { type = "SRFolderGTDataset"; gt_folder = "$T/data/train"; scale = 4; gt_patch_size = 8; };
};
optimizers = { generator = { type = "Adam"; lr = 1e-3; }; };
lr_config = { policy = "Step"; step = [100]; gamma = 0.5; };
total_iters = 4;
checkpoint_config = { interval = 2; };
log_config = { interval = 1000; };
wrapper = { type = "DistributedDataParallelWrapper"; };
seed = 1;
CFG_END

# ---- 5: one run per work dir ----
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/busy" --set total_iters=100000000 \
  > "$T/a.out" 2>&1 &
bg=$!
for _ in $(seq 600); do
  grep -q "^pid " "$T/busy/duet.lock" 2> /dev/null && [ -e "$T/busy/log.jsonl" ] && break
  kill -0 $bg 2> /dev/null || break
  sleep 0.1
done
if grep -q "^pid " "$T/busy/duet.lock" 2> /dev/null; then
  holder=$(head -1 "$T/busy/duet.lock")
else
  holder="pid "  # old code writes no lock: the second run below must still fail
fi
kill -0 $bg 2> /dev/null || { cat "$T/a.out"; fail "the first run did not start"; }
set +e
timeout 120 "${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/busy" --set total_iters=2 \
  > "$T/b.out" 2>&1; rc=$?
set -e
[ $rc -ne 124 ] || fail "the second run hung"
[ $rc -ne 0 ] || { cat "$T/b.out"; fail "a second run in a busy work dir must be refused"; }
grep -qF "is in use by another duet run ($holder" "$T/b.out" \
  || { cat "$T/b.out"; fail "the refusal must name the other run ($holder)"; }
kill -0 $bg 2> /dev/null || { cat "$T/a.out"; fail "the first run died"; }
kill -TERM $bg
for _ in $(seq 300); do kill -0 $bg 2> /dev/null || break; sleep 0.1; done
kill -KILL $bg 2> /dev/null || true
wait $bg 2> /dev/null || true
bg=

# ---- 6: stale temporary checkpoints ----
mkdir -p "$T/w6"
touch "$T/w6/iter_2.safetensors.tmp.4242.0" "$T/w6/latest.safetensors.tmp.4242.1" \
  "$T/w6/notes.txt" "$T/w6/mine.safetensors.tmp.txt"
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/w6" --set total_iters=2 > "$T/6.out" 2>&1 \
  || { cat "$T/6.out"; fail "train"; }
[ ! -e "$T/w6/iter_2.safetensors.tmp.4242.0" ] && [ ! -e "$T/w6/latest.safetensors.tmp.4242.1" ] \
  || fail "stale temporary checkpoints were left: $(ls "$T/w6")"
[ -e "$T/w6/notes.txt" ] && [ -e "$T/w6/mine.safetensors.tmp.txt" ] || fail "a user's file was removed"

# ---- 7: resume metadata ----
"${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/r" > "$T/r.out" 2>&1 \
  || { cat "$T/r.out"; fail "train"; }
# A copy of latest.safetensors with metadata KEY set to VALUE, and its
# checksum_meta/KEY recomputed (duet-h64 of "key\0value", docs/reliability.md)
# unless RAW=1: the range checks below are for values a file's checksums
# vouch for (or a file without metadata checksums); an edit that leaves the
# checksum is caught before them.
edit_meta() {
  "$PY" - "$T/r/latest.safetensors" "$T/r/$1.safetensors" "$2" "$3" "${RAW:-0}" <<'PY_META'
import json, struct, sys
src, dst, key, value, raw = sys.argv[1:]
def h64(data):
    M, P = (1 << 64) - 1, 0x100000001b3
    h, i = 0xcbf29ce484222325, 0
    while i + 8 <= len(data):
        h = ((h ^ struct.unpack("<Q", data[i:i + 8])[0]) * P) & M
        i += 8
    for c in data[i:]:
        h = ((h ^ c) * P) & M
    h = ((h ^ len(data)) * P) & M
    return h ^ (h >> 32)
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"][key] = value
if raw != "1":
    h["__metadata__"]["checksum_meta/" + key] = "%016x" % h64(key.encode() + b"\0" + value.encode())
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(dst, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY_META
}
resume_fails() {  # NAME KEY VALUE EXPECTED-TEXT [--set ...]
  local name=$1 key=$2 value=$3 want=$4
  shift 4
  edit_meta "$name" "$key" "$value"
  set +e
  timeout 120 "${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/r" \
    --resume="$T/r/$name.safetensors" --set total_iters=6 "$@" > "$T/$name.out" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$T/$name.out"; fail "$key = $value must fail (rc $rc)"; return 0; }
  grep -qF "$want" "$T/$name.out" || { cat "$T/$name.out"; fail "$key = $value: no '$want'"; }
}
RAW=1 resume_fails raw_iter iter 3 "metadata entry 'iter' = '3' fails its checksum"
resume_fails neg_iter iter -5 "metadata 'iter' = -5 is out of range"
resume_fails big_iter iter 999999999999 "saved at iteration 999999999999, beyond total_iters = 6"
resume_fails world0 world_size 0 "metadata 'world_size' = 0 is out of range"
resume_fails world_neg world_size -2 "metadata 'world_size' = -2 is out of range"
resume_fails below iter 4 "saved at iteration 4, beyond total_iters = 3" --set total_iters=3
# Another batch size: allowed, with a warning that says what changes.
edit_meta batch samples_per_gpu 1
DUET_LOG=info "${MPI[@]}" "$DUET" train "$T/tiny.cfg" --work-dir "$T/r" \
  --resume="$T/r/batch.safetensors" --set total_iters=6 > "$T/batch.out" 2>&1 \
  || { cat "$T/batch.out"; fail "resume with another batch size"; }
grep -q "written by 2 processes x 1 samples per GPU, this run has 2 x 2 (total batch 2 -> 4, learning rates not rescaled): continuing the same stream of samples" \
  "$T/batch.out" || { cat "$T/batch.out"; fail "no warning for another batch size"; }

# ---- 2 and 7: config values, refused at load with file, line and key ----
config_fails() {  # NAME EXPECTED-TEXT (CFG from $T/$NAME.cfg or tiny.cfg) ARGS...
  local name=$1 want=$2 cfg="$T/tiny.cfg"
  shift 2
  [ -e "$T/$name.cfg" ] && cfg="$T/$name.cfg"
  set +e
  timeout 120 "${MPI[@]}" "$DUET" train "$cfg" --work-dir "$T/c_$name" "$@" > "$T/c_$name.out" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$T/c_$name.out"; fail "$name must fail (rc $rc)"; return 0; }
  grep -qF -- "$want" "$T/c_$name.out" || { cat "$T/c_$name.out"; fail "$name: no '$want'"; }
  ! ls "$T/c_$name"/iter_* > /dev/null 2>&1 || fail "$name: trained before failing"
}
sed 's/scale = 4;/scale = 4294967300;/' "$T/tiny.cfg" > "$T/wrap.cfg"
config_fails wrap "wrap.cfg:10: 'scale' = 4294967300 does not fit in a 32-bit integer"
sed 's/scale = 4;/scale = 4294967300L;/' "$T/tiny.cfg" > "$T/scale64.cfg"
config_fails scale64 "scale64.cfg:10: 'data.train.scale' must be an integer in [1, 64], got 4294967300"
sed 's/lr = 1e-3;/lr = 1e999;/' "$T/tiny.cfg" > "$T/inf.cfg"
config_fails inf "inf.cfg:12: 'optimizers.generator.lr' must be a finite number"
config_fails prefetch "'data.prefetch' must be an integer in [0, 64], got -1" --set data.prefetch=-1
config_fails gamma "'lr_config.gamma' must be >= 0" --set lr_config.gamma=-1.0
config_fails bucket0 "'wrapper.bucket_cap_mb' must be > 0" --set wrapper.bucket_cap_mb=0
config_fails bucketneg "'wrapper.bucket_cap_mb' must be > 0" --set wrapper.bucket_cap_mb=-5
config_fails crop "'model.test_cfg.crop_border' must be an integer in [0, 2147483647], got -4" --set model.test_cfg.crop_border=-4
config_fails spg "'data.samples_per_gpu' must be an integer in [1, 2147483647]" \
  --set data.samples_per_gpu=4611686018427387904
config_fails times "repeat dataset: 4 samples x times = 4611686018427387904 is more than 2^63" \
  --set data.train.times=4611686018427387904

[ $nfail -eq 0 ] || exit 1
echo "test_run_guards: PASS"
