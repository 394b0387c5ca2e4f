#!/usr/bin/env bash
# Two simulated nodes on one machine: how much of the SRGAN training step is
# communication that the backward does not hide, when the two ranks talk
# over a shaped network link instead of shared memory.
#
#   sudo bash bench/two_nodes.sh [BUILD]        # BUILD defaults to build
#
# Environment (all optional):
#   RATES="1gbit 10gbit"   link rates to measure (tc tbf on both ends)
#   MODELS="tiny full"     bench_train's SRGAN sizes
#   PRECISION=fp32|bf16    duet's mixed precision for the step (default fp32)
#   RUNS=3                 runs per row; each row prints the median
#   STEPS, WARMUP          bench_train --steps / --warmup (default 5/2 tiny,
#                          2/1 full)
#   THREADS=1              threads per rank (each "node" has one rank)
#
# How: two network namespaces (duet-nodeA, duet-nodeB) joined by a veth pair,
# 10.231.0.1 and .2, shaped to RATE with tc's token bucket on both ends. Each
# namespace also gets its own UTS namespace (hostname nodeA / nodeB) so that
# Open MPI sees two hosts and never pairs the ranks over shared memory.
# mpirun runs in nodeA with a hostfile of one slot per node; its rsh agent is
# a script that enters nodeB's namespaces instead of ssh. TCP only
# (--mca btl self,tcp), over the veth alone (btl/oob_tcp_if_include). The
# baseline is the same two ranks in the root namespace over shared memory
# (vader). Rows:
#   exposed = (step over the link - step over shared memory) / step over the link
# and the DDPs' own counters from the run over the link: MB handed to
# allreduce per step, allreduces per step, seconds waited after the backward
# (DDP finalize) per step. The namespaces, the veth pair and the files under
# /etc/netns are removed on exit, also on failure or Ctrl-C.
#
# Traffic stays between the two namespaces this script makes: nothing leaves
# the machine. Needs root (ip netns, tc, unshare).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
bench="$(realpath "$build/bench_train")"
[ -x "$bench" ] || { echo "two_nodes: $bench not built (cmake --build $build)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "two_nodes: python3 not found" >&2; exit 1; }
. scripts/two-nodes-lib.sh

RATES="${RATES:-1gbit 10gbit}"
MODELS="${MODELS:-tiny full}"
PRECISION="${PRECISION:-fp32}"
RUNS="${RUNS:-3}"
THREADS="${THREADS:-1}"
case "$PRECISION" in fp32) bf16="" ;; bf16) bf16="--bf16" ;;
    *) echo "two_nodes: PRECISION is fp32 or bf16, not '$PRECISION'" >&2; exit 2 ;; esac

trap two_nodes_down EXIT
trap 'exit 130' INT TERM
two_nodes_up || { trap - EXIT; exit 1; }

worker_args() { # MODEL
    local steps warm
    if [ "$1" = full ]; then steps="${STEPS:-2}"; warm="${WARMUP:-1}"
    else steps="${STEPS:-5}"; warm="${WARMUP:-2}"; fi
    echo "--worker --models $1 --steps $steps --warmup $warm $bf16"
}

run_shm() { # MODEL -> one JSON line
    DUET_NUM_THREADS="$THREADS" timeout -k 10 1800 mpirun --allow-run-as-root -n 2 \
        --bind-to none -x DUET_NUM_THREADS "$bench" $(worker_args "$1") | grep '^{' | tail -1
}

run_link() { # MODEL -> one JSON line
    DUET_NUM_THREADS="$THREADS" two_nodes_mpirun -n 2 -x DUET_NUM_THREADS \
        "$bench" $(worker_args "$1") | grep '^{' | tail -1
}

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

echo "two_nodes: SRGAN step, 2 ranks x $THREADS thread(s), $PRECISION, medians of $RUNS runs"
echo "two_nodes: $(git describe --always --dirty 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-7s | %10s %10s %8s | %9s %6s %9s\n' model link "shm s" "link s" exposed \
    "MB/step" "ar/st" "wait s"
for model in $MODELS; do
    shm=()
    for r in $(seq "$RUNS"); do
        j="$(run_shm "$model")"
        [ -n "$j" ] || { echo "two_nodes: the shared-memory run of $model failed" >&2; exit 1; }
        shm+=("$(field "$j" step_s)")
    done
    t_shm="$(median "${shm[@]}")"
    for rate in $RATES; do
        two_nodes_shape "$rate"
        link=() mb=() ar=() wait=()
        for r in $(seq "$RUNS"); do
            j="$(run_link "$model")"
            [ -n "$j" ] || { echo "two_nodes: the run of $model over $rate failed" >&2; exit 1; }
            link+=("$(field "$j" step_s)")
            mb+=("$(field "$j" allreduce_mb_per_step)")
            ar+=("$(field "$j" allreduces_per_step)")
            wait+=("$(field "$j" exposed_comm_s)")
        done
        t_link="$(median "${link[@]}")"
        python3 - "$model" "$rate" "$t_shm" "$t_link" "$(median "${mb[@]}")" \
            "$(median "${ar[@]}")" "$(median "${wait[@]}")" <<'EOF'
import sys
m, rate, shm, link, mb, ar, wait = sys.argv[1:]
shm, link = float(shm), float(link)
print(f"{m:<5} {rate:<7} | {shm:10.4f} {link:10.4f} {100 * (link - shm) / link:7.1f}% | "
      f"{float(mb):9.2f} {float(ar):6.1f} {float(wait):9.4f}")
EOF
    done
done
