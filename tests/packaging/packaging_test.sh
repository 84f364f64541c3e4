#!/usr/bin/env bash
# Packaging tests, one per mode; tests/packaging/CMakeLists.txt registers them with ctest and
# passes the build's paths in KVLANE_* variables.
#   install  `cmake --install` with DESTDIR: the tree, the unit's paths, a valid config; then apps
#            built against the staged library (pkg-config, find_package) talk to the staged daemon
#   deb      the .deb from cpack: name, fields, contents, conffiles, maintainer scripts and what
#            those scripts do (run against stub commands, so the machine is not touched)
#   unit     the unit that gets installed: systemd-analyze verify is clean, exposure <= 2.0
# Exit 0 pass, 1 fail, 77 skipped (a tool is missing; scripts/bootstrap installs them all).
set -euo pipefail

mode=${1:?usage: packaging_test.sh install|deb|unit}
: "${KVLANE_SOURCE_DIR:?}" "${KVLANE_BINARY_DIR:?}" "${KVLANE_VERSION:?}" "${KVLANE_PREFIX:?}"
: "${KVLANE_SBINDIR:?}" "${KVLANE_BINDIR:?}" "${KVLANE_LIBDIR:?}" "${KVLANE_INCLUDEDIR:?}"
: "${KVLANE_DOCDIR:?}" "${KVLANE_UNITDIR:?}" "${KVLANE_CONFIG_FILE:?}" "${KVLANE_UNIT:?}"
: "${KVLANED_PATH:?}"

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || skip "'$tool' is not installed (scripts/bootstrap installs it)"
  done
}
# Runs a command quietly; on failure shows its output and fails.
quiet() {
  local log=$tmp/quiet.log
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "command failed: $*"; }
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvlane-packaging-XXXXXX")
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -KILL "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Every path the package must hold, relative to the root of the installed tree.
expected_paths=(
  "$KVLANE_SBINDIR/kvlaned"
  "$KVLANE_BINDIR/kvlane"
  "$KVLANE_LIBDIR/libkvlane.so"
  "$KVLANE_LIBDIR/libkvlane.so.${KVLANE_VERSION%%.*}"
  "$KVLANE_LIBDIR/libkvlane.so.$KVLANE_VERSION"
  "$KVLANE_LIBDIR/libkvlane.a"
  "$KVLANE_INCLUDEDIR/kvlane/client.hpp"
  "$KVLANE_INCLUDEDIR/kvlane/kvlane.h"
  "$KVLANE_LIBDIR/cmake/kvlane/kvlaneConfig.cmake"
  "$KVLANE_LIBDIR/cmake/kvlane/kvlaneConfigVersion.cmake"
  "$KVLANE_LIBDIR/cmake/kvlane/kvlaneTargets.cmake"
  "$KVLANE_LIBDIR/pkgconfig/kvlane.pc"
  "$KVLANE_UNITDIR/kvlaned.service"
  "$KVLANE_CONFIG_FILE"
  "$KVLANE_DOCDIR/README.md"
  "$KVLANE_DOCDIR/docs/config.md"
)

