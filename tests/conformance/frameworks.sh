#!/usr/bin/env bash
# kvlaned's structured output and tool calls through LangChain (@langchain/openai,
# @langchain/ollama) and the Vercel AI SDK (ai, @ai-sdk/openai-compatible): installs the pinned
# npm packages (package-lock.json) into the build tree, starts kvlaned on a free loopback port
# with a fast sim model, and runs frameworks.mjs against it.
# Usage: frameworks.sh BUILD_DIR SOURCE_DIR KVLANED
set -euo pipefail
build=$1 src=$2 kvlaned=$3
here=$src/tests/conformance

name=frameworks
. "$here/lib.sh"
need npm
work=$build/conformance
install_clients "$work" "$here/frameworks.mjs"
with_scratch "$build"

# "fast": a 4096-token context, as a prompt with tools is long at one token per byte, and 1000x
# real time. Its small eos_rate makes it end after a complete call or object, as a model does,
# where it would otherwise begin a second (parallel) call and be cut at max_tokens.
key=frameworks-key-$$
cat >"$tmp/kvlane.toml" <<TOML
version = 1
[daemon]
runtime_dir = "$tmp/run"
worker_threads = 2
[[model]]
name = "fast"
[model.sim]
slots = 4
max_context = 4096
snapshot_bytes = "4MiB"
time_scale = 1000
eos_rate = 0.01
[store]
max_bytes = "64MiB"
[http]
listen = "127.0.0.1:0"
api_key = "$key"
TOML
start_daemon "$kvlaned" "$tmp/kvlane.toml" http

KVLANE_URL=$url KVLANE_API_KEY=$key node "$work/frameworks.mjs" || { tail -n 30 "$tmp/daemon.log" >&2; exit 1; }
