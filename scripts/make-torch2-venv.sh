#!/usr/bin/env bash
# Makes (or reuses) a venv with the current PyTorch from PyPI, the
# yardstick of bench_train next to Debian's torch 1.13 (issue 19):
#
#   bash scripts/make-torch2-venv.sh [DIR]
#   build/bench_train --torch-python DIR/bin/python
#
# DIR defaults to $DUET_TORCH2_VENV, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/duet/torch2-venv. PyPI's Linux wheels of
# torch are CUDA builds: torch 2.15.0 pulls about 3 GB of CUDA libraries
# (cuda-toolkit, cuDNN, NCCL, ...), and it does not import without them even
# on the CPU (installed with --no-deps it fails on libcufile.so.0), so they
# are installed too. On a machine with a fast link this takes a few
# minutes; the wheel is kept in DIR-wheels for a rebuild. Never needed by
# `make demo` or `make test`.
set -euo pipefail
venv="${1:-${DUET_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/duet/torch2-venv}}"
pin=${DUET_TORCH2_PIN:-torch==2.15.0}
check='import torch; x = torch.randn(64, 64); assert torch.isfinite(x @ x).all(); print(torch.__version__)'
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/duet-stamp" 2>/dev/null)" = "$pin" ] &&
   "$venv/bin/python" -c "$check" > /dev/null 2>&1; then
  echo "make-torch2-venv: reusing $venv ($("$venv/bin/python" -c "$check"))"
  exit 0
fi
echo "make-torch2-venv: making $venv ($pin from PyPI, with its CUDA wheels: several GB)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" download -q --no-deps -d "$venv-wheels" "$pin"
"$venv/bin/pip" install -q --find-links "$venv-wheels" "$pin" numpy "setuptools>=77"
"$venv/bin/python" -c "$check"
"$venv/bin/python" -c "import torch; print(torch.__config__.show())" | grep -E "CPU capability|oneDNN|MKL"
echo "$pin" > "$venv/duet-stamp"
echo "make-torch2-venv: ready: $venv"
