#!/usr/bin/env bash
# Stages the install under a scratch DESTDIR (paths stay those of the configured
# prefix, as in a package), then builds the examples the way an app would: with
# find_package(kvlane) and with pkg-config kvlane.
set -euo pipefail
build_dir=$1 source_dir=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvlane-install-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
DESTDIR="$scratch/root" cmake --install "$build_dir" > "$scratch/install.log"
prefix=$(sed -n 's/^prefix=//p' "$build_dir/kvlane.pc")
staged="$scratch/root$prefix"
test -f "$staged/include/kvlane/client.hpp"
test -f "$staged/include/kvlane/kvlane.h"
cmake -S "$source_dir/tests/install" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$staged" \
  -DEXAMPLES_DIR="$source_dir/examples" > "$scratch/configure.log"
cmake --build "$scratch/consumer" > "$scratch/build.log"
pcdir=$(dirname "$(find "$staged" -name kvlane.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$scratch/root" pkg-config --cflags --libs kvlane)
cc -std=c11 -Wall -Werror "$source_dir/examples/hello.c" $flags -o "$scratch/hello_pc" \
  -Wl,-rpath,"$(dirname "$pcdir")"
# Neither links CAF or spdlog.
! ldd "$scratch/hello_pc" | grep -E "caf|spdlog"
echo "install: find_package(kvlane) and pkg-config kvlane both build the examples"
