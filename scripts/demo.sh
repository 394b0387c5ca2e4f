#!/usr/bin/env bash
# The quick start: trains the tiny x4 pair (MSRResNet, then SRGAN from its
# weights) on 2 processes with the sample photos, tests both next to bicubic
# upscaling and says where the images are. Run by `make demo` after the
# build; usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DUET="$BUILD/duet"
NP=${DUET_DEMO_NP:-2}
[ -x "$DUET" ] || { echo "demo: $DUET is missing; run make demo (or make build) first" >&2; exit 1; }

bash scripts/fetch-sample-data.sh

MPIRUN=(mpirun -n "$NP" --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
# One BLAS thread per process: the processes are the parallelism.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# The demo's own work dirs: each demo starts afresh there, and runs a user
# made with the README's commands (work_dirs/<config name>) are left alone.
G=work_dirs/demo/msrresnet_x4_tiny
S=work_dirs/demo/srgan_x4_tiny
rm -rf "$G" "$S"

echo "== demo: 1/2 train the tiny MSRResNet (PSNR-oriented) on $NP processes"
"${MPIRUN[@]}" "$DUET" train configs/msrresnet_x4_tiny.cfg --work-dir "$G"
echo "== demo: 2/2 fine-tune it as the tiny SRGAN on $NP processes"
"${MPIRUN[@]}" "$DUET" train configs/srgan_x4_tiny.cfg --work-dir "$S" \
  --set "load_from=\"$G/latest.safetensors\""

echo "== demo: test on the held-out photos (data/sample/val)"
"${MPIRUN[@]}" "$DUET" test configs/msrresnet_x4_tiny.cfg "$G/latest.safetensors" --out "$G/test"
"${MPIRUN[@]}" "$DUET" test configs/srgan_x4_tiny.cfg "$S/latest.safetensors" --out "$S/test"

echo
echo "demo: done."
echo "  MSRResNet outputs:  $G/test/*.png   grids (input | output | ground truth): $G/val/"
echo "  SRGAN outputs:      $S/test/*.png   grids: $S/val/"
echo "  logs:               $G/log.jsonl, $S/log.jsonl"
