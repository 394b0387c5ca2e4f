#!/usr/bin/env bash
# Losing a node (issue 35, class 10): a run of 2 processes x 3 samples,
# stopped at iteration 3 of an epoch of 4, resumed on 3 processes x 2 and
# on 1 process x 6 (the same total batch), draws exactly what the
# uninterrupted 2-process run draws from iteration 4 on, across the epoch
# boundary: the same epoch and the same dataset indices at every iteration
# (DUET_SAMPLE_TRACE logs each rank's; a global batch is compared as a
# multiset, its split over the ranks being the world size's). Before, the
# data order restarted at the next epoch. A resume whose total batch does
# not divide the global sample index says it restarts the epoch.
# Also: --resume refuses a checkpoint whose checksums were stripped (one
# data byte flipped would go unseen), naming load_from.
# Needs DUET_EXE (set by CTest), mpiexec and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_resume_world
MPI=(mpiexec --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
e2e_pngs "$T/data" 24 16
e2e_tiny_cfg "$T/c.cfg" "$T/data" 4 1 'total_iters = 8; log_config = { interval = 1; };'
run() { # NPROC PER_GPU WORK_DIR TRACE TOTAL [--resume]
  DUET_SAMPLE_TRACE="$4" "${MPI[@]}" -n "$1" "$DUET" train "$T/c.cfg" --work-dir "$3" \
    --set data.samples_per_gpu="$2" --set total_iters="$5" "${@:6}" > "$3.out" 2>&1 \
    || { cat "$3.out"; fail "run $*"; }
}
run 2 3 "$T/full" "$T/full.trace" 8
run 2 3 "$T/w" "$T/cut.trace" 3
cp -r "$T/w" "$T/w1"
run 3 2 "$T/w" "$T/three.trace" 8 --resume
run 1 6 "$T/w1" "$T/one.trace" 8 --resume
grep -q "continuing the same stream of samples at epoch 0, global sample 18" "$T/w.out" \
  || fail "no note of the continued stream: $(grep -i resum "$T/w.out")"
"$PY" - "$T" <<'PY'
import collections, glob, sys
T = sys.argv[1]
def stream(prefix):
    it = collections.defaultdict(list)
    for f in glob.glob(prefix + ".*"):
        for line in open(f):
            v = list(map(int, line.split()))
            it[v[0]].append((v[1], v[2:]))
    out = {}
    for i, parts in it.items():
        epochs = {e for e, _ in parts}
        assert len(epochs) == 1, (prefix, i, parts)
        out[i] = (epochs.pop(), sorted(x for _, idx in parts for x in idx))
    return out
full, cut = stream(T + "/full.trace"), stream(T + "/cut.trace")
assert sorted(full) == list(range(1, 9)) and sorted(cut) == [1, 2, 3], (sorted(full), sorted(cut))
assert all(len(full[i][1]) == 6 for i in full), full
assert [full[i] for i in (1, 2, 3)] == [cut[i] for i in (1, 2, 3)]
assert {full[i][0] for i in full} == {0, 1}, "the stream must cross an epoch boundary"
for name in ("three", "one"):
    s = stream(T + "/" + name + ".trace")
    assert sorted(s) == list(range(4, 9)), (name, sorted(s))
    for i in range(4, 9):
        assert s[i] == full[i], "%s, iteration %d: %s, uninterrupted %s" % (name, i, s[i], full[i])
print("test_resume_world: iterations 4-8 on 3 x 2 and on 1 x 6 draw what 2 x 3 draws")
PY
# A total batch that does not divide the global sample index (18 by 4).
cp -r "$T/w1" "$T/w4"
rm -f "$T"/w4/iter_8.safetensors; ln -f "$T/w4/iter_3.safetensors" "$T/w4/latest.safetensors"
run 4 1 "$T/w4" "$T/four.trace" 5 --resume
grep -q "does not divide its global sample index 18: the data order restarts at epoch 1" "$T/w4.out" \
  || fail "no warning for a total batch that does not divide: $(grep -i resum "$T/w4.out")"

# Checksums stripped, one data byte flipped: refused for --resume.
"$PY" - "$T/w1/iter_3.safetensors" "$T/strip.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"] = {k: v for k, v in h["__metadata__"].items()
                     if not k.startswith("checksum")}
raw = json.dumps(h).encode()
raw += b" " * ((8 - len(raw) % 8) % 8)
body = bytearray(b[8 + n:])
body[len(body) // 2] ^= 1
open(sys.argv[2], "wb").write(struct.pack("<Q", len(raw)) + raw + bytes(body))
PY
mkdir "$T/ws"
set +e
"$DUET" train "$T/c.cfg" --work-dir "$T/ws" --resume-from "$T/strip.safetensors" > "$T/ws.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] && grep -q "strip.safetensors has no checksums.*use load_from" "$T/ws.out" \
  || fail "a checkpoint without checksums resumed: rc $rc, $(tail -3 "$T/ws.out")"
echo "test_resume_world: PASS"