# The unit, config and daemon of a tree rooted at $1 agree with each other.
check_tree_service_files() {
  local root=$1
  local exec_start
  exec_start=$(grep '^ExecStart=' "$root$KVLANE_UNITDIR/kvlaned.service")
  [[ $exec_start == "ExecStart=$KVLANE_SBINDIR/kvlaned --config $KVLANE_CONFIG_FILE" ]] ||
    fail "unit has '$exec_start', want the installed daemon and config paths"
  cmp -s "$root$KVLANE_CONFIG_FILE" "$KVLANE_SOURCE_DIR/etc/kvlane.toml" ||
    fail "installed $KVLANE_CONFIG_FILE differs from etc/kvlane.toml"
  "$root$KVLANE_SBINDIR/kvlaned" --config "$root$KVLANE_CONFIG_FILE" --check >"$tmp/check.log" 2>&1 ||
    { cat "$tmp/check.log" >&2; fail "the installed kvlaned rejects the installed config"; }
  local include
  include=$(pc "$root" --cflags-only-I kvlane) || fail "pkg-config does not find kvlane.pc in $root"
  include=${include#-I}
  [[ $(realpath -m "${include%% *}") == "$root$KVLANE_INCLUDEDIR" ]] ||
    fail "kvlane.pc points at '$include', not at the headers in $root$KVLANE_INCLUDEDIR"
}

# pkg-config on a tree rooted at $1 only, as an app builds against a staged install: the
# sysroot prefixes -I and -L (pkgconf does not prefix twice a .pc whose paths already are).
pc() {
  local root=$1
  shift
  PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR="$root$KVLANE_LIBDIR/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" \
    PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 pkg-config "$@"
}

# Starts $1 (a kvlaned) on a small fast config with its sockets in $tmp/run; waits for ready.
start_daemon() {
  mkdir -p "$tmp/run"
  cat >"$tmp/test.toml" <<EOF
version = 1
[daemon]
runtime_dir = "$tmp/run"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 256
snapshot_bytes = "1MiB"
time_scale = 1000
[store]
max_bytes = "64MiB"
[http]
listen = ""
EOF
  "$1" --config "$tmp/test.toml" >"$tmp/daemon.log" 2>&1 &
  daemon_pid=$!
  local waited=0
  until grep -q "ready:" "$tmp/daemon.log"; do
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/daemon.log" >&2; fail "kvlaned exited early"; }
    ((waited++ < 200)) || { cat "$tmp/daemon.log" >&2; fail "kvlaned not ready in 20 s"; }
    sleep 0.1
  done
}

stop_daemon() {
  kill -TERM "$daemon_pid"
  local status=0
  wait "$daemon_pid" || status=$?
  daemon_pid=""
  ((status == 0)) || { cat "$tmp/daemon.log" >&2; fail "kvlaned exited with $status on SIGTERM"; }
}

# An example app streams an answer from the daemon: exit 0 and some text.
run_app() {
  local out
  out=$(KVLANE_SOCKET="$tmp/run/kvlane.sock" timeout 30 "$1" "Hello" 2>&1) ||
    fail "$(basename "$1") failed against the installed daemon: $out"
  [[ -n ${out//[[:space:]]/} ]] || fail "$(basename "$1") printed no answer"
}

test_install() {
  need cmake pkg-config cc readelf ldd timeout
  local root=$tmp/root
  DESTDIR=$root cmake --install "$KVLANE_BINARY_DIR" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
  ! grep -q -i "warning" "$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "install warned"; }
  local path
  for path in "${expected_paths[@]}"; do
    [[ -e $root$path ]] || fail "not installed: $path"
  done
  check_tree_service_files "$root"
  for path in "$KVLANE_SBINDIR/kvlaned" "$KVLANE_BINDIR/kvlane" "$KVLANE_LIBDIR/libkvlane.so.$KVLANE_VERSION"; do
    ! readelf -d "$root$path" | grep -E "R(UN)?PATH" | grep -qF "$KVLANE_BINARY_DIR" ||
      fail "$path keeps an RPATH into the build tree"
  done

  # pkg-config: an app built against the staged library.
  local version
  version=$(pc "$root" --modversion kvlane) || fail "pkg-config does not find kvlane"
  [[ $version == "$KVLANE_VERSION" ]] || fail "pkg-config kvlane version $version, want $KVLANE_VERSION"
  local -a pc_flags
  read -r -a pc_flags <<<"$(pc "$root" --cflags --libs kvlane)"
  quiet cc -std=c11 -Wall -Wextra -Werror "$KVLANE_SOURCE_DIR/examples/hello.c" "${pc_flags[@]}" \
    -Wl,-rpath,"$root$KVLANE_LIBDIR" -o "$tmp/hello-c-pkgconfig"
  ldd "$tmp/hello-c-pkgconfig" | grep -q "libkvlane.so.* => $root" ||
    fail "the pkg-config app does not load the staged libkvlane.so"

  # find_package(kvlane): the consumer project of tests/install (shared and static library).
  local consumer=$KVLANE_SOURCE_DIR/tests/install
  [[ -f $consumer/CMakeLists.txt ]] || fail "the find_package consumer $consumer/CMakeLists.txt is missing"
  quiet cmake -S "$consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$root$KVLANE_PREFIX" \
    -DEXAMPLES_DIR="$KVLANE_SOURCE_DIR/examples"
  grep -qx "kvlane_DIR:PATH=$root$KVLANE_LIBDIR/cmake/kvlane" "$tmp/consumer/CMakeCache.txt" ||
    fail "find_package(kvlane) did not pick the staged package: $(grep kvlane_DIR "$tmp/consumer/CMakeCache.txt")"
  quiet cmake --build "$tmp/consumer"

  # The staged daemon serves the three apps.
  start_daemon "$root$KVLANE_SBINDIR/kvlaned"
  run_app "$tmp/hello-c-pkgconfig"
  run_app "$tmp/consumer/consumer_cpp"
  run_app "$tmp/consumer/consumer_c"
  stop_daemon
  echo "install: ${#expected_paths[@]} paths in place under DESTDIR; unit, config and daemon agree;" \
    "pkg-config and find_package apps got answers from the installed kvlaned"
}

# Stub commands for the maintainer scripts: each logs its arguments to $tmp/calls.
make_stubs() {
  mkdir -p "$tmp/stubs"
  local cmd
  for cmd in adduser addgroup deluser delgroup useradd groupadd userdel groupdel systemctl \
             deb-systemd-helper deb-systemd-invoke; do
    printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 0\n' "$cmd" "$tmp/calls" >"$tmp/stubs/$cmd"
  done
  # getent answers from STUB_KVLANE_EXISTS: 1 = the kvlane user and group exist.
  printf '#!/bin/sh\necho "getent $*" >>"%s"\n[ "$STUB_KVLANE_EXISTS" = 1 ] && echo "kvlane:x:999:999" && exit 0\nexit 2\n' \
    "$tmp/calls" >"$tmp/stubs/getent"
  chmod +x "$tmp/stubs"/*
}

# Whether the maintainer scripts can run where /run/systemd/system (their test for a running
# systemd) exists ($1 = 1) or not ($1 = 0): as the machine is, or else in a private mount
# namespace with a tmpfs on /run (needs root).
can_run_with_systemd() {
  local have=0
  [[ -d /run/systemd/system ]] && have=1
  (($1 == have)) || unshare --mount --propagation private true 2>/dev/null
}

# run_script SYSTEMD EXISTS SCRIPT ARGS...: runs a maintainer script against the stubs, systemd
# running if SYSTEMD = 1, the kvlane user existing if EXISTS = 1; sets $calls.
run_script() {
  local systemd=$1 exists=$2 script=$3
  shift 3
  : >"$tmp/calls"
  local -a cmd=(env STUB_KVLANE_EXISTS="$exists" PATH="$tmp/stubs:$PATH" sh -e "$tmp/control/$script" "$@")
  local have=0 status=0
  [[ -d /run/systemd/system ]] && have=1
  if ((systemd == have)); then
    "${cmd[@]}" || status=$?
  else
    local setup='mount -t tmpfs tmpfs /run'
    ((systemd)) && setup+=' && mkdir -p /run/systemd/system'
    unshare --mount --propagation private sh -c "$setup && exec \"\$@\"" sh "${cmd[@]}" || status=$?
  fi
  ((status == 0)) || fail "$script $* exited with $status (systemd running: $systemd)"
  calls=$(cat "$tmp/calls")
}

expect_call() { grep -qE "$1" <<<"$calls" || fail "$2: no call matching '$1' in: $calls"; }
expect_no_call() { ! grep -qE "$1" <<<"$calls" || fail "$2: unexpected call matching '$1' in: $calls"; }

test_deb() {
  need cpack dpkg-deb dpkg-shlibdeps file pkg-config
  quiet cpack --config "$KVLANE_BINARY_DIR/CPackConfig.cmake" -G DEB -B "$tmp/out"
  local deb=$tmp/out/kvlane_${KVLANE_VERSION}_$(dpkg --print-architecture).deb
  [[ -f $deb ]] || fail "cpack made no $(basename "$deb"): $(ls "$tmp/out")"

  [[ $(dpkg-deb -f "$deb" Package) == kvlane ]] || fail "package name is not kvlane"
  [[ $(dpkg-deb -f "$deb" Version) == "$KVLANE_VERSION" ]] || fail "version is not $KVLANE_VERSION"
  local depends
  depends=$(dpkg-deb -f "$deb" Depends)
  [[ $depends == *"libc6 (>="* && $depends == *libstdc++6* ]] ||
    fail "Depends was not computed by dpkg-shlibdeps: $depends"
  [[ $depends == *adduser* ]] || fail "Depends lacks adduser (postinst uses it): $depends"

  # Contents: every expected path; no file outside the prefix and the config directory.
  local listing files
  listing=$(dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's#^\./#/#; s#/$##')
  files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $6 }' | sed 's#^\./#/#')
  local path
  for path in "${expected_paths[@]}"; do
    grep -qxF "$path" <<<"$listing" || fail "not in the .deb: $path"
  done
  local stray
  stray=$(grep -vE "^($KVLANE_PREFIX|${KVLANE_CONFIG_FILE%/*})/" <<<"$files" || true)
  [[ -z $stray ]] || fail "files outside $KVLANE_PREFIX and ${KVLANE_CONFIG_FILE%/*}: $stray"

  # Control archive: conffile, maintainer scripts (executable, valid sh), ldconfig trigger.
  dpkg-deb -e "$deb" "$tmp/control"
  [[ $(cat "$tmp/control/conffiles") == "$KVLANE_CONFIG_FILE" ]] ||
    fail "conffiles is '$(cat "$tmp/control/conffiles")', want $KVLANE_CONFIG_FILE"
  local script
  for script in postinst prerm postrm; do
    [[ -f $tmp/control/$script ]] || fail "no $script"
    [[ $(stat -c %a "$tmp/control/$script") == 755 ]] || fail "$script is not mode 755"
    sh -n "$tmp/control/$script" || fail "$script is not valid sh"
  done
  grep -qx "activate-noawait ldconfig" "$tmp/control/triggers" || fail "no ldconfig trigger"
  grep -q "^libkvlane ${KVLANE_VERSION%%.*} kvlane" "$tmp/control/shlibs" || fail "no shlibs entry"

  # The files inside agree (unit paths, config, daemon accepts it).
  dpkg-deb -x "$deb" "$tmp/root"
  check_tree_service_files "$tmp/root"

  # What the maintainer scripts do, with and without a running systemd: add the user if missing,
  # reload systemd, restart a running daemon on upgrade, stop and disable it on removal, remove
  # the user on purge; never enable or start it.
  local calls systemd exercised=""
  local forbidden='^systemctl (.* )?(enable|start|restart)( |$)'
  make_stubs
  for systemd in 0 1; do
    if ! can_run_with_systemd "$systemd"; then
      echo "note: maintainer scripts not run with systemd running=$systemd (needs root and unshare)"
      continue
    fi
    exercised+=" $systemd"
    local when="systemd running=$systemd"
    run_script "$systemd" 0 postinst configure
    expect_call '^addgroup .*--system.* kvlane$' "postinst, fresh install, $when"
    expect_call '^adduser .*--system.*--no-create-home.*--home /nonexistent.* kvlane$' "postinst, fresh install, $when"
    expect_no_call "$forbidden|try-restart" "postinst, fresh install, $when"
    if ((systemd)); then
      expect_call '^systemctl daemon-reload$' "postinst, fresh install, $when"
    else
      expect_no_call '^systemctl' "postinst, fresh install, $when"
    fi

    run_script "$systemd" 1 postinst configure 0.0.1
    expect_no_call '^(adduser|addgroup|useradd|groupadd)' "postinst, upgrade, $when"
    expect_no_call "$forbidden" "postinst, upgrade, $when"
    if ((systemd)); then
      expect_call '^systemctl try-restart kvlaned.service$' "postinst, upgrade, $when"
    fi

    run_script "$systemd" 1 prerm remove
    expect_no_call "$forbidden" "prerm remove, $when"
    expect_call '^systemctl disable .*kvlaned.service$' "prerm remove, $when"
    if ((systemd)); then
      expect_call '^systemctl stop kvlaned.service$' "prerm remove, $when"
    else
      expect_no_call '^systemctl stop' "prerm remove, $when"
    fi
    run_script "$systemd" 1 prerm upgrade "$KVLANE_VERSION"
    expect_no_call '^systemctl (stop|disable)' "prerm upgrade, $when"

    run_script "$systemd" 1 postrm remove
    expect_no_call '^(deluser|delgroup|userdel|groupdel)' "postrm remove, $when"
    run_script "$systemd" 1 postrm purge
    expect_call '^deluser --system.* kvlane$' "postrm purge, $when"
    expect_no_call "$forbidden" "postrm purge, $when"
  done

  echo "deb: $(basename "$deb") holds all ${#expected_paths[@]} paths, conffile $KVLANE_CONFIG_FILE," \
    "Depends: $depends; maintainer scripts (systemd running:$exercised) add the user, never" \
    "enable or start kvlaned"
}

test_unit() {
  need systemd-analyze
  # The installed unit names the installed daemon; verify needs an executable that exists.
  local unit=$tmp/kvlaned.service
  sed "s#^ExecStart=$KVLANE_SBINDIR/kvlaned #ExecStart=$KVLANED_PATH #" "$KVLANE_UNIT" >"$unit"
  grep -q "^ExecStart=$KVLANED_PATH " "$unit" || fail "cannot find ExecStart=$KVLANE_SBINDIR/kvlaned in $KVLANE_UNIT"

  local out status=0
  out=$(cd "$tmp" && systemd-analyze verify --man=no "$unit" 2>&1) || status=$?
  # Warnings (unknown keys, bad values) do not change the exit status: any mention fails.
  if ((status != 0)) || grep -q "kvlaned" <<<"$out"; then
    fail "systemd-analyze verify (exit $status): $out"
  fi

  out=$(cd "$tmp" && systemd-analyze security --offline=true "$unit" 2>&1) || true
  local score
  score=$(sed -n 's/.*Overall exposure level for kvlaned\.service: \([0-9.]*\).*/\1/p' <<<"$out")
  [[ -n $score ]] || fail "no exposure level in: $out"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
    fail "exposure $score > 2.0; the unit lost hardening: $(grep -E '^✗' <<<"$out")"
  echo "unit: systemd-analyze verify is clean; exposure $score (<= 2.0)"
}

case $mode in
  install) test_install ;;
  deb) test_deb ;;
  unit) test_unit ;;
  *) fail "unknown mode $mode" ;;
esac
