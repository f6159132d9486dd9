#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds consumer.c
# twice — with find_package(Kiln) and with pkg-config — and runs both.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/consumer/consumer"
libdir=$(ls -d "$tmp/prefix"/lib*/pkgconfig | head -1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs kiln)
# the include path is the prefix's, as written (not via the .pc's folder)
cflags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags kiln)
if [[ ${cflags%% } != "-I$tmp/prefix/include" ]]; then
  echo "pkg-config --cflags kiln printed '$cflags', expected '-I$tmp/prefix/include'" >&2
  exit 1
fi
cc -std=c11 "$src/consumer.c" $flags -o "$tmp/consumer_pc"
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/consumer_pc"
echo "install check passed: find_package(Kiln) and pkg-config kiln"
