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
# scripts FILE... and their runner (checks.mjs) beside them; `npm ci` only when the lockfile
# changed since the last install.
install_clients() {
  local work=$1
  shift
  mkdir -p "$work"
  cp "$here/package.json" "$here/package-lock.json" "$here/checks.mjs" "$@" "$work/"
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

# start_daemon KVLANED CONFIG SCHEME: starts kvlaned on CONFIG (log in $tmp/daemon.log), waits
# up to 20 s for "ready:", and sets `url` to the API's SCHEME://127.0.0.1:PORT from its log.
start_daemon() {
  "$1" --config "$2" >"$tmp/daemon.log" 2>&1 &
  daemon_pid=$!
  local i
  for ((i = 0; ; i++)); do
    grep -q "ready:" "$tmp/daemon.log" && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/daemon.log" >&2; fail "kvlaned exited early"; }
    ((i < 200)) || { cat "$tmp/daemon.log" >&2; fail "kvlaned not ready in 20 s"; }
    sleep 0.1 # polls a log file written by another process: no event to wait on
  done
  url=$(sed -n "s#.* on \\($3://127\\.0\\.0\\.1:[0-9]*\\).*#\\1#p" "$tmp/daemon.log" | head -n1)
  [[ -n $url ]] || { cat "$tmp/daemon.log" >&2; fail "no $3:// URL in the daemon's log"; }
}
