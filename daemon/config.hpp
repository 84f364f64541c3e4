#pragma once

// kvlane::daemon::config — the daemon's configuration (kvlane.toml).
//
// parse(text) is the test seam; load(path) reads the file and delegates.
// Every key has a default (documented in etc/kvlane.toml and docs/config.md);
// `version = 1` is required; unknown keys, wrong types and out-of-range values
// are errors naming the key and its line.

#include "backends/sim_options.hpp"
#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon {

enum class scheduler_mode : std::uint8_t { fcfs, sync, overlap, ideal };
std::string_view to_string(scheduler_mode m) noexcept;

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

struct model_section {
  std::string name;
  std::string backend = "sim";
  backends::sim_options sim; ///< [model.sim], used when backend = "sim"
  std::uint64_t store_floor_bytes = 0; ///< snapshot store bytes reserved for this model
  std::uint64_t store_cap_bytes = 0;   ///< most snapshot store bytes it may use; 0 = no cap

  friend bool operator==(const model_section&, const model_section&) = default;
};

struct scheduler_section {
  scheduler_mode mode = scheduler_mode::overlap;
  std::uint32_t quantum_tokens = 64;  ///< steps a sequence runs at level 0 before it drops a level
  std::uint32_t levels = 4;           ///< MLFQ levels; level i's quantum is quantum_tokens * 2^i
  std::uint32_t spare_slots = 1;      ///< slots kept free for new interactive requests
  std::uint32_t max_step_tokens = 512; ///< tokens per step (decodes always run; prefill fills up)
  std::uint32_t aging_steps = 2048;   ///< steps waited before a sequence returns to level 0; 0 = never
  double ewma_alpha = 0.2;            ///< weight of a new sample in the cost model

  friend bool operator==(const scheduler_section&, const scheduler_section&) = default;
};

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

struct store_section {
  std::uint64_t max_bytes = 8ull << 30; ///< snapshot store limit (reserved, committed on use)

  friend bool operator==(const store_section&, const store_section&) = default;
};

struct config {
  daemon_section daemon;
  std::vector<model_section> models;
  scheduler_section scheduler;
  store_section store;
  clients_section clients;
  admin_section admin;
  metrics_section metrics;
};

struct config_error {
  std::string key;      ///< dotted key, e.g. "model[0].sim.slots"; empty for syntax errors
  std::uint32_t line = 0; ///< 1-based line, 0 when unknown
  std::string message;  ///< full human-readable message, including key and line
};

expected<config, config_error> parse(std::string_view toml_text, std::string_view source_name = "<config>");
expected<config, config_error> load(const std::string& path);

/// Parses a byte size as written in kvlane.toml: digits, then optionally one
/// space and a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or kB/KB, MB, GB,
/// TB (powers of 1000). "64MiB", "8 GiB", "1GB", "4096". Empty on anything
/// else (signs, fractions, other units, trailing text) and on overflow.
std::optional<std::uint64_t> parse_byte_size(std::string_view text) noexcept;

/// A loopback listen address: "127.0.0.1:PORT", "localhost:PORT" or
/// "[::1]:PORT" with PORT 1..65535. Empty on anything else.
struct listen_address {
  std::string host; ///< "127.0.0.1" or "::1"
  std::uint16_t port = 0;
};
std::optional<listen_address> parse_listen(std::string_view text);

} // namespace kvlane::daemon
