#!/usr/bin/env bash
# Inputs that reach duet through the work dir, and timeouts that are not
# timeouts (issue 20, findings 3, 4 and 6), one process each:
#   - a symlink left at WORK_DIR/config.cfg: the link is replaced by duet's
#     own file, its target is never written;
#   - a symlink at WORK_DIR/log.jsonl: refused, naming the file, the target
#     untouched;
#   - `duet train W/config.cfg --work-dir W`: the user's config keeps its
#     bytes (comments included), the config as run goes to config.run.cfg;
#   - a work dir that is, lies inside or contains a data folder: refused
#     before anything is written, naming both and the key's line;
#   - DUET_TIMEOUT=abc, DUET_TIMEOUT=0.01, dist.timeout = 1e-300: refused
#     naming the variable or the key;
#   - on a terminal, without a launcher, the progress bar is drawn.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_workdir_edges

e2e_pngs "$T/data/train" 2

e2e_tiny_cfg "$T/tiny.cfg" "$T/data/train" 4 1 "total_iters = 1;
checkpoint_config = { interval = 1; };
log_config = { interval = 1000; };"

# ---- a link at config.cfg ----
echo "victim" > "$T/victim.txt"
mkdir "$T/w1"
ln -s "$T/victim.txt" "$T/w1/config.cfg"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w1" > "$T/w1.out" 2>&1 || fail "w1: $(cat "$T/w1.out")"
[ "$(cat "$T/victim.txt")" = "victim" ] || fail "the config dump wrote through the link"
[ -f "$T/w1/config.cfg" ] && [ ! -L "$T/w1/config.cfg" ] || fail "config.cfg is not duet's own file"
grep -q "total_iters" "$T/w1/config.cfg" || fail "config.cfg lacks the config"

# ---- a link at log.jsonl ----
mkdir "$T/w2"
ln -s "$T/victim.txt" "$T/w2/log.jsonl"
if "$DUET" train "$T/tiny.cfg" --work-dir "$T/w2" > "$T/w2.out" 2>&1; then
  fail "a log.jsonl link was accepted"
fi
grep -q "log.jsonl.*symbolic link" "$T/w2.out" || fail "w2 message: $(cat "$T/w2.out")"
[ "$(cat "$T/victim.txt")" = "victim" ] || fail "the log was appended through the link"

# ---- the run's own config inside its work dir ----
mkdir "$T/w3"
cp "$T/tiny.cfg" "$T/w3/config.cfg"
"$DUET" train "$T/w3/config.cfg" --work-dir "$T/w3" --set total_iters=2 > "$T/w3.out" 2>&1 \
  || fail "w3: $(cat "$T/w3.out")"
cmp -s "$T/tiny.cfg" "$T/w3/config.cfg" || fail "the user's config.cfg was rewritten"
grep -q "total_iters = 2" "$T/w3/config.run.cfg" || fail "config.run.cfg lacks the override"

# ---- work dirs and data folders ----
refuse() {  # name, work dir, then strings the message must hold
  local name=$1 wd=$2; shift 2
  if "$DUET" train "$T/tiny.cfg" --work-dir "$wd" > "$T/$name.out" 2>&1; then
    fail "$name: accepted work dir $wd"
  fi
  for s in "$@"; do
    grep -qF -- "$s" "$T/$name.out" || fail "$name: message lacks '$s': $(cat "$T/$name.out")"
  done
}
refuse same "$T/data/train" "tiny.cfg:10" "is the data folder" "data.train.gt_folder"
refuse inside "$T/data/train/runs/x" "lies inside the data folder"
refuse contains "$T/data" "contains the data folder"
ln -s "$T/data/train" "$T/link_to_data"
refuse via_link "$T/link_to_data/w" "lies inside the data folder"
[ ! -e "$T/data/train/runs" ] && [ ! -e "$T/link_to_data/w" ] || fail "a refused work dir was made"
[ "$(ls "$T/data/train" | wc -l)" -eq 2 ] || fail "something was written into the data folder"

# ---- timeouts ----
bad_timeout() {  # name, env or "", --set or "", message
  local name=$1 env=$2 set=$3 msg=$4
  local args=(train "$T/tiny.cfg" --work-dir "$T/w_$name")
  [ -n "$set" ] && args+=(--set "$set")
  if env ${env:+"$env"} "$DUET" "${args[@]}" > "$T/$name.out" 2>&1; then
    fail "$name: accepted"
  fi
  grep -qF -- "$msg" "$T/$name.out" || fail "$name: message lacks '$msg': $(cat "$T/$name.out")"
}
bad_timeout env_abc DUET_TIMEOUT=abc "" "DUET_TIMEOUT='abc' in the environment: it must be a number of seconds in [1, 1e+09]"
bad_timeout env_small DUET_TIMEOUT=0.01 "" "DUET_TIMEOUT='0.01'"
bad_timeout cfg_tiny "" "dist.timeout=1e-300" "dist.timeout = 1e-300: it must be a number of seconds in [1, 1e+09]"
DUET_TIMEOUT=5 "$DUET" train "$T/tiny.cfg" --work-dir "$T/w_env_ok" > "$T/env_ok.out" 2>&1 \
  || fail "DUET_TIMEOUT=5: $(cat "$T/env_ok.out")"
# ---- the progress bar: drawn on a terminal without a launcher ----
# (Open MPI sets PMIX_RANK in such a singleton too; taking it for "under
# mpirun" hid the bar.) `script` gives the run a terminal.
if command -v script > /dev/null; then
  script -qc "env -u DUET_PROGRESS DUET_LOG=warn '$DUET' train '$T/tiny.cfg' --work-dir '$T/w_bar' \
    --set total_iters=20" /dev/null > "$T/bar.out" 2>&1 || { cat "$T/bar.out"; fail "run on a terminal"; }
  grep -aq "/20, eta" "$T/bar.out" || { cat "$T/bar.out"; fail "no progress bar on a terminal"; }
else
  echo "test_workdir_edges: the progress bar check skipped: no 'script' command"
fi
echo "test_workdir_edges: ok"
