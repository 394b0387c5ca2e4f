#!/usr/bin/env bash
# Makes the Python environment in which MMEditing 0.16.1 itself is the
# oracle of the reference tests labelled `mmedit` (issue 19), or reuses it.
#
#   bash scripts/make-mmedit-venv.sh [DIR]
#
# DIR defaults to $DUET_MMEDIT_VENV, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv, the place CMake looks
# (its cache variable DUET_MMEDIT_VENV). A venv made from the same pins is
# reused as it is (a few milliseconds); otherwise it is made anew: about
# 15 s once the Debian packages are there.
#
# What it holds, and why:
# - Debian's python3-torch 1.13 (through --system-site-packages): the
#   PyTorch MMEditing 0.16 was used with, and the one tests/ref/ already
#   runs on; python3-torchvision 0.14 (built against that torch; MMEditing's
#   PerceptualLoss imports torchvision.models.vgg) and python3-scipy
#   (mmedit.core.evaluation imports it) come from Debian too.
# - From PyPI, with --no-deps so that pip never pulls a second torch:
#   mmedit 0.16.1 and mmcv 1.7.2 without compiled ops ("lite"; its sdist
#   is pure Python). mmcv-full 1.7.2 is source only and does not build on
#   Debian's torch, which ships no C++ headers (torch/types.h); with the
#   headers (libtorch-dev) it compiles ~100 C++ files, far past the few
#   minutes CI can spend. The models compared here use none of mmcv's
#   compiled ops; tests/ref/mmedit_oracle.py stubs the few imports of
#   mmcv.ops that importing mmedit.models triggers.
#   yapf 0.32 because mmcv 1.7's Config calls FormatCode(verify=...), which
#   yapf 0.40.2 removed; opencv-python-headless 4.8 because later wheels
#   need numpy 2 (Debian 12 has 1.24).
# `make test` (and so CI) runs this first; `make demo` never does.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${DUET_MMEDIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/mmedit-venv}}"
pins=(mmedit==0.16.1 mmcv==1.7.2 addict==2.4.0 yapf==0.32.0 packaging==24.2
      opencv-python-headless==4.8.1.78)
debs=(python3 python3-venv python3-pip python3-numpy python3-torch python3-torchvision
      python3-scipy)
stamp="duet mmedit venv: ${pins[*]} on $(/usr/bin/python3 --version 2>&1)"

if [ -f "$venv/duet-stamp" ] && [ "$(cat "$venv/duet-stamp")" = "$stamp" ] &&
   "$venv/bin/python" "$here/../tests/ref/mmedit_oracle.py" --check >/dev/null 2>&1; then
  echo "make-mmedit-venv: reusing $venv"
  exit 0
fi

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "make-mmedit-venv: these Debian packages are missing and will be installed: ${missing[*]}"
  echo "make-mmedit-venv: running: ${SUDO:+$SUDO }apt-get update && ${SUDO:+$SUDO }apt-get install -y --no-install-recommends ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

echo "make-mmedit-venv: making $venv (Debian's torch, then from PyPI with --no-deps: ${pins[*]})"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${pins[@]}"
# The check imports mmedit.models through the stubs and builds a model.
"$venv/bin/python" "$here/../tests/ref/mmedit_oracle.py" --check
echo "$stamp" > "$venv/duet-stamp"
echo "make-mmedit-venv: ready: $venv"
