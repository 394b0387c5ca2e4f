#!/usr/bin/env bash
# CPU seconds per SRGAN training step, one process on one thread: duet with
# float32 convolutions on im2col + SGEMM (the default), duet with
# DUET_CONV=onednn and with DUET_CONV=winograd, and PyTorch (bench/train_torch.py), each run twice with
# a different number of steps, so that start-up (imports, JIT, the first
# allocations) drops out of the difference:
#
#   cpu/step = (CPU(S2 steps) - CPU(S1 steps)) / (S2 - S1)
#
# CPU time (user + system of the process and its children, /usr/bin/time)
# moves much less than wall time when other work shares the cores, which is
# why this exists next to bench_train: on a busy machine it still compares
# the kernels; it says nothing about threads or processes scaling.
#
#   bash bench/cpu_per_step.sh [MODEL] [REPS] [BUILD]   (tiny, 3, build)
#   TORCH=/path/to/python (default: the venv of scripts/make-torch2-venv.sh)
#   S1, S2: the two step counts (default tiny 4 and 24, full 1 and 3)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-tiny}
REPS=${2:-3}
BUILD=${3:-build}
TORCH=${TORCH:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/torch2-venv/bin/python}
case "$MODEL" in
  tiny) S1=${S1:-4} S2=${S2:-24} ;;
  full) S1=${S1:-1} S2=${S2:-3} ;;
  *) echo "cpu_per_step: MODEL is tiny or full, not '$MODEL'" >&2; exit 2 ;;
esac
[ -x "$BUILD/bench_train" ] || { echo "cpu_per_step: no $BUILD/bench_train" >&2; exit 1; }
[ -x "$TORCH" ] || { echo "cpu_per_step: no python at $TORCH" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "cpu_per_step: needs /usr/bin/time" >&2; exit 1; }

# cpu SIDE STEPS: CPU seconds of one run.
cpu() {
  local side=$1 steps=$2 f
  f=$(mktemp)
  case "$side" in
    im2col) env -u DUET_CONV DUET_NUM_THREADS=1 /usr/bin/time -o "$f" -f "%U %S" \
              "$BUILD/bench_train" --worker --models "$MODEL" --steps "$steps" --warmup 1 > /dev/null ;;
    onednn|winograd) env DUET_CONV="$side" DUET_NUM_THREADS=1 /usr/bin/time -o "$f" -f "%U %S" \
              "$BUILD/bench_train" --worker --models "$MODEL" --steps "$steps" --warmup 1 > /dev/null ;;
    torch) OMP_NUM_THREADS=1 /usr/bin/time -o "$f" -f "%U %S" "$TORCH" bench/train_torch.py \
             --model "$MODEL" --nproc 1 --threads 1 --steps "$steps" --warmup 1 > /dev/null 2>&1 ;;
  esac
  awk '{print $1 + $2}' "$f"
  rm -f "$f"
}

echo "CPU s per $MODEL step, 1 process x 1 thread, (CPU($S2) - CPU($S1)) / $((S2 - S1)); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "duet: $(DUET_NUM_THREADS=1 "$BUILD/duet" info | sed -n 's/^  kernels: *//p')"
for c in onednn winograd; do
  echo "duet DUET_CONV=$c: $(DUET_CONV=$c DUET_NUM_THREADS=1 "$BUILD/duet" info | sed -n 's/^  kernels: *//p')"
done
printf "%-4s %10s %10s %10s %10s %14s %14s %14s\n" rep im2col onednn winograd torch \
  "torch/im2col" "torch/onednn" "torch/wino"
for r in $(seq 1 "$REPS"); do
  declare -A per=()
  for side in im2col onednn winograd torch; do
    a=$(cpu "$side" "$S1")
    b=$(cpu "$side" "$S2")
    per[$side]=$(awk -v a="$a" -v b="$b" -v n=$((S2 - S1)) 'BEGIN{printf "%.4f", (b - a) / n}')
  done
  awk -v r="$r" -v i="${per[im2col]}" -v o="${per[onednn]}" -v w="${per[winograd]}" \
    -v t="${per[torch]}" 'BEGIN{printf "%-4s %10.4f %10.4f %10.4f %10.4f %13.2fx %13.2fx %13.2fx\n",
      r, i, o, w, t, t / i, t / o, t / w}'
  unset per
done
echo "(ratios > 1: duet uses less CPU per step than PyTorch)"
