#pragma once

// kvlane::tools::bench — restart_daemon: one kvlaned of a restart benchmark
// run, started under the service host, with the connections that drive it.
//
// Problem it solves: a restart run starts kvlaned twice on one store and one
// notify socket; each start needs the same things: its configuration written
// into a runtime directory of its own, a start the way systemd makes it
// (service_host: NOTIFY_SOCKET, the fd store handed over or not), READY=1 on
// the notify socket within a bound, the client library's two connections
// (interactive, batch) and an admin connection. A daemon's scheduler counters
// start at zero with each start and each load of a model, so the run reads
// them per segment (`counters`): the admin `status` (scheduler and reuse
// figures) and `metrics` (transfers), then adds the segments up.
//
// Threading: one thread drives it; the connections' callbacks run on their
// reader threads.

#include "actors/scheduler_report.hpp"
#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "tools/admin_connection.hpp"
#include "tools/bench/service_host.hpp"

#include <kvlane/client.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace kvlane::tools::bench {

class restart_daemon {
public:
  using clock = std::chrono::steady_clock;

  struct options {
    std::string kvlaned_path;
    std::string dir;          ///< the run's directory: run<N>/, kvlane-<N>.toml, kvlaned-<N>.log
    int number = 1;           ///< which start of the run (1, 2)
    bool pass_store = true;   ///< hand it the fd store's descriptors
    std::chrono::milliseconds ready_timeout{30000};
  };

  /// Writes `cfg` (runtime_dir set to <dir>/run<N>) and starts kvlaned on
  /// `notify`; returns once READY=1 came and every connection is open. The
  /// error names what failed, with the daemon's last log lines.
  static expected<restart_daemon, std::string> start(const options& opts, daemon::config cfg,
                                                     notify_socket& notify);

  restart_daemon(restart_daemon&&) noexcept = default;
  restart_daemon& operator=(restart_daemon&&) noexcept = default;
  ~restart_daemon();

  /// [0] interactive, [1] batch.
  client::connection& connection(bool interactive) { return *conns_[interactive ? 0 : 1]; }
  admin_connection& admin() { return *admin_; }
  clock::time_point ready_at() const noexcept { return ready_at_; }
  /// Process start to READY=1, wall ms.
  double start_to_ready_ms() const noexcept;
  const std::string& log_path() const noexcept { return log_; }

  /// `model`'s scheduler counters since it was loaded, with its reuse
  /// figures (status) and dumps and loads (metrics).
  expected<actors::scheduler_stats, std::string> counters(const std::string& model);

  /// The daemon's metrics text (Prometheus).
  expected<std::string, std::string> metrics();

  /// The state `status` shows for `model` (loaded, loading, unloaded, ...).
  expected<std::string, std::string> model_state(const std::string& model);

  /// Closes the connections (joining their reader threads: no callback runs
  /// after this), sends SIGTERM and waits for the exit within `timeout`.
  /// Fails unless it exits 0. The notify socket must be read meanwhile (a
  /// serve_thread): a stopping daemon keeps sending to it.
  expected<void, std::string> stop(std::chrono::milliseconds timeout);

  /// The last lines of its log, indented, for error messages.
  std::string tail() const;

private:
  restart_daemon() = default;

  std::optional<service> svc_;
  std::unique_ptr<client::connection> conns_[2];
  std::optional<admin_connection> admin_;
  std::string log_;
  clock::time_point ready_at_;
};

/// Adds the counters of `s` (a later segment of the same model) to `into`;
/// the gauges become those of `s`.
void add_counters(actors::scheduler_stats& into, const actors::scheduler_stats& s);

} // namespace kvlane::tools::bench
