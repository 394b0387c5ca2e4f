#!/usr/bin/env bash
# Sample SR data: the RGB photographs shipped with scikit-image, taken from
# Debian's python3-skimage package (downloaded with `apt-get download` and
# unpacked into a temporary folder; nothing is installed), copied into
#
#   data/sample/train/  astronaut.png          512x512  (W x H)
#                       chelsea.png            451x300
#                       coffee.png             600x400
#                       hubble_deep_field.jpg  1000x872
#                       ihc.png                512x512
#                       retina.jpg             1411x1411
#   data/sample/val/    motorcycle_left.png    741x500
#                       rocket.jpg             640x427
#
# A fixed split. Gray images (camera, moon, coins, ...) are left out, and so
# is motorcycle_right.png (the other half of a stereo pair with
# motorcycle_left, which would leak validation content into training).
#
# Usage: scripts/fetch-sample-data.sh [DEST]      (DEST defaults to data/sample)
# Environment: SKIMAGE_DEB=/path/to/python3-skimage_*.deb uses that file
# instead of downloading. Running it again changes nothing when the files are
# already there.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$here/data/sample}"
train=(astronaut.png chelsea.png coffee.png hubble_deep_field.jpg ihc.png retina.jpg)
val=(motorcycle_left.png rocket.jpg)
pkg=python3-skimage
inside=usr/lib/python3/dist-packages/skimage/data

have_all() {
    local f
    for f in "${train[@]}"; do [[ -s "$dest/train/$f" ]] || return 1; done
    for f in "${val[@]}"; do [[ -s "$dest/val/$f" ]] || return 1; done
}

if have_all; then
    echo "fetch-sample-data: already there: $dest/train (${#train[@]} images), $dest/val (${#val[@]} images)"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [[ -n "${SKIMAGE_DEB:-}" ]]; then
    deb="$SKIMAGE_DEB"
else
    echo "fetch-sample-data: downloading Debian's $pkg (about 20 MB) ..."
    if ! (cd "$tmp" && apt-get download "$pkg" >"$tmp/apt.log" 2>&1); then
        cat "$tmp/apt.log" >&2
        echo "fetch-sample-data: 'apt-get download $pkg' failed. Run 'apt-get update' first," \
             "or pass a downloaded package as SKIMAGE_DEB=/path/to/${pkg}_*.deb" >&2
        exit 1
    fi
    deb="$(ls "$tmp"/${pkg}_*.deb | head -n 1)"
fi
dpkg-deb -x "$deb" "$tmp/x"
src="$tmp/x/$inside"

copy() { # copy SUBDIR FILE...
    local sub="$1" f
    shift
    mkdir -p "$dest/$sub"
    for f in "$@"; do
        if [[ ! -s "$src/$f" ]]; then
            echo "fetch-sample-data: $f is missing from $deb ($inside)" >&2
            exit 1
        fi
        cmp -s "$src/$f" "$dest/$sub/$f" || cp "$src/$f" "$dest/$sub/$f"
    done
}
copy train "${train[@]}"
copy val "${val[@]}"
echo "fetch-sample-data: wrote $dest/train (${#train[@]} images) and $dest/val (${#val[@]} images)"
