#!/usr/bin/env bash
# Every writer is safe against links and against its own inputs (issue 35,
# classes 1 and 2). For each: a symlink planted at the temporary name the
# writer used before (a fixed name next to the output) or at the output
# itself leaves the link's target as it was and the output a regular file;
# an output that is one of the command's inputs is refused naming both,
# the input intact; no temporary is left behind.
#   convert-config.py (X.cfg.tmp; foo.cfg without -o = its input),
#   convert-pth.py (E.safetensors.tmp; -o = the input), export-pth.py
#   (E.pth.tmp; -o = the checkpoint), duet prepare div2k
#   (meta_info_DIV2K800sub_GT.txt.duet-tmp; a _sub folder that is a link to
#   the HR folder), duet export (OUT.duet-tmp, which used to block every
#   later export; OUT = the checkpoint), duet plot (--out a link; --out
#   log.jsonl or latest.safetensors), duet infer (an output that is the
#   checkpoint through a hard link), checkpoints (iter_N a link; load_from =
#   the iter_N the run writes).
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_safe_writers
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S=${SCRIPTS_DIR:-$ROOT/scripts} # SCRIPTS_DIR: to replay against other versions
# KEEP_GOING=1 reports every failing case (to check each against old code).
nfail=0
fail() {
  echo "test_safe_writers: FAIL: $*" >&2
  nfail=$((nfail + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}
echo precious > "$T/precious.txt"
intact() { [ "$(cat "$T/precious.txt")" = precious ] || { fail "$1: the link's target was written"; echo precious > "$T/precious.txt"; }; }
regular() { [ -f "$1" ] && [ ! -L "$1" ] || fail "$2: $1 is not a regular file"; }
no_temps() { ! ls -A "$1" | grep -q '\.duet-[0-9a-f]\{16\}$' || fail "$2: a temporary was left in $1: $(ls -A "$1")"; }
e2e_pngs "$T/data" 2 16
e2e_tiny_cfg "$T/tiny.cfg" "$T/data" 4 1 'total_iters = 1; log_config = { interval = 1; };'
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w" > "$T/train.out" 2>&1 || { cat "$T/train.out"; fail "train"; exit 1; }
CK="$T/w/latest.safetensors"
set +e

# convert-config.py
mkdir "$T/cc"
cat > "$T/cc/x.py" <<'PY'
model = dict(type='BasicRestorer', generator=dict(type='MSRResNet', mid_channels=4))
total_iters = 3
PY
ln -s "$T/precious.txt" "$T/cc/x.cfg.tmp"
"$PY" "$S/convert-config.py" "$T/cc/x.py" -o "$T/cc/x.cfg" > "$T/cc.out" 2>&1 || fail "convert-config: $(cat "$T/cc.out")"
intact convert-config; regular "$T/cc/x.cfg" convert-config
grep -q "total_iters = 3;" "$T/cc/x.cfg" || fail "convert-config: output $(cat "$T/cc/x.cfg")"
cp "$T/cc/x.py" "$T/cc/foo.cfg"; before=$(sha256sum < "$T/cc/foo.cfg")
"$PY" "$S/convert-config.py" "$T/cc/foo.cfg" > "$T/cc2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "the output $T/cc/foo.cfg is the input $T/cc/foo.cfg" "$T/cc2.out" \
  || fail "convert-config foo.cfg without -o: rc $rc, $(cat "$T/cc2.out")"
[ "$(sha256sum < "$T/cc/foo.cfg")" = "$before" ] || fail "convert-config replaced its input"
! grep -q Traceback "$T/cc2.out" || fail "convert-config: a traceback"
no_temps "$T/cc" convert-config

# export-pth.py and convert-pth.py
mkdir "$T/px"
cp "$CK" "$T/px/E.safetensors"
ln -s "$T/precious.txt" "$T/px/E.pth.tmp"
"$PY" "$S/export-pth.py" "$T/px/E.safetensors" > "$T/ep.out" 2>&1 || fail "export-pth: $(cat "$T/ep.out")"
intact export-pth; regular "$T/px/E.pth" export-pth
before=$(sha256sum < "$T/px/E.safetensors")
"$PY" "$S/export-pth.py" "$T/px/E.safetensors" -o "$T/px/E.safetensors" > "$T/ep2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "is the input $T/px/E.safetensors" "$T/ep2.out" \
  || fail "export-pth -o its input: rc $rc, $(cat "$T/ep2.out")"
[ "$(sha256sum < "$T/px/E.safetensors")" = "$before" ] || fail "export-pth replaced its input"
rm "$T/px/E.safetensors"
ln -s "$T/precious.txt" "$T/px/E.safetensors.tmp"
"$PY" "$S/convert-pth.py" "$T/px/E.pth" > "$T/cp.out" 2>&1 || fail "convert-pth: $(cat "$T/cp.out")"
intact convert-pth; regular "$T/px/E.safetensors" convert-pth
before=$(sha256sum < "$T/px/E.pth")
"$PY" "$S/convert-pth.py" "$T/px/E.pth" -o "$T/px/E.pth" > "$T/cp2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "is the input $T/px/E.pth" "$T/cp2.out" \
  || fail "convert-pth -o its input: rc $rc, $(cat "$T/cp2.out")"
[ "$(sha256sum < "$T/px/E.pth")" = "$before" ] || fail "convert-pth replaced its input"
no_temps "$T/px" convert-pth

# duet prepare div2k
D="$T/DIV2K"
e2e_pngs "$D/DIV2K_train_HR" 2 32
mv "$D/DIV2K_train_HR/00.png" "$D/DIV2K_train_HR/0001.png"
mv "$D/DIV2K_train_HR/01.png" "$D/DIV2K_train_HR/0002.png"
mkdir -p "$D/DIV2K_train_LR_bicubic" && cp -r "$D/DIV2K_train_HR" "$D/DIV2K_train_LR_bicubic/X1"
ln -s "$T/precious.txt" "$D/meta_info_DIV2K800sub_GT.txt.duet-tmp"
"$DUET" prepare div2k "$D" --scales 1 --crop-size 16 --step 16 > "$T/pd.out" 2>&1 || fail "prepare: $(cat "$T/pd.out")"
intact prepare; regular "$D/meta_info_DIV2K800sub_GT.txt" prepare
[ "$(wc -l < "$D/meta_info_DIV2K800sub_GT.txt")" = 8 ] || fail "prepare: $(cat "$D/meta_info_DIV2K800sub_GT.txt")"
no_temps "$D" prepare
rm -r "$D/DIV2K_train_HR_sub" "$D/DIV2K_train_LR_bicubic/X1_sub"
ln -s "$D/DIV2K_train_HR" "$D/DIV2K_train_HR_sub"
before=$(ls "$D/DIV2K_train_HR")
"$DUET" prepare div2k "$D" --scales 1 --crop-size 16 --step 16 > "$T/pd2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "exists already" "$T/pd2.out" || fail "prepare into a link to its input: rc $rc, $(cat "$T/pd2.out")"
[ "$(ls "$D/DIV2K_train_HR")" = "$before" ] || fail "prepare wrote into its input folder"
no_temps "$D" prepare

# duet export
mkdir "$T/ex"
ln -s "$T/precious.txt" "$T/ex/g.onnx.duet-tmp"
"$DUET" export "$T/tiny.cfg" "$CK" "$T/ex/g.onnx" > "$T/ex.out" 2>&1 || fail "export past a stale temporary: $(cat "$T/ex.out")"
intact export; regular "$T/ex/g.onnx" export
cp "$CK" "$T/ex/ck.safetensors"; before=$(sha256sum < "$T/ex/ck.safetensors")
"$DUET" export "$T/tiny.cfg" "$T/ex/ck.safetensors" "$T/ex/ck.safetensors" > "$T/ex2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "the output $T/ex/ck.safetensors is the input $T/ex/ck.safetensors" "$T/ex2.out" \
  || fail "export over its checkpoint: rc $rc, $(cat "$T/ex2.out")"
[ "$(sha256sum < "$T/ex/ck.safetensors")" = "$before" ] || fail "export replaced its checkpoint"
no_temps "$T/ex" export

# duet plot (an earlier plot, a PNG, at the link's target)
cp "$T/data/00.png" "$T/precious.png"; before=$(sha256sum < "$T/precious.png")
ln -s "$T/precious.png" "$T/w/link.png"
"$DUET" plot "$T/w" --out "$T/w/link.png" > "$T/pl.out" 2>&1 || fail "plot: $(cat "$T/pl.out")"
[ "$(sha256sum < "$T/precious.png")" = "$before" ] || fail "plot wrote through a link"
regular "$T/w/link.png" plot
for f in log.jsonl latest.safetensors; do
  before=$(sha256sum < "$T/w/$f")
  "$DUET" plot "$T/w" --out "$T/w/$f" > "$T/pl2.out" 2>&1; rc=$?
  [ $rc -ne 0 ] || fail "plot --out $f must fail"
  [ "$(sha256sum < "$T/w/$f")" = "$before" ] || fail "plot replaced $f"
done
grep -q "is not a PNG" "$T/pl2.out" || fail "plot --out latest.safetensors: $(cat "$T/pl2.out")"
"$DUET" plot "$T/w" --out "$T/w/log.jsonl" > "$T/pl3.out" 2>&1
grep -q "the output $T/w/log.jsonl is the input $T/w/log.jsonl" "$T/pl3.out" || fail "plot --out log.jsonl: $(cat "$T/pl3.out")"
no_temps "$T/w" plot

# duet infer: the output for a.png is the checkpoint (a hard link).
mkdir "$T/in" "$T/out"
cp "$T/data/00.png" "$T/in/a.png"
cp "$CK" "$T/ck2.safetensors"; ln "$T/ck2.safetensors" "$T/out/a.png"
before=$(sha256sum < "$T/ck2.safetensors")
"$DUET" infer "$T/tiny.cfg" "$T/ck2.safetensors" "$T/in/a.png" --out "$T/out" > "$T/in.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "is the input $T/ck2.safetensors" "$T/in.out" \
  || fail "infer over its checkpoint: rc $rc, $(cat "$T/in.out")"
[ "$(sha256sum < "$T/ck2.safetensors")" = "$before" ] || fail "infer replaced its checkpoint"

# Checkpoints: a link at iter_1 is replaced; load_from = the file written.
mkdir "$T/w2"
ln -s "$T/precious.txt" "$T/w2/iter_1.safetensors"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w2" > "$T/ck.out" 2>&1 || fail "train: $(cat "$T/ck.out")"
intact checkpoint; regular "$T/w2/iter_1.safetensors" checkpoint
no_temps "$T/w2" checkpoint
cp "$T/w2/iter_1.safetensors" "$T/pre.safetensors"; before=$(sha256sum < "$T/pre.safetensors")
mkdir "$T/w3"; ln "$T/pre.safetensors" "$T/w3/iter_1.safetensors"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/w3" --set "load_from=\"$T/pre.safetensors\"" > "$T/ck2.out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "is the input $T/pre.safetensors" "$T/ck2.out" \
  || fail "a checkpoint over load_from: rc $rc, $(cat "$T/ck2.out")"
[ "$(sha256sum < "$T/pre.safetensors")" = "$before" ] || fail "a checkpoint replaced load_from"
set -e
[ $nfail -eq 0 ] || exit 1
echo "test_safe_writers: PASS"
