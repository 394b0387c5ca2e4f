#!/usr/bin/env bash
# duet against PyTorch 2 (and Debian's PyTorch 1.13) on the SRGAN training
# step (issue 19): bench_train's table for the tiny and the full model, on 1
# and 2 processes, float32 and bf16 (duet's mixed precision against
# torch.autocast), REPS times each, then the median of each row's images/s
# and of the ratio measured within each run (the two sides run back to
# back, so a ratio sees the same load; a median of ratios, not a ratio of
# medians). Memory: the median peak resident MB per process.
#
#   bash bench/compare_torch2.sh [REPS] [BUILD]        (default 3, build)
#   TORCH2=/path/to/python  (default: the venv of scripts/make-torch2-venv.sh)
#   MODELS=tiny,full NPROC=1,2 PRECISIONS=fp32,bf16 STEPS_FULL=2
#
# The environment is left as found (say OPENBLAS_CORETYPE when you quote
# the numbers); run it once more with `env -u OPENBLAS_CORETYPE` where the
# environment sets it. About 12 minutes with the defaults on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
BUILD=${2:-build}
TORCH2=${TORCH2:-${DUET_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/torch2-venv}/bin/python}
MODELS=${MODELS:-tiny,full} NPROC=${NPROC:-1,2} PRECISIONS=${PRECISIONS:-fp32,bf16}
[ -x "$TORCH2" ] || { echo "compare_torch2: no PyTorch 2 at $TORCH2 (bash scripts/make-torch2-venv.sh)"; exit 1; }
out=$(mktemp -d /tmp/duet_compare_XXXXXX)
for prec in ${PRECISIONS//,/ }; do
  flag=""; [ "$prec" = bf16 ] && flag=--bf16
  for r in $(seq 1 "$REPS"); do
    "$BUILD/bench_train" --models "$MODELS" --nproc "$NPROC" $flag --torch-python "$TORCH2" \
      > "$out/$prec.$r.txt" 2> "$out/$prec.$r.err" || true
    grep -E "^(tiny|full) " "$out/$prec.$r.txt" | sed "s/^/$prec /" >> "$out/rows.txt" || true
  done
done
head -4 "$out/fp32.1.txt" 2>/dev/null | grep -E "duet:|PyTorch:|peak" || true
python3 - "$out/rows.txt" "$REPS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.replace("|", " ").split()
    # prec model procs thr batch duet_ips torch_ips ratio duet_MB torch_MB gf peak
    key = (f[0], f[1], f[2], f[3], f[4])
    try:
        vals = (float(f[5]), float(f[6]), float(f[7].rstrip("x")), float(f[8]), float(f[9]))
    except ValueError:
        continue
    rows.setdefault(key, []).append(vals)
print("| precision | model | procs | threads | batch | duet img/s | PyTorch 2 img/s | ratio (median of %s) | duet MB | PyTorch MB | memory ratio |" % sys.argv[2])
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k, v in rows.items():
    med = [statistics.median(x[i] for x in v) for i in range(5)]
    print("| %s | %s | %s | %s | %s | %.2f | %.2f | **%.2fx** | %.0f | %.0f | %.2f |" % (*k, *med[:2], med[2], med[3], med[4], med[3] / med[4]))
PY
echo "(raw runs in $out)"
