#!/usr/bin/env bash
# Side by side: duet (bench_networks) and PyTorch (bench/networks_torch.py)
# on MMEditing's SRGAN networks, one thread each, in the same invocation.
#
#   bench/compare_networks.sh [-b BUILD_DIR] [-c tiny|full|all] [-r ROUNDS]
#                             [-n REPS] [-B BATCH] [-o CASE] [-p BASE_BUILD_DIR]
#
# -p also runs BASE_BUILD_DIR/bench_networks (an older duet) in every round
# and adds its time and ratio to torch: a before/after table from one run.
#
# Each round runs duet then torch on one config (each program takes the
# median over its repetitions); the table gives, per case, the median over
# the rounds of the two times and of the per-round ratio duet / torch
# (< 1: duet is faster). Alternating the two inside one invocation keeps the
# ratio honest on a shared, noisy machine. Times are the calling thread's CPU
# time (cpu) and the wall clock (wall). OPENBLAS_CORETYPE is left as found
# and printed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build-perf"
which_cfg=all
rounds=3
reps=0
batch=0
only=""
base=""
python=${DUET_PYTHON:-/usr/bin/python3}
while getopts "b:c:r:n:B:o:p:h" opt; do
    case $opt in
    b) build=$OPTARG ;;
    c) which_cfg=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) reps=$OPTARG ;;
    B) batch=$OPTARG ;;
    o) only=$OPTARG ;;
    p) base=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
    esac
done
exe="$build/bench_networks"
if [[ ! -x $exe ]]; then
    echo "compare_networks: $exe not found; build it with cmake --build $build --target bench_networks" >&2
    exit 1
fi
case $which_cfg in
all) cfgs="tiny full" ;;
tiny | full) cfgs=$which_cfg ;;
*) echo "compare_networks: -c takes tiny, full or all" >&2; exit 2 ;;
esac

args=()
[[ $reps != 0 ]] && args+=(--reps "$reps")
[[ $batch != 0 ]] && args+=(--batch "$batch")
[[ -n $only ]] && args+=(--only "$only")

echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} DUET_BLAS_THREADS=${DUET_BLAS_THREADS:-(unset: 1)}" \
    "torch threads=1 host=$(hostname) cpus=$(nproc) $(date -u +%FT%TZ)"
"$python" -c 'import torch; print("torch", torch.__version__, "mkldnn", torch.backends.mkldnn.is_available(), "cpu capability", torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?")'
echo "git $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?')"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for cfg in $cfgs; do
    for ((r = 0; r < rounds; r++)); do
        if [[ -n $base ]]; then
            "$base/bench_networks" --config "$cfg" "${args[@]}" |
                sed "s/^{/{\"round\": $r, /; s/\"framework\": \"duet\"/\"framework\": \"base\"/" >>"$out"
        fi
        "$exe" --config "$cfg" "${args[@]}" | sed "s/^{/{\"round\": $r, /" >>"$out"
        "$python" "$here/networks_torch.py" --config "$cfg" "${args[@]}" |
            sed "s/^{/{\"round\": $r, /" >>"$out"
    done
done

"$python" - "$out" <<'EOF'
import json, sys
from collections import defaultdict

def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = defaultdict(dict)  # (config, case, round) -> framework -> row
order = []
for r in rows:
    key = (r["config"], r["case"])
    if key not in order:
        order.append(key)
    by[key + (r["round"],)][r["framework"]] = r
has_base = any(r["framework"] == "base" for r in rows)
print(f"{'config':<6} {'case':<11} {'batch':>5} | {'duet cpu':>9} {'torch cpu':>9} {'ratio':>6} |"
      f" {'duet wall':>9} {'torch wall':>10} {'ratio':>6} |"
      + (f" {'base cpu':>9} {'ratio':>6} |" if has_base else "") + " rounds")
for cfg, case in order:
    rs = [v for k, v in by.items() if k[:2] == (cfg, case) and "duet" in v and "torch" in v]
    if not rs:
        continue
    dc = median([v["duet"]["cpu_ms"] for v in rs])
    tc = median([v["torch"]["cpu_ms"] for v in rs])
    dw = median([v["duet"]["wall_ms"] for v in rs])
    tw = median([v["torch"]["wall_ms"] for v in rs])
    rc = median([v["duet"]["cpu_ms"] / v["torch"]["cpu_ms"] for v in rs])
    rw = median([v["duet"]["wall_ms"] / v["torch"]["wall_ms"] for v in rs])
    extra = ""
    if has_base:
        bs = [v for v in rs if "base" in v]
        bc = median([v["base"]["cpu_ms"] for v in bs])
        rb = median([v["base"]["cpu_ms"] / v["torch"]["cpu_ms"] for v in bs])
        extra = f" {bc:>9.1f} {rb:>6.2f} |"
    print(f"{cfg:<6} {case:<11} {rs[0]['duet']['batch']:>5} | {dc:>9.1f} {tc:>9.1f} {rc:>6.2f} |"
          f" {dw:>9.1f} {tw:>10.1f} {rw:>6.2f} |{extra} {len(rs)}")
print("times in ms (medians); ratio = duet / torch, median of the per-round ratios; < 1: duet faster"
      + ("; base = the -p build, its ratio to the same round's torch" if has_base else ""))
EOF
