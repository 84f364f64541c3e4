#!/usr/bin/env bash
# Checks that the build enforces the layer rule of docs/architecture.md: compiled with the
# include roots a layer's target sees, a header of the layer itself and of the layers below
# it is found, and a header of a layer above it is not.
# Usage: check_layers.sh CXX LAYER_INCLUDE_DIR SOURCE_DIR
set -euo pipefail
cxx=$1 roots=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# layer: the layers its target links (itself first), as in CMakeLists.txt.
declare -A sees=(
  [common]="common"
  [backends]="backends common"
  [ipc]="ipc common"
  [actors]="actors backends ipc common"
  [daemon]="daemon actors backends ipc common"
)
# One header of each layer, to include.
declare -A header=(
  [common]="common/expected.hpp"
  [backends]="backends/backend.hpp"
  [ipc]="ipc/spsc_ring.hpp"
  [actors]="actors/policy.hpp"
  [daemon]="daemon/config.hpp"
  [tools]="tools/cli.hpp"
)
failures=0
for layer in common backends ipc actors daemon; do
  flags=()
  for l in ${sees[$layer]}; do flags+=("-I$roots/$l"); done
  # Compile from inside the layer's folder, as its own sources are.
  probe_dir="$work/$layer"
  mkdir -p "$probe_dir"
  for target in "${!header[@]}"; do
    echo "#include \"${header[$target]}\"" >"$probe_dir/probe.cpp"
    if [[ " ${sees[$layer]} " == *" $target "* ]]; then expect=found; else expect=missing; fi
    if out=$("$cxx" -std=c++20 -fsyntax-only -I/usr/include "${flags[@]}" "$probe_dir/probe.cpp" 2>&1); then
      got=found
    elif grep -q "${header[$target]}: No such file" <<<"$out"; then
      got=missing
    else
      echo "FAIL: $layer including ${header[$target]} failed for another reason:"; echo "$out" | head -5
      failures=$((failures + 1)); continue
    fi
    if [[ $got != "$expect" ]]; then
      echo "FAIL: layer $layer including ${header[$target]}: expected $expect, got $got"
      failures=$((failures + 1))
    fi
  done
done
[[ $failures -eq 0 ]] && echo "layers: every layer sees exactly itself and the layers below it"
exit $((failures > 0))
