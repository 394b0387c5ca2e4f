#!/usr/bin/env bash
# docs/multinode.md on two stand-in nodes (scripts/two-nodes-lib.sh: two
# network namespaces with their own hostnames, a veth pair, mpirun's rsh
# agent instead of ssh, TCP only):
#   - mpirun --hostfile puts one rank on each node;
#   - `duet train` runs across them to its end, with the guide's flags
#     (btl/oob_tcp_if_include, -x OMP_WAIT_POLICY, -x DUET_TIMEOUT) and a
#     work dir both nodes see;
#   - a node dying (its rank killed with SIGKILL) ends the job with an
#     error in bounded time, the last checkpoint intact, and the run
#     resumes from it without that node (1 process), as the guide says.
# Skips where network namespaces cannot be made (not root, no ip netns).
set -euo pipefail
source "$(dirname "$0")/common.sh"
e2e_begin test_two_nodes
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/two-nodes-lib.sh"
trap 'two_nodes_down; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
if ! two_nodes_up 2> "$T/up.err"; then
  echo "SKIPPED: no stand-in nodes here: $(cat "$T/up.err")"
  exit 77
fi
export TN_TIMEOUT=300

# One rank on each node.
hosts=$(two_nodes_mpirun -n 2 hostname 2> "$T/hostname.err" | sort | tr '\n' ' ') ||
  fail "mpirun hostname: $(cat "$T/hostname.err")"
[ "$hosts" = "nodeA nodeB " ] || fail "ranks ran on '$hosts', want nodeA and nodeB"

e2e_pngs "$T/gt" 4 32
e2e_tiny_cfg "$T/tiny.cfg" "$T/gt" 8 1 \
  'total_iters = 8; checkpoint_config = { interval = 4; by_epoch = false; }; log_config = { interval = 1; };'
run() { # WORKDIR CONFIG [duet train args...] (the guide's flags)
  local w=$1 cfg=$2
  shift 2
  two_nodes_mpirun -n 2 -x OMP_WAIT_POLICY=passive -x DUET_TIMEOUT=30 -x DUET_LOG=info \
    -x DUET_PROGRESS=0 "$DUET" train "$cfg" --work-dir "$w" "$@"
}

# A run to its end across the two nodes.
run "$T/w" "$T/tiny.cfg" > "$T/w.out" 2>&1 || fail "training across two nodes: $(tail -5 "$T/w.out")"
[ -f "$T/w/iter_8.safetensors" ] || fail "no iter_8 checkpoint: $(tail -5 "$T/w.out")"
grep -q "on 2 processes" "$T/w.out" || fail "not 2 processes: $(grep INFO "$T/w.out" | head -3)"
echo "test_two_nodes: trained 8 iterations on nodeA + nodeB"

# nodeB dies after the checkpoint of iteration 4.
sed 's/^total_iters = 8;/total_iters = 1000000;/' "$T/tiny.cfg" > "$T/long.cfg"
grep -q "total_iters = 1000000" "$T/long.cfg" || fail "long config not written"
run "$T/d" "$T/long.cfg" > "$T/d.out" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ -f "$T/d/iter_4.safetensors" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
[ -f "$T/d/iter_4.safetensors" ] || { wait "$job" || true; fail "no checkpoint before the kill: $(tail -5 "$T/d.out")"; }
victim=""
for pid in $(ip netns pids "$TN_NSB"); do
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = duet ] && victim=$pid
done
[ -n "$victim" ] || fail "no duet process in $TN_NSB"
kill -KILL "$victim"
set +e
wait "$job"
rc=$?
set -e
# timeout(1) in two_nodes_mpirun exits 124 when the job outlived TN_TIMEOUT: a hang.
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the job with a dead node ended with $rc: $(tail -5 "$T/d.out")"
echo "test_two_nodes: nodeB's rank killed, the job ended with $rc"

# Without the dead node: the newest checkpoint resumes on one process.
last=$(ls "$T/d" | sed -n 's/^iter_\([0-9]*\)\.safetensors$/\1/p' | sort -n | tail -1)
[ -n "$last" ] || fail "no checkpoint left after the node died"
DUET_LOG=info "$DUET" train "$T/long.cfg" --work-dir "$T/d" \
  --resume="$T/d/iter_$last.safetensors" --set total_iters=$((last + 2)) > "$T/r.out" 2>&1 ||
  fail "resume on one process: $(tail -5 "$T/r.out")"
[ -f "$T/d/iter_$((last + 2)).safetensors" ] || fail "the resumed run wrote no iter_$((last + 2))"
grep -q "was written by 2 processes" "$T/r.out" || fail "no note of the world size: $(grep -i warn "$T/r.out")"
echo "test_two_nodes: resumed from iteration $last on one process"
echo "test_two_nodes: ok"
