#!/usr/bin/env bash
# Installs the Release build into a scratch prefix, then builds and runs a downstream program
# three ways: CMake package (shared and static) and pkg-config.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/install -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/b" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/b/consumer_shared"
"$work/b/consumer_static"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc tests/install/consumer.c $(pkg-config --cflags --libs tilestack) -o "$work/pc"
LD_LIBRARY_PATH="$prefix/lib" "$work/pc"
echo "install check: ok"
