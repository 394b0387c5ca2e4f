#!/usr/bin/env bash
# Rank 0 stalled in the middle of a checkpoint write (issue 20, finding 2),
# 2 processes, dist.timeout = 3, a checkpoint every iteration:
#   - SIGSTOP of rank 0 while iter_N.safetensors.tmp.* exists: rank 1 (which
#     waits for rank 0's write without a timeout of its own) asks rank 0
#     whether it is alive after 3 s, gets no answer for another 3 s, and ends
#     the job with exit 76 and a message of its own naming rank 0 (before:
#     the job hung forever, and the "still waiting" warnings were dropped
#     because only rank 0 printed warnings);
#   - rank 0 paused for 4 s in the write, then continued (a file system that
#     stalls for longer than the timeout but comes back): the job goes on and
#     finishes.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_stall_rank0

e2e_pngs "$T/data/train" 4

# A 16-block MSRResNet: an 18 MB checkpoint (weights + Adam's moments), so
# that a write lasts long enough to be caught in the act.
e2e_tiny_cfg "$T/tiny.cfg" "$T/data/train" 64 16 "total_iters = 15;
checkpoint_config = { interval = 1; };
log_config = { interval = 100; };
dist = { timeout = 3.0; };"

# Starts the job, SIGSTOPs rank 0 as soon as a checkpoint temporary exists,
# SIGCONTs it after $pause s (never when 0), reports how the job ended.
stall() {  # work dir, pause
  "$PY" - "$DUET" "$T/tiny.cfg" "$1" "$2" <<'PY_STALL'
import os, signal, subprocess, sys, time
duet, cfg, wd, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
cmd = ["mpiexec", "-n", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
job = subprocess.Popen(cmd + [duet, "train", cfg, "--work-dir", wd],
                       stdout=open(wd + ".out", "w"), stderr=subprocess.STDOUT)
def rank0():
    try:
        kids = open("/proc/%d/task/%d/children" % (job.pid, job.pid)).read().split()
    except OSError:
        return None
    for c in kids:
        try:
            if b"OMPI_COMM_WORLD_RANK=0" in open("/proc/%s/environ" % c, "rb").read().split(b"\0"):
                return int(c)
        except OSError:
            pass
    return None
p0, caught, t_end = None, None, time.time() + 240
while time.time() < t_end and job.poll() is None:
    p0 = p0 or rank0()
    if p0 and os.path.isdir(wd):
        tmp = [n for n in os.listdir(wd) if ".safetensors.tmp." in n or ".safetensors.duet-" in n]
        if tmp:
            os.kill(p0, signal.SIGSTOP)
            caught = tmp[0]
            break
if caught is None:
    job.kill()
    print("no-write-caught")
    sys.exit(0)
t0 = time.time()
if pause > 0:
    time.sleep(pause)
    os.kill(p0, signal.SIGCONT)
try:
    rc = job.wait(timeout=120)
except subprocess.TimeoutExpired:
    os.kill(p0, signal.SIGCONT)
    job.kill()
    print("hang %s" % caught)
    sys.exit(0)
print("ended %d %.1f %s" % (rc, time.time() - t0, caught))
PY_STALL
}

# ---- stopped for good: the job ends, from rank 1, within two timeouts ----
read -r what rc secs tmp <<< "$(stall "$T/w1" 0)"
[ "$what" = ended ] || { cat "$T/w1.out"; fail "SIGSTOP of rank 0 during a checkpoint write: $what $rc"; }
[ "$rc" -eq 76 ] || { cat "$T/w1.out"; fail "exit $rc, want 76 (watchdog)"; }
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "the job took $secs s to end (timeout 3 s)"
grep -q "rank 1: checkpoint of iteration [0-9]*: watchdog: bcast .* rank 0 gave no sign of life" \
  "$T/w1.out" || { cat "$T/w1.out"; fail "rank 1 did not name rank 0"; }
grep -q "\[rank 1\] still waiting in bcast" "$T/w1.out" || { cat "$T/w1.out"; fail "rank 1's warning was dropped"; }
echo "test_stall_rank0: rank 0 stopped while writing $tmp: rank 1 ended the job after $secs s (exit 76)"

# ---- paused longer than the timeout, then back: the job goes on ----
read -r what rc secs tmp <<< "$(stall "$T/w2" 4)"
[ "$what" = ended ] || { cat "$T/w2.out"; fail "rank 0 paused 4 s: $what $rc"; }
[ "$rc" -eq 0 ] || { cat "$T/w2.out"; fail "rank 0 paused 4 s in a write (timeout 3 s): exit $rc, want 0"; }
echo "test_stall_rank0: rank 0 paused 4 s while writing $tmp (timeout 3 s): the job finished"
echo "test_stall_rank0: ok"
