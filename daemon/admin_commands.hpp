#pragma once

// kvlane::daemon::admin_commands — the admin protocol's commands, without the
// socket: one request line of JSON in, one response line of JSON out.
//
// Requests are objects with a "cmd" string and command-specific fields;
// responses are objects; errors are {"error": {"code", "message"}} with codes
// bad_json, bad_request, unknown_command, missing_field, bad_field, not_found,
// failed. The full protocol is in docs/admin.md.
//
// Threading: handle() is called by the admin server's thread; the services it
// calls (engine, metrics, reload) are thread-safe.

#include "actors/engine.hpp"
#include "daemon/metrics.hpp"
#include "daemon/session_table.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon {

/// What a reload changed, and what would need a restart.
struct reload_report {
  std::vector<std::string> applied;
  std::vector<std::string> needs_restart;
  std::string error; ///< non-empty: the new config was rejected and nothing changed
};

/// The daemon services the commands act on.
struct admin_services {
  actors::engine* engine = nullptr;
  const daemon::metrics* registry = nullptr; ///< request outcomes and latencies
  std::string version;
  std::string mode;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  session_table* sessions = nullptr;                          ///< optional: clients' conversations
  std::function<std::uint64_t()> clients_connected;          ///< optional
  std::function<reload_report()> reload;                     ///< optional
  std::function<actors::slo_targets()> slo; ///< optional: [scheduler.slo] as now in force
  std::function<double()> refuse_over;       ///< optional: [scheduler.slo] refuse_over, the same
  std::function<std::string(std::string_view, std::string_view)> set_log_level; ///< error or ""
  /// [[http.keys]] names in order: key i's reuse scope is owner actors::http_owner + 1 + i.
  std::vector<std::string> http_keys;
};

/// Handles one request line; returns one response line (without the newline).
std::string handle_admin_request(std::string_view line, const admin_services& services);

/// The Prometheus text of everything the daemon reports (also served over HTTP).
std::string render_metrics(const admin_services& services);

} // namespace kvlane::daemon
