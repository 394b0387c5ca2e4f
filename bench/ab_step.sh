#!/usr/bin/env bash
# CPU seconds per tiny SRGAN step of two builds, alternated: one process on
# one thread, (CPU(S2 steps) - CPU(S1 steps)) / (S2 - S1) as
# bench/cpu_per_step.sh measures it (start-up drops out; CPU time moves far
# less than wall time on a shared machine), REPS times each build in turn,
# then the medians and their ratio. For "did this change slow the CPU step":
#
#   bash bench/ab_step.sh BASE_BUILD NEW_BUILD [REPS]     (REPS default 5)
#   S1, S2: the two step counts (default 4 and 24)
set -euo pipefail
A=${1:?base build dir} B=${2:?new build dir} REPS=${3:-5} S1=${S1:-4} S2=${S2:-24}
for d in "$A" "$B"; do
  [ -x "$d/bench_train" ] || { echo "ab_step: no $d/bench_train" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "ab_step: needs /usr/bin/time" >&2; exit 1; }
cpu() {
  local f
  f=$(mktemp)
  env -u DUET_CONV DUET_NUM_THREADS=1 /usr/bin/time -o "$f" -f "%U %S" "$1/bench_train" \
    --worker --models tiny --steps "$2" --warmup 1 > /dev/null
  awk '{print $1 + $2}' "$f"
  rm -f "$f"
}
per_step() {
  local a b
  a=$(cpu "$1" "$S1")
  b=$(cpu "$1" "$S2")
  awk -v a="$a" -v b="$b" -v n=$((S2 - S1)) 'BEGIN{printf "%.4f", (b - a) / n}'
}
median() { printf "%s\n" "$@" | sort -g | awk '{v[NR] = $1} END{print v[int((NR + 1) / 2)]}'; }
echo "CPU s per tiny step, 1 process x 1 thread; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
ra=() rb=()
for r in $(seq 1 "$REPS"); do
  x=$(per_step "$A")
  y=$(per_step "$B")
  ra+=("$x") rb+=("$y")
  echo "rep $r: base $x  new $y  new/base $(awk -v x="$x" -v y="$y" 'BEGIN{printf "%.3f", y / x}')"
done
ma=$(median "${ra[@]}") mb=$(median "${rb[@]}")
echo "median: base $ma  new $mb  new/base $(awk -v x="$ma" -v y="$mb" 'BEGIN{printf "%.3f", y / x}')"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
