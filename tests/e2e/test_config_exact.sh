#!/usr/bin/env bash
# Configs never change a number silently (issue 35, class 4), end to end:
#   - duet train --dry-run refuses total_iters = 9223372036854775808L (it
#     saturated to 2^63-1), a 65-bit hex literal (read as -1), and a NUL
#     byte in a comment before total_iters = 4294967300 (which switched the
#     32-bit check off: it ran 4 iterations), naming the line;
#   - convert-config.py escapes every control byte of a string (\xNN; it
#     wrote them raw, NULs included), and duet reads the result back;
#     refuses with a message (no traceback) a NUL in a string, an integer
#     beyond 64 bits, inf and nan, and a non-ASCII key;
#   - convert-config's evaluator bounded (issue 35, class 5): string and
#     list repetition, powers, %-format and f-string widths, shared dicts
#     expanded 40 levels deep, nesting, _base_ that is not a name, a device
#     or a FIFO, a _base_ diamond of 2^40 paths; errors as messages, never
#     tracebacks; f-string format specs and !r applied.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_config_exact
CONVERT="$(cd "$(dirname "$0")/../.." && pwd)/scripts/convert-config.py"
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_config_exact: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}
e2e_pngs "$T/data" 2
dry() { "$DUET" train "$1" --work-dir "$T/w" --dry-run > "$T/dry.out" 2>&1; }
for lit in 9223372036854775808L 0x10000000000000000L; do
  e2e_tiny_cfg "$T/a.cfg" "$T/data" 4 1 "total_iters = $lit;"
  if dry "$T/a.cfg"; then fail "total_iters = $lit accepted: $(cat "$T/dry.out")"; fi
  grep -q "a.cfg:[0-9]*: 'total_iters' = $lit does not fit in a 64-bit integer" "$T/dry.out" \
    || fail "$lit: $(cat "$T/dry.out")"
done
e2e_tiny_cfg "$T/n.cfg" "$T/data" 4 1 "$(printf '# a\001b\nlog_config = { interval = 1; };')"
"$PY" - "$T/n.cfg" <<'PY'
import sys
p = sys.argv[1]
t = open(p, "rb").read().replace(b"\x01", b"\x00") + b"total_iters = 4294967300;\n"
open(p, "wb").write(t)
PY
if dry "$T/n.cfg"; then fail "a NUL byte accepted: $(cat "$T/dry.out")"; fi
grep -q "n.cfg:[0-9]*: a NUL byte" "$T/dry.out" || fail "NUL: $(cat "$T/dry.out")"

# convert-config.py: control bytes escaped, and read back by duet.
cat > "$T/c.py" <<'PY'
exp_name = 'a\x01b\nc\x1b[31md\x7f"\\'
total_iters = 3
PY
"$PY" "$CONVERT" "$T/c.py" -o "$T/c.cfg" > "$T/c.out" 2>&1 || fail "convert: $(cat "$T/c.out")"
grep -qF 'exp_name = "a\x01b\x0ac\x1b[31md\x7f\"\\";' "$T/c.cfg" || fail "escapes: $(cat -A "$T/c.cfg")"
! LC_ALL=C grep -q "$(printf '[\001-\010\016-\037\177]')" "$T/c.cfg" || fail "a raw control byte: $(cat -A "$T/c.cfg")"
e2e_tiny_cfg "$T/r.cfg" "$T/data" 4 1 "total_iters = 1; $(grep exp_name "$T/c.cfg")"
dry "$T/r.cfg" || fail "duet does not read the escaped string: $(cat "$T/dry.out")"
for case in "exp_name = 'a\\x00b'|NUL byte" "total_iters = 2**64|64-bit" \
            "model = dict(lr=1e999)|finite" "model = dict(café=1)|not a libconfig name"; do
  src=${case%|*} want=${case#*|}
  printf '%s\n' "$src" > "$T/bad.py"
  if "$PY" "$CONVERT" "$T/bad.py" -o "$T/bad.cfg" > "$T/bad.out" 2>&1; then fail "$src accepted"; fi
  grep -q "$want" "$T/bad.out" && ! grep -q Traceback "$T/bad.out" || fail "$src: $(cat "$T/bad.out")"
  [ ! -e "$T/bad.cfg" ] || fail "$src: wrote $T/bad.cfg"
done

# The evaluator's bounds (issue 35, class 5): each refused with a message
# naming the line, in well under the CPU-time limit (which only turns a
# hang into a failure), nothing written.
mkdir "$T/ev" && mkfifo "$T/ev/fifo.py"
"$PY" - "$T/ev" <<'PY'
import os, sys
d = sys.argv[1]
cases = {
    "rep": "exp_name = 'a' * 10**10\n",
    "pow": "total_iters = 10**10**8\n",
    "width": "exp_name = '%*d' % (10**9, 1)\n",
    "fwidth": "exp_name = f'{1:>1000000000}'\n",
    "shared": "a0 = dict(x=1)\n" + "".join("a%d = dict(p=a%d, q=a%d)\n" % (i, i - 1, i - 1)
                                          for i in range(1, 41)) + "model = a40\n",
    "deep": "model = " + "[" * 200 + "]" * 200 + "\n",
    "base_int": "_base_ = 5\n",
    "base_dev": "_base_ = '/dev/zero'\n",
    "base_fifo": "_base_ = 'fifo.py'\n",
    "index": "exp_name = ['a'][5]\n",
}
for i in range(41):  # a _base_ diamond of 2^40 paths
    nxt = "['n%d.py', 'n%d.py']" % (i + 1, i + 1) if i < 40 else "[]"
    open(os.path.join(d, "n%d.py" % i), "w").write("_base_ = %s\nx%d = 1\n" % (nxt, i))
for k, v in cases.items():
    open(os.path.join(d, k + ".py"), "w").write(v)
PY
set +e
for c in rep:repetition pow:"a power with more than 256 bits" width:"a '\*' width" \
         fwidth:"the format spec" shared:"expands to more than" deep:"nested more than" \
         base_int:"_base_ must be a file name" base_dev:"/dev/zero: not a regular file" \
         base_fifo:"fifo.py: not a regular file" index:"cannot be evaluated: IndexError" \
         n0:"more than 64 config files"; do
  f=${c%%:*} want=${c#*:}
  (ulimit -t 60; exec timeout 120 "$PY" "$CONVERT" "$T/ev/$f.py" -o "$T/ev/$f.cfg") > "$T/ev/$f.out" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "$want" "$T/ev/$f.out" && ! grep -q Traceback "$T/ev/$f.out" \
    || fail "evaluator $f: rc $rc, $(head -c 300 "$T/ev/$f.out")"
  [ ! -e "$T/ev/$f.cfg" ] || fail "evaluator $f: wrote $f.cfg"
done
set -e
# f-string format specs and conversions are applied, not dropped.
printf "exp_name = f'{0.1:.3f} {\"x\"!r} {7:>3}'\n" > "$T/ev/fs.py"
"$PY" "$CONVERT" "$T/ev/fs.py" -o "$T/ev/fs.cfg" > "$T/ev/fs.out" 2>&1 || fail "f-string: $(cat "$T/ev/fs.out")"
grep -qF "exp_name = \"0.100 'x'   7\";" "$T/ev/fs.cfg" || fail "f-string: $(cat "$T/ev/fs.cfg")"
[ $nfail -eq 0 ] || exit 1
echo "test_config_exact: PASS"
