#pragma once

// kvlane::daemon::config — the daemon's configuration (kvlane.toml).
//
// parse(text) is the test seam; load(path) reads the file and delegates.
// Every key has a default (documented in etc/kvlane.toml and docs/config.md);
// `version = 1` is required; unknown keys, wrong types and out-of-range values
// are errors naming the key and its line.

#include "actors/engine_config.hpp"
#include "common/config_reader.hpp"
#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon {

struct daemon_section {
  /// Sockets and runtime files. Empty = $RUNTIME_DIRECTORY, else /run/kvlane
  /// as root, else $XDG_RUNTIME_DIR/kvlane, else /tmp/kvlane-<uid>.
  std::string runtime_dir;
  std::uint32_t worker_threads = 0;  ///< CAF scheduler threads; 0 = one per core
  std::string log_level = "info";    ///< default level of every logger
  std::map<std::string, std::string> log_levels; ///< per-logger overrides
  std::chrono::milliseconds shutdown_timeout{5000}; ///< bound on ordered shutdown
  /// On SIGTERM: how long running sequences may finish before they are cancelled.
  std::chrono::milliseconds shutdown_grace{10000};

  friend bool operator==(const daemon_section&, const daemon_section&) = default;
};

/// [[model]]: one model, its backend and its share of the snapshot store.
using model_section = actors::model_config;

/// [clients]: the client control socket, its access rules and per-client limits.
struct clients_section {
  std::uint32_t socket_mode = 0666; ///< permission bits of <runtime_dir>/kvlane.sock
  /// Users / groups allowed to connect, as written: a name or a numeric id (kept
  /// as its decimal text). Both empty = everyone who can open the socket. Root
  /// is always allowed. Names are resolved when the daemon starts.
  std::vector<std::string> allow_users;
  std::vector<std::string> allow_groups;
  std::uint32_t max_clients = 64;           ///< connected apps at once
  std::uint32_t max_requests = 256;         ///< live requests per client
  std::uint64_t max_prompt_bytes = 1ull << 20; ///< bytes of one prompt (text or 4 per token)
  std::uint32_t submit_ring_records = 64;   ///< app -> daemon ring, a power of two
  std::uint32_t events_ring_records = 1024; ///< daemon -> app ring, a power of two
  std::uint32_t max_backlog_records = 8192; ///< events buffered per client beyond its ring
  std::uint32_t spin_us = 20;               ///< readers spin this long before sleeping
  std::chrono::milliseconds hello_timeout{2000}; ///< a new connection must say hello by then
  // Admission (live-reloadable): over a limit the newcomer gets `busy` with a retry hint.
  std::uint32_t max_pending = 64;             ///< accepted connections that have not said hello yet
  std::uint32_t max_clients_per_user = 16;    ///< connections of one uid
  std::uint32_t max_requests_per_user = 1024; ///< live requests of one uid, over its connections
  std::uint32_t max_live_sequences = 4096;    ///< live requests of all apps together
  std::chrono::milliseconds busy_retry{200};  ///< the retry hint of a `busy` answer

  friend bool operator==(const clients_section&, const clients_section&) = default;
};

/// [admin]: the admin socket <runtime_dir>/kvlane-admin.sock.
struct admin_section {
  std::uint32_t socket_mode = 0600; ///< permission bits of the admin socket
  /// Users / groups allowed to administer (names or numeric ids). Root and the
  /// daemon's own user always are; empty lists allow nobody else.
  std::vector<std::string> allow_users;
  std::vector<std::string> allow_groups;

  friend bool operator==(const admin_section&, const admin_section&) = default;
};

/// [metrics]: Prometheus over HTTP (the admin socket serves it too).
struct metrics_section {
  std::string listen; ///< "127.0.0.1:9464" style, loopback only; empty = off

  friend bool operator==(const metrics_section&, const metrics_section&) = default;
};

