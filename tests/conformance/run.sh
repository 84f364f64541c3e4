#!/usr/bin/env bash
# Conformance of kvlaned's HTTP API with real clients: installs the pinned npm clients
# (package-lock.json) into the build tree with `npm ci`, starts kvlaned on a free loopback
# port, runs conformance.mjs (openai@6, ollama) and curl checks of SSE and NDJSON framing.
# Usage: run.sh BUILD_DIR SOURCE_DIR KVLANED KVLANE_CLI
set -euo pipefail
build=$1 src=$2 kvlaned=$3 cli=$4
here=$src/tests/conformance

name=conformance
. "$here/lib.sh"
need npm curl
work=$build/conformance
install_clients "$work" "$here/conformance.mjs"
with_scratch "$build"

key=conformance-key-$$
cat >"$tmp/kvlane.toml" <<TOML
version = 1
[daemon]
runtime_dir = "$tmp/run"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 1000
[[model]]
name = "slow"
[model.sim]
slots = 2
max_context = 4096
snapshot_bytes = "4MiB"
time_scale = 1
[store]
max_bytes = "256MiB"
[http]
listen = "127.0.0.1:0"
api_key = "$key"
TOML
start_daemon "$kvlaned" "$tmp/kvlane.toml" http

# curl: SSE framing. Every event is one "data: " line and a blank line; the last is [DONE].
auth=(-H "Authorization: Bearer $key" -H "Content-Type: application/json")
sse=$(curl -sS -N --max-time 30 "${auth[@]}" -D "$tmp/sse.head" "$url/v1/chat/completions" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}')
grep -qi '^content-type: text/event-stream' "$tmp/sse.head" || fail "SSE content type: $(cat "$tmp/sse.head")"
awk 'NR % 2 == 1 && !/^data: / { bad = 1 } NR % 2 == 0 && $0 != "" { bad = 1 }
     END { exit bad }' <<<"$sse" || fail "SSE framing: $sse"
[[ $(grep -c '^data: ' <<<"$sse") -ge 3 ]] || fail "too few SSE events: $sse"
[[ $(tail -n 1 <<<"$sse") == "data: [DONE]" ]] || fail "SSE does not end with [DONE]: $sse"

# curl: NDJSON. Every line is one JSON object; only the last has done: true.
nd=$(curl -sS --max-time 30 "${auth[@]}" -D "$tmp/nd.head" "$url/api/generate" \
  -d '{"model":"tiny","prompt":"hi","options":{"num_predict":4}}')
grep -qi '^content-type: application/x-ndjson' "$tmp/nd.head" || fail "NDJSON content type"
node -e '
  const lines = require("fs").readFileSync(0, "utf8").split("\n").filter((l) => l !== "");
  const objs = lines.map((l) => JSON.parse(l));
  if (objs.length < 2 || !objs.at(-1).done || objs.slice(0, -1).some((o) => o.done))
    process.exit(1);' <<<"$nd" || fail "NDJSON framing: $nd"
echo "ok   curl: SSE and NDJSON framing"

KVLANE_URL=$url KVLANE_API_KEY=$key KVLANE_CLI=$cli KVLANE_ADMIN_SOCKET=$tmp/run/kvlane-admin.sock \
  node "$work/conformance.mjs" || { tail -n 30 "$tmp/daemon.log" >&2; exit 1; }
