# Shared by the conformance scripts (run.sh, tls.sh); sourced after `set -euo pipefail`.
# The caller sets `name` (the prefix of its error messages) and `here` (tests/conformance).

fail() { echo "$name: $*" >&2; exit 1; }

# need TOOL...: each tool is on PATH, or fail naming it.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || fail "$tool is missing (scripts/bootstrap installs it)"
  done
}

# install_clients WORK FILE...: the pinned npm clients (package-lock.json) in WORK, with the
# scripts FILE... beside them; `npm ci` only when the lockfile changed since the last install.
install_clients() {
  local work=$1
  shift
  mkdir -p "$work"
  cp "$here/package.json" "$here/package-lock.json" "$@" "$work/"
  if ! cmp -s "$work/package-lock.json" "$work/.installed-lock.json"; then
    (cd "$work" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed"
    cp "$work/package-lock.json" "$work/.installed-lock.json"
  fi
}

# with_scratch DIR: `tmp` is a new directory below DIR; on exit the daemon in `daemon_pid`
# (if any) gets SIGTERM and is waited for, and `tmp` is removed.
with_scratch() {
  tmp=$(mktemp -d "$1/$name-run.XXXXXX")
  daemon_pid=""
  trap cleanup EXIT
}
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
