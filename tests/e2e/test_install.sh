#!/usr/bin/env bash
# Installs the built duet into a temporary prefix and builds a program
# against it twice: with pkg-config and with CMake's find_package(duet).
set -euo pipefail
: "${DUET_BINARY_DIR:?run through ctest}" "${DUET_SOURCE_DIR:?run through ctest}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$DUET_BINARY_DIR" --prefix "$tmp/prefix" > "$tmp/install.log"
libdir=$(ls -d "$tmp"/prefix/lib* | head -1)
test -f "$tmp/prefix/include/duet/duet.h"
test -f "$libdir/pkgconfig/duet.pc"

# pkg-config, shared library
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 -o "$tmp/consumer_pc" "$DUET_SOURCE_DIR/tests/install/consumer.c" \
  $(pkg-config --cflags --libs duet)
LD_LIBRARY_PATH="$libdir" "$tmp/consumer_pc"

# find_package(duet) -> duet::duet
cmake -S "$DUET_SOURCE_DIR/tests/install" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  > "$tmp/configure.log"
cmake --build "$tmp/build" > "$tmp/build.log"
LD_LIBRARY_PATH="$libdir" "$tmp/build/consumer"
echo "install: pkg-config and find_package consumers built and ran"
