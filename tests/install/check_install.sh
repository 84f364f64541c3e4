#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds the examples the way an
# app would: with find_package(kvlane) and with pkg-config kvlane.
set -euo pipefail
build_dir=$1 source_dir=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvlane-install-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" > "$scratch/install.log"
test -f "$scratch/prefix/include/kvlane/client.hpp"
test -f "$scratch/prefix/include/kvlane/kvlane.h"
cmake -S "$source_dir/tests/install" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DEXAMPLES_DIR="$source_dir/examples" > "$scratch/configure.log"
cmake --build "$scratch/consumer" > "$scratch/build.log"
libdir=$(dirname "$(find "$scratch/prefix" -name kvlane.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs kvlane)
cc -std=c11 -Wall -Werror "$source_dir/examples/hello.c" $flags -o "$scratch/hello_pc" \
  -Wl,-rpath,"$(dirname "$libdir")"
# Neither links CAF or spdlog.
! ldd "$scratch/hello_pc" | grep -E "caf|spdlog"
echo "install: find_package(kvlane) and pkg-config kvlane both build the examples"
