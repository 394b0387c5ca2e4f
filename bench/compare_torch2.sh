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
#   MODELS=tiny,full NPROC=1,2 PRECISIONS=fp32,bf16 ENVS=found,unset
#   BENCH_ARGS="--steps 1"   (extra bench_train arguments, e.g. fewer steps)
#
# ENVS: `found` runs with the environment as found, `unset` with every
# OPENBLAS_* variable removed (issue 19 asks for both); the table has a
# column for it, and the header lines of each environment's first run name
# the kernels both sides ran; where no OPENBLAS_* variable is set, `unset`
# is `found` and runs once. Not timed on a quiet machine: from the per-step
# times in docs/performance.md, the 8 rows x REPS=3 take about 20 minutes
# per environment (the full model's 12 rows about 17 of them: 3 steps of
# each side plus start-up); BENCH_ARGS="--steps 1" brings that to about 12.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
BUILD=${2:-build}
TORCH2=${TORCH2:-${DUET_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/torch2-venv}/bin/python}
MODELS=${MODELS:-tiny,full} NPROC=${NPROC:-1,2} PRECISIONS=${PRECISIONS:-fp32,bf16}
ENVS=${ENVS:-found,unset} BENCH_ARGS=${BENCH_ARGS:-}
[ -x "$TORCH2" ] || { echo "compare_torch2: no PyTorch 2 at $TORCH2 (bash scripts/make-torch2-venv.sh)"; exit 1; }
out=$(mktemp -d /tmp/duet_compare_XXXXXX)
unset_openblas=()
for v in $(env | sed -n 's/^\(OPENBLAS_[A-Za-z0-9_]*\)=.*/\1/p'); do unset_openblas+=(-u "$v"); done
touch "$out/rows.txt"
for e in ${ENVS//,/ }; do
  case "$e" in
    found) envcmd=(env) ;;
    unset)
      if [ ${#unset_openblas[@]} -eq 0 ]; then
        echo "environment unset: no OPENBLAS_* variable is set, so it is 'found'; not run twice"
        continue
      fi
      envcmd=(env "${unset_openblas[@]}") ;;
    *) echo "compare_torch2: ENVS: '$e' is neither found nor unset" >&2; exit 2 ;;
  esac
  for prec in ${PRECISIONS//,/ }; do
    flag=""; [ "$prec" = bf16 ] && flag=--bf16
    for r in $(seq 1 "$REPS"); do
      f="$out/$e.$prec.$r"
      # shellcheck disable=SC2086
      "${envcmd[@]}" "$BUILD/bench_train" --models "$MODELS" --nproc "$NPROC" $flag $BENCH_ARGS \
        --torch-python "$TORCH2" > "$f.txt" 2> "$f.err" || true
      grep -E "^(tiny|full) " "$f.txt" | sed "s/^/$e $prec /" >> "$out/rows.txt" || true
    done
  done
  echo "environment $e (${envcmd[*]}):"
  grep -hE "^(duet|PyTorch):|sgemm peak" "$out/$e".*.1.txt 2>/dev/null | sort -u | sed 's/^/    /' || true
done
python3 - "$out/rows.txt" "$REPS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.replace("|", " ").split()
    # env prec model procs thr batch duet_ips torch_ips ratio duet_MB torch_MB gf peak
    key = (f[2], f[3], f[4], f[1], f[0], f[5])
    try:
        vals = (float(f[6]), float(f[7]), float(f[8].rstrip("x")), float(f[9]), float(f[10]))
    except (ValueError, IndexError):
        continue  # a side that failed: the raw runs say which
    rows.setdefault(key, []).append(vals)
print("| model | procs | threads | precision | OPENBLAS_* | batch | duet img/s | PyTorch 2 img/s "
      "| ratio (median) | runs | duet MB | PyTorch MB | memory ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for k, v in sorted(rows.items()):
    med = [statistics.median(x[i] for x in v) for i in range(5)]
    runs = ", ".join("%.2f" % x[2] for x in v)
    print("| %s | %s | %s | %s | %s | %s | %.2f | %.2f | **%.2fx** | %s | %.0f | %.0f | %.2f |"
          % (*k, med[0], med[1], med[2], runs, med[3], med[4], med[3] / med[4]))
PY
echo "(raw runs in $out)"