/// [[http.keys]]: one API key and the identity its requests run under (docs/http.md,
/// "Identities"): its own admission limit, round-robin share and reuse scope.
struct http_key {
  std::string name;     ///< unique; [A-Za-z0-9._-], 1..64 characters
  std::string key;      ///< the bearer key: as written, or read from key_file at load
  std::string key_file; ///< absolute path the key was read from; empty when written inline
  bool batch_only = false; ///< max_priority = "batch": its requests run in the batch class
  /// Live requests of this key at once; none = [clients] max_requests_per_user.
  std::optional<std::uint32_t> max_requests;
  bool share_all = false; ///< scope = "all": its KV joins the reuse scope shared by "all"

  friend bool operator==(const http_key&, const http_key&) = default;
};

/// [http]: the OpenAI- and Ollama-compatible HTTP API (docs/http.md).
struct http_section {
  /// "HOST:PORT"; empty = off. A non-loopback host needs api_key, api_key_file or keys.
  std::string listen = "127.0.0.1:8471";
  std::string api_key;      ///< bearer key clients must send; empty = none
  std::string api_key_file; ///< file holding the key (first line), read at start-up
  std::vector<std::string> cors_origins; ///< origins allowed by CORS; empty = none
  /// Host names requests may carry besides loopback names and IP literals; "*" = any.
  std::vector<std::string> allowed_hosts;
  std::uint32_t max_connections = 256;   ///< open connections at once
  std::uint64_t max_body_bytes = 4ull << 20; ///< bytes of one request body
  std::uint32_t max_header_bytes = 16u << 10; ///< bytes of one request's start line and headers
  std::chrono::milliseconds idle_timeout{60000};  ///< a keep-alive connection may idle this long
  std::chrono::milliseconds header_timeout{10000}; ///< a request's headers must arrive within this
  /// Open connections from one peer address; absent from the file: max_connections on a
  /// loopback listener (every client has its address), else 32 or max_connections if lower.
  std::uint32_t max_connections_per_peer = 256;
  std::string tls_cert; ///< PEM certificate chain; with tls_key, the API speaks HTTPS only
  std::string tls_key;  ///< PEM private key of tls_cert
  /// A non-loopback listen without TLS is refused unless this is set (a TLS proxy in front).
  bool allow_plaintext = false;
  std::vector<http_key> keys; ///< [[http.keys]]: one identity per key

  friend bool operator==(const http_section&, const http_section&) = default;
};

/// [sessions]: conversations kept by the daemon for clients that name a
/// session (daemon/session_table.hpp). Idle sessions expire with
/// [reuse] idle_ttl_s, the TTL of the KV they would reuse.
struct sessions_section {
  std::uint32_t max_per_user = 16;  ///< sessions of one uid; 0 disables sessions
  std::uint32_t max_sessions = 256; ///< sessions of all users together

  friend bool operator==(const sessions_section&, const sessions_section&) = default;
};

/// [store]: the snapshot store.
using store_section = actors::store_config;

/// The whole file: the engine's part ([[model]], [scheduler], [store]) and the
/// daemon's own sections.
struct config : actors::engine_config {
  daemon_section daemon;
  clients_section clients;
  sessions_section sessions;
  admin_section admin;
  metrics_section metrics;
  http_section http;
};


expected<config, config_error> parse(std::string_view toml_text, std::string_view source_name = "<config>");
expected<config, config_error> load(const std::string& path);

// parse_byte_size() (common/config_reader.hpp) reads the byte sizes written in kvlane.toml.

/// A loopback listen address: "127.0.0.1:PORT", "localhost:PORT" or
/// "[::1]:PORT" with PORT 1..65535. Empty on anything else.
struct listen_address {
  std::string host; ///< "127.0.0.1" or "::1"
  std::uint16_t port = 0;
};
std::optional<listen_address> parse_listen(std::string_view text);

/// Any listen address for [http]: an IPv4 literal, "localhost" or a bracketed
/// IPv6 literal, then ":PORT" with PORT 0..65535 (0: any free port, logged).
/// Empty on anything else.
struct http_listen_address {
  std::string host; ///< numeric, e.g. "0.0.0.0", "127.0.0.1", "::"
  std::uint16_t port = 0;
  bool loopback = false; ///< 127.0.0.0/8 or ::1
};
std::optional<http_listen_address> parse_http_listen(std::string_view text);

} // namespace kvlane::daemon
