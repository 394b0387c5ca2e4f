#!/usr/bin/env bash
# Makes (or reuses) the Python environment of the tools that check what duet
# writes for other programs, from PyPI:
#   - tensorboard: its own reader (EventAccumulator) reads duet's event
#     files (tests/e2e/test_tensorboard.sh);
#   - onnxruntime and onnx: run and check the models `duet export` writes
#     (tests/e2e/test_export_onnx.sh).
# duet itself needs none of them: it writes events and ONNX models without
# any TensorFlow, ONNX or protobuf library.
#
#   bash scripts/make-tools-venv.sh [DIR]
#
# DIR defaults to $DUET_TOOLS_VENV, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/duet/tools-venv, where the tests look. A
# venv made from the same pins is reused (milliseconds); a new one takes
# about 20 s (about 100 MB of wheels; 400 MB on disk). It is isolated from
# Debian's packages: these want newer protobuf and numpy than Debian 12's.
# `make test` (and so CI) runs this; `make demo` never does.
set -euo pipefail
venv="${1:-${DUET_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/tools-venv}}"
pins=(tensorboard==2.21.0 onnxruntime==1.32.0 onnx==1.23.2)
stamp="duet tools venv: ${pins[*]} on $(/usr/bin/python3 --version 2>&1)"
check='from tensorboard.backend.event_processing.event_accumulator import EventAccumulator; import onnxruntime, onnx'

if [ -f "$venv/duet-stamp" ] && [ "$(cat "$venv/duet-stamp")" = "$stamp" ] &&
   "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "make-tools-venv: reusing $venv"
  exit 0
fi
if ! /usr/bin/python3 -c "import ensurepip" >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "make-tools-venv: python3-venv is missing and will be installed"
  echo "make-tools-venv: running: ${SUDO:+$SUDO }apt-get install -y --no-install-recommends python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends python3-venv
fi
echo "make-tools-venv: making $venv (${pins[*]} from PyPI)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -c "$check"
echo "$stamp" > "$venv/duet-stamp"
echo "make-tools-venv: ready: $venv"
