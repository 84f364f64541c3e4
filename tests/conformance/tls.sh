#!/usr/bin/env bash
# The HTTP API over TLS with real clients: makes a test CA and a server certificate with the
# openssl CLI, starts kvlaned with [http] tls_cert/tls_key on a free loopback port, and checks
# that curl (--cacert) and the openai npm client (NODE_EXTRA_CA_CERTS) get chat completions
# over https; that plaintext HTTP and non-HTTP bytes sent to the TLS port fail cleanly (a 400
# saying to use https, a close) and the daemon keeps serving; that bad PEM files stop the
# daemon at start-up naming the key and the file; and that a non-loopback listener without
# TLS is refused naming allow_plaintext.
# Usage: tls.sh BUILD_DIR SOURCE_DIR KVLANED
set -euo pipefail
build=$(cd "$1" && pwd) src=$2 kvlaned=$3
here=$src/tests/conformance

name=tls
. "$here/lib.sh"
need openssl curl npm
# The pinned npm clients, shared with run.sh (ctest runs the two under one resource lock).
work=$build/conformance
install_clients "$work" "$here/tls.mjs"
with_scratch "$build"

# A CA, and a server certificate it signs for 127.0.0.1 and localhost.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=kvlane test CA" -keyout "$tmp/ca.key" -out "$tmp/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null || fail "openssl: making the CA failed"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null || fail "openssl: server key"
printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
  "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$tmp/server.ext"
openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial \
  -days 2 -extfile "$tmp/server.ext" -out "$tmp/server.pem" 2>/dev/null \
  || fail "openssl: signing the server certificate failed"
chmod 600 "$tmp/server.key"

key=tls-key-$$
config() { # config FILE LISTEN CERT KEY [EXTRA]
  cat >"$1" <<TOML
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
[http]
listen = "$2"
api_key = "$key"
tls_cert = "$3"
tls_key = "$4"
${5:-}
TOML
}

# Start-up errors name the key and the file; the daemon exits instead of serving.
expect_start_error() { # expect_start_error WHAT CERT KEY NEEDLE...
  local what=$1 cert=$2 pem_key=$3
  shift 3
  config "$tmp/bad.toml" "127.0.0.1:0" "$cert" "$pem_key"
  local out status=0
  out=$(timeout 60 "$kvlaned" --config "$tmp/bad.toml" 2>&1) || status=$?
  [[ $status -ne 0 && $status -ne 124 ]] || fail "$what: kvlaned did not refuse to start ($status)"
  for needle in "$@"; do
    grep -qF -- "$needle" <<<"$out" || fail "$what: no '$needle' in: $out"
  done
  echo "ok   start-up error: $what"
}
printf 'not a certificate\n' >"$tmp/garbage.pem"
openssl genpkey -algorithm ec -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/other.key" 2>/dev/null
openssl pkey -in "$tmp/server.key" -aes256 -passout pass:secret -out "$tmp/encrypted.key" 2>/dev/null
expect_start_error "certificate not PEM" "$tmp/garbage.pem" "$tmp/server.key" \
  "http.tls_cert" "$tmp/garbage.pem"
expect_start_error "certificate missing" "$tmp/absent.pem" "$tmp/server.key" \
  "http.tls_cert" "$tmp/absent.pem" "No such file"
expect_start_error "key of another certificate" "$tmp/server.pem" "$tmp/other.key" \
  "http.tls_key" "$tmp/other.key" "is not the key of the certificate"
expect_start_error "encrypted key" "$tmp/server.pem" "$tmp/encrypted.key" \
  "http.tls_key" "$tmp/encrypted.key" "encrypted"

# A listener outside loopback without TLS: refused by --check, naming allow_plaintext.
config "$tmp/plain.toml" "0.0.0.0:0" "" ""
status=0
out=$("$kvlaned" --config "$tmp/plain.toml" --check 2>&1) || status=$?
[[ $status -eq 1 ]] || fail "--check of a plaintext LAN listener: exit $status: $out"
grep -qF "http.allow_plaintext" <<<"$out" || fail "--check does not name allow_plaintext: $out"
grep -qF "clear text" <<<"$out" || fail "--check does not say why: $out"
echo "ok   a plaintext listener outside loopback is refused, naming allow_plaintext"

config "$tmp/kvlane.toml" "127.0.0.1:0" "$tmp/server.pem" "$tmp/server.key"
start_daemon "$kvlaned" "$tmp/kvlane.toml" https
port=${url##*:}

# curl over https, trusting the test CA; by IP and by name.
auth=(-H "Authorization: Bearer $key" -H "Content-Type: application/json")
chat='{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5}'
for u in "$url" "https://localhost:$port"; do
  r=$(curl -sS --max-time 30 --cacert "$tmp/ca.pem" "${auth[@]}" "$u/v1/chat/completions" -d "$chat") \
    || fail "curl $u: $r"
  node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
    if (r.object !== "chat.completion" || r.usage.completion_tokens !== 5) process.exit(1);' <<<"$r" \
    || fail "curl $u: not a chat completion: $r"
done
sse=$(curl -sS -N --max-time 30 --cacert "$tmp/ca.pem" "${auth[@]}" "$url/v1/chat/completions" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}')
[[ $(tail -n 1 <<<"$sse") == "data: [DONE]" ]] || fail "SSE over https does not end with [DONE]: $sse"
echo "ok   curl: chat completions over https, streamed and not"

# Without the CA, curl refuses the certificate: it is our test CA's, checked for real.
status=0
curl -sS --max-time 30 "$url/health" >/dev/null 2>&1 || status=$?
[[ $status -eq 60 ]] || fail "curl without the CA: exit $status, expected 60 (certificate problem)"

# Plaintext HTTP to the TLS port: a plaintext 400 that says to use https, then a close.
status=0
plain=$(curl -sS --max-time 30 -o "$tmp/plain.body" -w '%{http_code}' "http://127.0.0.1:$port/health") \
  || status=$?
[[ $status -eq 0 && $plain == 400 ]] || fail "plaintext to the TLS port: curl exit $status, status $plain"
grep -qF "https://" "$tmp/plain.body" || fail "the 400 does not say to use https: $(cat "$tmp/plain.body")"
# Bytes that are neither TLS nor HTTP: the daemon closes the connection.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf '\x01\x02garbage\r\n\r\n' >&3
status=0
answer=$(timeout 20 cat <&3) || status=$?
exec 3<&-
[[ $status -eq 0 && -z $answer ]] || fail "garbage to the TLS port: not closed cleanly ($status, '$answer')"
kill -0 "$daemon_pid" 2>/dev/null || fail "kvlaned died"
curl -sS --max-time 30 --cacert "$tmp/ca.pem" "$url/health" | grep -q '"ok"' \
  || fail "kvlaned does not serve https after the plaintext attempts"
echo "ok   plaintext and garbage to the TLS port fail cleanly; the daemon keeps serving"

# The openai npm client over https, trusting the test CA through NODE_EXTRA_CA_CERTS.
NODE_EXTRA_CA_CERTS=$tmp/ca.pem KVLANE_URL=$url KVLANE_API_KEY=$key \
  node "$work/tls.mjs" || { tail -n 30 "$tmp/daemon.log" >&2; exit 1; }

kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=""
[[ $status -eq 0 ]] || { tail -n 30 "$tmp/daemon.log" >&2; fail "kvlaned exited $status on SIGTERM"; }
echo "ok   kvlaned stops cleanly"
