#!/usr/bin/env bash
# kvlane's grammar matcher against xgrammar (README.md here): installs the pinned
# @mlc-ai/web-xgrammar (package-lock.json) into BUILD_DIR/grammar-xcheck with `npm ci` (only when
# the lock file changed since the last install), writes kvlane's decisions on the corpus with
# the driver, and compares them with xgrammar's in node. Without node or npm the test is
# skipped visibly (exit 77, ctest's SKIP_RETURN_CODE).
# Usage: run.sh BUILD_DIR SOURCE_DIR DRIVER [SEED]
set -euo pipefail
build=$1 src=$2 driver=$3 seed=${4:-22}
here=$src/tests/grammar_xcheck

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is missing (scripts/bootstrap installs it)"
    exit 77
  fi
done

work=$build/grammar-xcheck
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$work/"
if ! cmp -s "$work/package-lock.json" "$work/.installed-lock.json"; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error) || { echo "grammar xcheck: npm ci failed" >&2; exit 1; }
  cp "$work/package-lock.json" "$work/.installed-lock.json"
fi

decisions=$work/decisions-$seed.json
"$driver" "$here/corpus.json" "$decisions" --seed "$seed"
node "$here/xcheck.mjs" "$decisions" "$here/corpus.json" "$work/node_modules/@mlc-ai/web-xgrammar"
