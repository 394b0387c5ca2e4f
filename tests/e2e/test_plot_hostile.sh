#!/usr/bin/env bash
# duet plot on hostile logs (issue 35, class 6):
#   - a FIFO as log.jsonl is refused as not a regular file (it blocked for
#     ever: `timeout` here only turns a hang into a failure);
#   - a 10^6-line log is read in one pass per series (each point scanned
#     all earlier ones: over 120 s before); the CPU-time limit (60 s, ~1 s
#     needed now) only turns quadratic work into a failure, and the result
#     is checked: a resume that went back still replaces the iterations it
#     ran again, the latest value winning;
#   - a 3000-key record: 256 keys kept and at most 64 panels drawn, each
#     with a note (1.4 GB before); the peak memory over a one-key log's is
#     under 200 MB;
#   - a record over 1 MiB is skipped with a warning, the others plotted.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_plot_hostile
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_plot_hostile: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}
set +e

mkdir "$T/fifo" && mkfifo "$T/fifo/log.jsonl"
timeout 60 "$DUET" plot "$T/fifo" --out "$T/f.png" > "$T/f.out" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "log.jsonl: not a regular file" "$T/f.out" \
  || fail "a FIFO log: rc $rc, $(cat "$T/f.out")"

mkdir "$T/big"
"$PY" - "$T/big/log.jsonl" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write('{"mode":"run","iter":0,"resumed_from":null}\n')
    for i in range(1, 1000001):
        f.write('{"mode":"train","iter":%d,"loss":%d}\n' % (i, i % 7))
    # A resume from iteration 999990: its values replace the ones logged before.
    f.write('{"mode":"run","iter":999990,"resumed_from":"iter_999990.safetensors"}\n')
    for i in range(999991, 1000003):
        f.write('{"mode":"train","iter":%d,"loss":9}\n' % i)
PY
(ulimit -t 60; exec "$DUET" plot "$T/big" --out "$T/big.png") > "$T/big.out" 2>&1; rc=$?
[ $rc -eq 0 ] || fail "a 10^6-line log: rc $rc, $(tail -3 "$T/big.out")"
grep -q "loss (train): 1000002 points, iterations 1..1000002, values 0..9" "$T/big.out" \
  || fail "a 10^6-line log: $(tail -3 "$T/big.out")"

rss() { # peak resident MB of `duet plot DIR`
  "$PY" - "$DUET" "$1" "$2" <<'PY'
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "plot", sys.argv[2], "--out", sys.argv[3]], capture_output=True, text=True)
sys.stdout.write(r.stdout + r.stderr)
print("rc=%d rss=%d" % (r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024))
PY
}
mkdir "$T/one" "$T/keys"
echo '{"mode":"train","iter":1,"loss":1}' > "$T/one/log.jsonl"
"$PY" -c "
import json, sys
print(json.dumps(dict({'mode': 'train', 'iter': 1}, **{'k%04d' % i: i for i in range(3000)})))
" > "$T/keys/log.jsonl"
rss "$T/one" "$T/one.png" > "$T/one.out"
rss "$T/keys" "$T/keys.png" > "$T/keys.out"
base=$(sed -n 's/^rc=0 rss=//p' "$T/one.out"); many=$(sed -n 's/^rc=0 rss=//p' "$T/keys.out")
[ -n "$base" ] && [ -n "$many" ] && [ $((many - base)) -lt 200 ] \
  || fail "a 3000-key record: peak $many MB against $base MB for one key: $(tail -2 "$T/keys.out")"
grep -q "more than 256 distinct keys; 2744 values of the others were not read" "$T/keys.out" \
  && grep -q "note: 256 curves; the first 64 are drawn" "$T/keys.out" || fail "no note on the caps: $(head -3 "$T/keys.out")"

mkdir "$T/long"
"$PY" - "$T/long/log.jsonl" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write('{"mode":"train","iter":1,"loss":1}\n')
    f.write('{"mode":"train","iter":2,"loss":2,"pad":"%s"}\n' % ("x" * (2 << 20)))
    f.write('{"mode":"train","iter":3,"loss":3}\n')
PY
"$DUET" plot "$T/long" --out "$T/long.png" > "$T/long.out" 2>&1 || fail "a long record: $(cat "$T/long.out" | cut -c1-300)"
grep -q "log.jsonl:2: a record longer than 1048576 bytes: skipped" "$T/long.out" \
  && grep -q "loss (train): 2 points, iterations 1..3" "$T/long.out" || fail "a long record: $(cut -c1-300 "$T/long.out")"
set -e
[ $nfail -eq 0 ] || exit 1
echo "test_plot_hostile: PASS"
