#!/usr/bin/env bash
# Training quality on both float32 convolution paths: each tiny config is
# trained to its end at several seeds with DUET_CONV=exact-path and with
# DUET_CONV=winograd, then scored on its held-out photos by `duet test
# --json`. A path is as good as the other when the means of every score
# differ by no more than the spread between seeds (the larger of the two
# paths' max - min). Numbers, not a verdict on time: nothing here is timed.
#
#   bash bench/quality.sh [BUILD] > quality.md     # BUILD defaults to build
#
# Environment (all optional):
#   MODELS="srgan esrgan pix2pix gl deepfillv1"   which rows (below)
#   SEEDS="0 1 2"            the config's seed key per run
#   PATHS="im2col winograd"  DUET_CONV values compared (the first is the
#                            reference; "im2col" is the exact default path)
#   NP=2                     processes per run (mpirun -n NP)
#   OUT=work_dirs/quality    where the runs' work dirs and results go
#
# Rows: srgan trains the tiny MSRResNet, then the tiny SRGAN from its
# weights (as the demo does); esrgan the tiny RRDBNet, then the tiny ESRGAN
# from it; pix2pix, gl and deepfillv1 their tiny config alone. SR rows
# report PSNR/SSIM, the inpaintors their scores and the gain over the masked
# input (psnr - psnr_input), Pix2Pix what `duet test` reports for it. Each
# (row, path, seed) leaves OUT/<row>/<path>/seed<S>/result.json; a rerun
# reuses the results it finds (delete OUT to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
duet="$build/duet"
[ -x "$duet" ] || { echo "quality: $duet not built (cmake --build $build)" >&2; exit 1; }
MODELS="${MODELS:-srgan esrgan pix2pix gl deepfillv1}"
SEEDS="${SEEDS:-0 1 2}"
PATHS="${PATHS:-im2col winograd}"
NP="${NP:-2}"
OUT="${OUT:-work_dirs/quality}"
mpirun=(mpirun -n "$NP" --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 DUET_NUM_THREADS=1

bash scripts/fetch-sample-data.sh >/dev/null

stages() { # ROW -> "config..." trained in order, each from the one before
    case "$1" in
        srgan) echo "configs/msrresnet_x4_tiny.cfg configs/srgan_x4_tiny.cfg" ;;
        esrgan) echo "configs/rrdbnet_x4_tiny_psnr.cfg configs/esrgan_x4_tiny.cfg" ;;
        pix2pix) echo "configs/pix2pix_tiny.cfg" ;;
        gl) echo "configs/gl_tiny.cfg" ;;
        deepfillv1) echo "configs/deepfillv1_tiny.cfg" ;;
        *) echo "quality: unknown row '$1' (srgan esrgan pix2pix gl deepfillv1)" >&2; return 1 ;;
    esac
}

run_one() { # ROW PATH SEED -> OUT/ROW/PATH/seedS/result.json
    local dir="$OUT/$1/$2/seed$3" prev="" cfg last=""
    [ -s "$dir/result.json" ] && return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    for cfg in $(stages "$1"); do
        local name
        name="$(basename "$cfg" .cfg)"
        local sets=(--set "seed=$3")
        [ -n "$prev" ] && sets+=(--set "load_from=\"$prev\"")
        DUET_CONV="$2" "${mpirun[@]}" -x DUET_CONV "$duet" train "$cfg" \
            --work-dir "$dir/$name" "${sets[@]}" >"$dir/$name.log" 2>&1 ||
            { echo "quality: training $cfg ($2, seed $3) failed: $dir/$name.log" >&2; return 1; }
        prev="$dir/$name/latest.safetensors"
        last="$cfg"
    done
    # Scored on the exact path, so that only the training differs.
    DUET_CONV=im2col "$duet" test "$last" "$prev" --json >"$dir/result.tmp" 2>"$dir/test.log" ||
        { echo "quality: testing $dir failed: $dir/test.log" >&2; return 1; }
    mv "$dir/result.tmp" "$dir/result.json"
}

echo "# Training quality by conv path ($(git describe --always --dirty 2>/dev/null || echo '?'))"
echo
echo "seeds: $SEEDS; $NP processes x 1 thread; paths: $PATHS (scored with DUET_CONV=im2col)"
echo
for row in $MODELS; do
    for path in $PATHS; do
        for seed in $SEEDS; do
            echo "quality: $row $path seed $seed" >&2
            run_one "$row" "$path" "$seed"
        done
    done
done
python3 - "$OUT" "$MODELS" "$PATHS" "$SEEDS" <<'EOF'
import json, sys
out, rows, paths, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
print("| model | score | " + " | ".join(f"{p} mean (min..max)" for p in paths) +
      " | difference | seed spread | within spread |")
print("|---|---|" + "---|" * len(paths) + "---|---|---|")
for row in rows:
    res = {p: [json.load(open(f"{out}/{row}/{p}/seed{s}/result.json")) for s in seeds] for p in paths}
    keys = [k for k, v in res[paths[0]][0].items()
            if isinstance(v, (int, float)) and k != "images" and not k.endswith("_bicubic")
            and not k.endswith("_input")]
    for k in keys:
        for r in (x for p in paths for x in res[p]):
            if f"{k}_input" in r:
                r[f"{k} gain"] = r[k] - r[f"{k}_input"]
    keys += [f"{k} gain" for k in keys if f"{k} gain" in res[paths[0]][0]]
    for k in keys:
        vals = {p: [r[k] for r in res[p]] for p in paths}
        mean = {p: sum(v) / len(v) for p, v in vals.items()}
        spread = max(max(v) - min(v) for v in vals.values())
        diff = mean[paths[-1]] - mean[paths[0]]
        cells = " | ".join(f"{mean[p]:.4f} ({min(vals[p]):.4f}..{max(vals[p]):.4f})" for p in paths)
        print(f"| {row} | {k} | {cells} | {diff:+.4f} | {spread:.4f} | "
              f"{'yes' if abs(diff) <= spread else '**no**'} |")
EOF
