#!/usr/bin/env bash
# Installs the Debian packages duet needs to build, test and benchmark.
# Skips everything when all are present; run as root (or with sudo) on
# Debian 12.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libopenmpi-dev openmpi-bin libopenblas-dev libdnnl-dev
      libcmocka-dev libconfig-dev libjansson-dev libpng-dev libjpeg62-turbo-dev liblmdb-dev
      python3 python3-torch python3-numpy python3-lmdb
      clang libclang-rt-dev)  # clang + libFuzzer: scripts/fuzz.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
# Say what is about to be installed, and how, before doing it.
echo "install-deps: these Debian packages are missing and will be installed: ${missing[*]}"
echo "install-deps: running: ${SUDO:+$SUDO }apt-get update && ${SUDO:+$SUDO }apt-get install -y --no-install-recommends ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
