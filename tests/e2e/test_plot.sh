#!/usr/bin/env bash
# duet plot WORK_DIR (issue 23): log.jsonl's curves as a PNG, no Python.
#   - which records: the newest fresh run and the runs that resumed it (an
#     older training in the same work dir is left out; a resume that went
#     back replaces the iterations it ran again; a torn last line is skipped);
#   - the picture: one 480x300 panel per curve, two a row; a straight-line
#     loss is drawn as a straight line rising to the right (pixels of the
#     training colour fitted by least squares), evaluations in their colour;
#   - --keys, --out, and errors (unknown key naming the keys there are, an
#     empty log, a missing work dir);
#   - a real run's log plots.
# Needs DUET_EXE (set by CTest) and python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/common.sh"
e2e_begin test_plot

mkdir -p "$T/w" "$T/lin" "$T/empty"
cat > "$T/w/log.jsonl" <<'LOG'
{"mode":"run","iter":0,"resumed_from":null}
{"mode":"train","iter":10,"lr":{"generator":0.1},"loss":1000,"time":0.1,"data_time":0.0}
{"mode":"run","iter":0,"resumed_from":null}
{"mode":"train","iter":10,"lr":{"generator":0.1},"loss":1,"time":0.1,"data_time":0.0,"memory":5}
{"mode":"train","iter":20,"lr":{"generator":0.1},"loss":2,"time":0.1,"data_time":0.0}
{"mode":"val","iter":20,"PSNR":20.5}
{"mode":"train","iter":30,"lr":{"generator":0.1},"loss":3,"time":0.1,"data_time":0.0}
{"mode":"train","iter":40,"lr":{"generator":0.1},"loss":4,"time":0.1,"data_time":0.0}
{"mode":"val","iter":40,"PSNR":21.5}
{"mode":"run","iter":20,"resumed_from":"w/iter_20.safetensors"}
{"mode":"train","iter":30,"lr":{"generator":0.1},"loss":99,"time":0.1,"data_time":0.0}
{"mode":"train","iter":50,"lr":{"generator":0.1},"loss":null,"time":0.1,"data_time":0.0}
{"mode":"train","iter":60,"lr":{"generator":0.1},"loss":6,"time":0.1,"data_time":0.0}
{"mode":"train","iter":70,"lr":{"generator":0.1},"lo
LOG
"$DUET" plot "$T/w" > "$T/w.out" 2>&1 || fail "plot: $(cat "$T/w.out")"
grep -q "loss (train): 5 points, iterations 10..60, values 1..99" "$T/w.out" || fail "train curve: $(cat "$T/w.out")"
grep -q "PSNR (val): 2 points, iterations 20..40, values 20.5..21.5" "$T/w.out" || fail "val curve: $(cat "$T/w.out")"
grep -q "not a JSON record" "$T/w.out" || fail "the torn line was not reported: $(cat "$T/w.out")"
! grep -q "lr\|time\|memory" <(grep "points" "$T/w.out") || fail "bookkeeping keys plotted: $(cat "$T/w.out")"
[ -f "$T/w/curves.png" ] || fail "no WORK_DIR/curves.png"

# A straight line: loss = iter / 10 at 0, 10, ..., 100.
"$PY" - "$T/lin/log.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(0, 101, 10):
        f.write(json.dumps({"mode": "train", "iter": i, "loss": i / 10}) + "\n")
    f.write(json.dumps({"mode": "val", "iter": 100, "PSNR": 30.0}) + "\n")
PY
"$DUET" plot "$T/lin" --out "$T/lin.png" > "$T/lin.out" 2>&1 || fail "lin: $(cat "$T/lin.out")"
"$PY" - "$T/lin.png" "$(dirname "$0")" <<'PY' || fail "the picture"
import sys
sys.path.insert(0, sys.argv[2])
from pngio import read_png
w, h, ch, rows = read_png(sys.argv[1])
assert (w, h, ch) == (960, 300, 3), (w, h, ch)
def pix(x, y): return tuple(rows[y][3 * x:3 * x + 3])
train = [(x, y) for y in range(h) for x in range(480) if pix(x, y) == (31, 119, 180)]
val = [(x, y) for y in range(h) for x in range(480, 960) if pix(x, y) == (214, 39, 40)]
# The curve: pixels below the title (y > 40) in the left panel.
pts = [(x, y) for x, y in train if y > 40]
assert len(pts) > 300, len(pts)
n = len(pts); mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
sxx = sum((x - mx) ** 2 for x, _ in pts); sxy = sum((x - mx) * (y - my) for x, y in pts)
a = sxy / sxx; b = my - a * mx
worst = max(abs(y - (a * x + b)) for x, y in pts)
assert a < -0.4 and worst <= 3.0, (a, worst)
xs = [x for x, _ in pts]
assert min(xs) < 130 and max(xs) > 450, (min(xs), max(xs))  # spans the plot area
assert len(val) > 20, len(val)  # the evaluation panel has its dot and title
print("test_plot: line fit slope %.3f, worst residual %.2f px over %d pixels" % (a, worst, n))
PY

# --keys, errors.
# Ticks tell a narrow curve's values apart (issue 33: a PSNR within 0.05 dB
# read "26.2 / 26.2 / 26.2", an SSIM "0.798 / 0.798 / 0.797").
mkdir -p "$T/narrow"
"$PY" - "$T/narrow/log.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, (p, s) in enumerate([(26.21, 0.7981), (26.23, 0.7979), (26.24, 0.7975), (26.22, 0.7978)]):
        f.write(json.dumps({"mode": "val", "iter": 100 * (i + 1), "PSNR": p, "SSIM": s}) + "\n")
PY
"$DUET" plot "$T/narrow" > "$T/narrow.out" 2>&1 || fail "narrow: $(cat "$T/narrow.out")"
"$PY" - "$T/narrow.out" <<'PY' || fail "tick labels: $(cat "$T/narrow.out")"
import re, sys
found = 0
for line in open(sys.argv[1]):
    m = re.search(r"axis ticks (\S+), (\S+), (\S+)$", line.strip())
    if m:
        found += 1
        t = m.groups()
        assert len(set(t)) == 3, t                       # three different labels
        assert float(t[0]) > float(t[1]) > float(t[2]), t  # top to bottom
assert found == 2, found
PY
"$DUET" plot "$T/w" --keys PSNR --out "$T/psnr.png" > "$T/k.out" 2>&1 || fail "--keys: $(cat "$T/k.out")"
[ "$(grep -c points "$T/k.out")" = 1 ] || fail "--keys PSNR drew more: $(cat "$T/k.out")"
if "$DUET" plot "$T/w" --keys los > "$T/bad.out" 2>&1; then fail "--keys los accepted"; fi
grep -q "has no values of 'los' (it has: loss, PSNR)" "$T/bad.out" || fail "unknown key: $(cat "$T/bad.out")"
: > "$T/empty/log.jsonl"
if "$DUET" plot "$T/empty" > "$T/e.out" 2>&1; then fail "an empty log plotted"; fi
grep -q "holds no training or evaluation records yet" "$T/e.out" || fail "empty: $(cat "$T/e.out")"
if "$DUET" plot "$T/nowhere" > "$T/n.out" 2>&1; then fail "a missing work dir plotted"; fi
grep -q "cannot open $T/nowhere/log.jsonl" "$T/n.out" || fail "missing: $(cat "$T/n.out")"
if "$DUET" plot "$T/w" --kyes a > "$T/o.out" 2>&1; then fail "--kyes accepted"; fi
grep -q "did you mean '--keys'" "$T/o.out" || fail "option typo: $(cat "$T/o.out")"

# A real run.
e2e_pngs "$T/data" 2
e2e_tiny_cfg "$T/tiny.cfg" "$T/data" 4 1 "total_iters = 4;
log_config = { interval = 1; };
checkpoint_config = { interval = 4; };"
"$DUET" train "$T/tiny.cfg" --work-dir "$T/run" > "$T/run.out" 2>&1 || fail "train: $(cat "$T/run.out")"
"$DUET" plot "$T/run" > "$T/p.out" 2>&1 || fail "plot a run: $(cat "$T/p.out")"
grep -q "loss_pix (train): 4 points, iterations 1..4" "$T/p.out" || fail "run curve: $(cat "$T/p.out")"
echo "test_plot: ok"
