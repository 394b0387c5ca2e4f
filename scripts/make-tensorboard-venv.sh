#!/usr/bin/env bash
# Makes (or reuses) a small Python environment holding the `tensorboard`
# package from PyPI, whose own reader (EventAccumulator) checks the event
# files duet writes (tests/e2e/test_tensorboard.sh). duet itself never needs
# it: it writes the events without any TensorFlow or protobuf library.
#
#   bash scripts/make-tensorboard-venv.sh [DIR]
#
# DIR defaults to $DUET_TB_VENV, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/duet/tensorboard-venv, where the test
# looks. A venv made from the same pin is reused (milliseconds); a new one
# takes about 11 s (about 40 MB of wheels: tensorboard and its protobuf,
# grpcio, numpy, werkzeug, ...; 180 MB on disk). It is isolated from
# Debian's packages: tensorboard 2.21 wants a newer protobuf and numpy than
# Debian 12's. `make test` (and so CI) runs this; `make demo` never does.
set -euo pipefail
venv="${1:-${DUET_TB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/tensorboard-venv}}"
pins=(tensorboard==2.21.0)
stamp="duet tensorboard venv: ${pins[*]} on $(/usr/bin/python3 --version 2>&1)"
check='from tensorboard.backend.event_processing.event_accumulator import EventAccumulator'

if [ -f "$venv/duet-stamp" ] && [ "$(cat "$venv/duet-stamp")" = "$stamp" ] &&
   "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "make-tensorboard-venv: reusing $venv"
  exit 0
fi
if ! /usr/bin/python3 -c "import ensurepip" >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "make-tensorboard-venv: python3-venv is missing and will be installed"
  echo "make-tensorboard-venv: running: ${SUDO:+$SUDO }apt-get install -y --no-install-recommends python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends python3-venv
fi
echo "make-tensorboard-venv: making $venv (${pins[*]} from PyPI)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -c "$check"
echo "$stamp" > "$venv/duet-stamp"
echo "make-tensorboard-venv: ready: $venv"
