#!/usr/bin/env bash
# duet train --dry-run (issue 23): a converted or edited config is checked
# before a run and nothing is written.
#   - a good config passes, prints the model, both data sets with their first
#     sample's shapes and the work dir, and creates no work dir;
#   - in an existing work dir (a finished run) --dry-run --resume loads the
#     checkpoint and changes no file there (no lock file either);
#   - a typo'd key, a missing data folder, a crop larger than the images, a
#     missing resume checkpoint: each fails with its own message, and still
#     nothing is written;
#   - under mpiexec -n 2 it passes the same way.
# Needs DUET_EXE (set by CTest), mpiexec and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_dry_run

e2e_pngs "$T/data/train" 3 24
e2e_pngs "$T/data/val" 2 24
e2e_tiny_cfg "$T/tiny.cfg" "$T/data/train" 4 1 "total_iters = 2;
data.val = { type = \"SRFolderGTDataset\"; gt_folder = \"$T/data/val\"; scale = 4; };
evaluation = { interval = 2; };
checkpoint_config = { interval = 2; };
log_config = { interval = 1000; };"
# libconfig has no dotted keys at top level: put val inside data.
"$PY" - "$T/tiny.cfg" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
val = [l for l in s.splitlines() if l.startswith("data.val")][0]
s = s.replace(val + "\n", "")
s = s.replace("data = {\n", "data = {\n  " + val[len("data."):] + "\n", 1)
open(p, "w").write(s)
PY

listing() { (cd "$1" && find . -printf '%p %s %T@\n' | sort); }

# ---- a good config, no work dir yet ----
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" --dry-run > "$T/ok.out" 2>&1 || fail "dry run: $(cat "$T/ok.out")"
grep -q "is ready to train; nothing was written" "$T/ok.out" || fail "no summary: $(cat "$T/ok.out")"
grep -q "data.train: 3 samples; sample 0 (00.png) loads: lq 3x2x2, gt 3x8x8" "$T/ok.out" || fail "train set line: $(cat "$T/ok.out")"
grep -q "data.val: 2 samples; sample 0 (00.png) loads: lq 3x6x6, gt 3x24x24" "$T/ok.out" || fail "val set line: $(cat "$T/ok.out")"
grep -q "generator: .* parameters" "$T/ok.out" || fail "no model line"
grep -q "work dir: $T/w (would be created)" "$T/ok.out" || fail "work dir line: $(cat "$T/ok.out")"
[ ! -e "$T/w" ] || fail "--dry-run made the work dir"

# ---- an existing run: --resume is checked, nothing changes ----
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" > "$T/run.out" 2>&1 || fail "run: $(cat "$T/run.out")"
before=$(listing "$T/w")
sleep 1
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" --dry-run --resume > "$T/res.out" 2>&1 || fail "dry resume: $(cat "$T/res.out")"
grep -q "resume: .*latest.safetensors loads (iteration 2)" "$T/res.out" || fail "resume line: $(cat "$T/res.out")"
grep -q "exists, 1 checkpoint; the run would continue there" "$T/res.out" || fail "work dir line: $(cat "$T/res.out")"
[ "$before" = "$(listing "$T/w")" ] || fail "--dry-run changed the work dir: $(diff <(echo "$before") <(listing "$T/w"))"

# ---- errors: each its own message, nothing written ----
expect_fail() { # NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  if "$DUET" train "$T/tiny.cfg" --work-dir "$T/e" --dry-run "$@" > "$T/$name.out" 2>&1; then
    fail "$name: passed"
  fi
  grep -q -- "$pat" "$T/$name.out" || fail "$name: expected '$pat' in: $(cat "$T/$name.out")"
  [ ! -e "$T/e" ] || fail "$name: the work dir was made"
}
expect_fail typo "unknown key 'optimizers.generator.betaz'" --set optimizers.generator.betaz=1
expect_fail folder "cannot open image folder $T/nope" --set "data.train.gt_folder=\"$T/nope\""
expect_fail crop "smaller than the 64 pixel crop" --set data.train.gt_patch_size=64
expect_fail resume "cannot open" --resume="$T/missing.safetensors"

# ---- two processes ----
mpiexec --allow-run-as-root -n 2 "$DUET" train "$T/tiny.cfg" --work-dir "$T/w2" --dry-run > "$T/np2.out" 2>&1 \
  || fail "np2: $(cat "$T/np2.out")"
grep -q "1 images per process (2 per iteration on 2 processes)" "$T/np2.out" || fail "np2 summary: $(cat "$T/np2.out")"
[ "$(grep -c "is ready to train" "$T/np2.out")" = 1 ] || fail "np2: the summary is not printed once"
[ ! -e "$T/w2" ] || fail "np2: the work dir was made"
# ---- every problem at once (issue 33) ----
# Two typos (total_iter for total_iters, a misspelt generator key) and an
# absent validation folder: one dry run names all three (and the missing
# total_iters), exits non-zero, writes nothing.
sed -e 's/^total_iters = 2;/total_iter = 2;/' -e 's/num_blocks = 1;/num_block = 1;/' \
    -e "s|gt_folder = \"$T/data/val\"|gt_folder = \"$T/data/nowhere\"|" "$T/tiny.cfg" > "$T/three.cfg"
grep -q "^total_iter = 2;" "$T/three.cfg" && grep -q "num_block = 1;" "$T/three.cfg" \
  && grep -q "data/nowhere" "$T/three.cfg" || fail "three.cfg: $(cat "$T/three.cfg")"
if "$DUET" train "$T/three.cfg" --work-dir "$T/w3" --dry-run > "$T/three.out" 2>&1; then
  fail "a config with three problems passed: $(cat "$T/three.out")"
fi
for want in "unknown key 'total_iter'" "missing key 'total_iters'" "unknown key 'model.generator.num_block' (did you mean 'num_blocks'?)" \
    "$T/data/nowhere" "problems:" "names them all; nothing was written"; do
  grep -qF "$want" "$T/three.out" || fail "dry run of three problems: no \"$want\" in: $(cat "$T/three.out")"
done
[ ! -e "$T/w3" ] || fail "the dry run with problems made the work dir"
echo "test_dry_run: two typos and an absent folder named in one run"
# An image that does not decode (sample 0 of the training set) and a typo:
# both named in one run.
mkdir -p "$T/data/bad"
cp "$T/data/train/"*.png "$T/data/bad/"
printf 'not a png' > "$T/data/bad/00.png"
sed -e "s|gt_folder = \"$T/data/train\"|gt_folder = \"$T/data/bad\"|" -e 's/num_blocks = 1;/num_block = 1;/' \
    "$T/tiny.cfg" > "$T/bad.cfg"
if "$DUET" train "$T/bad.cfg" --work-dir "$T/w4" --dry-run > "$T/bad.out" 2>&1; then
  fail "a config with an undecodable image passed"
fi
for want in "2 problems:" "unknown key 'model.generator.num_block'" "bad/00.png: neither PNG nor JPEG"; do
  grep -qF "$want" "$T/bad.out" || fail "undecodable image and a typo: no \"$want\" in: $(cat "$T/bad.out")"
done
# A model that cannot be built and an absent load_from file: both named
# (the file is checked even with no model to load it into).
sed -e 's/type = "MSRResNet";/type = "MSRResNett";/' "$T/tiny.cfg" > "$T/nomodel.cfg"
echo "load_from = \"$T/nowhere.safetensors\";" >> "$T/nomodel.cfg"
grep -q 'MSRResNett' "$T/nomodel.cfg" || fail "nomodel.cfg: $(cat "$T/nomodel.cfg")"
if "$DUET" train "$T/nomodel.cfg" --work-dir "$T/w5" --dry-run > "$T/nomodel.out" 2>&1; then
  fail "a config with an unknown generator and an absent load_from passed"
fi
for want in "2 problems:" "MSRResNett" "load_from: $T/nowhere.safetensors: cannot open"; do
  grep -qF "$want" "$T/nomodel.out" || fail "unknown generator and absent load_from: no \"$want\" in: $(cat "$T/nomodel.out")"
done
echo "test_dry_run: ok"
