#!/usr/bin/env bash
# CTest's mmedit_bench_mmedit_<model> (cmake/DuetTests.cmake): bench_mmedit runs one
# train_step of MODEL on each side, duet's and MMEditing's own (its venv),
# and prints a row with a number on both sides and their ratio. No timing
# is judged: the row's numbers only have to exist (bench_mmedit exits 1 and
# prints nan when a side failed).
#   bench_smoke.sh VENV BENCH_MMEDIT MODEL
# Exits 77 (CTest's skip) when the venv is absent.
set -euo pipefail
venv="$1" bench="$2" model="$3"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/duet-stamp" ]; then
  echo "SKIPPED: no MMEditing venv at $venv; make it with: bash scripts/make-mmedit-venv.sh"
  exit 77
fi
out=$("$bench" --models "$model" --nproc 1 --threads 1 --reps 1 --steps 1 --warmup 0 \
      --python "$venv/bin/python" --log /dev/stderr)
echo "$out"
num='[0-9][0-9.e+-]*'
echo "$out" | grep -Eq "^\| $model \| 1 x 1 \| [0-9]+ \| $num \| $num \| \*\*${num}x\*\* " \
  || { echo "bench_smoke: no row with both sides' numbers for $model" >&2; exit 1; }
