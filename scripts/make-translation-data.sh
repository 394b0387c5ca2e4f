#!/usr/bin/env bash
# Tiny translation data for configs/pix2pix_tiny.cfg and cyclegan_tiny.cfg:
# edge map | photo pairs in data/pix2pix_tiny/{train,test}/ and unpaired
# photos / recoloured photos in data/cyclegan_tiny/{trainA,trainB,testA,testB}/,
# made from the sample photos (fetched first when missing). Deterministic: a
# second run writes nothing. See scripts/make_translation_data.py.
#
# Usage: scripts/make-translation-data.sh [SAMPLE_DIR [OUT_DIR]]
#        (defaults data/sample and data)
# Needs python3 with numpy (Debian's python3-numpy, from install-deps.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
sample="${1:-$here/data/sample}"
out="${2:-$here/data}"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    PY=/usr/bin/python3  # Debian's python3-numpy lives there
fi
"$here/scripts/fetch-sample-data.sh" "$sample"
exec "$PY" "$here/scripts/make_translation_data.py" "$sample" "$out"
