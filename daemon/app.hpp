#pragma once

// kvlane::daemon::app — the daemon's lifecycle.
//
// Builds the subsystems in order (runtime directory, actor system, the
// engine: snapshot store, model backends and their schedulers; then the client
// gateway), registering each one's stop action as soon as it has started, so
// shutdown runs them in reverse (Seastar's rule). run() waits for SIGTERM /
// SIGINT (blocked in every thread before any is started, taken with sigwait
// in the calling thread) and then stops everything within
// config.daemon.shutdown_timeout; a shutdown that overruns the bound is
// abandoned with exit_code::runtime_failure.
//
// Threading: create(), run() and stop() run on the main thread only.

#include "common/expected.hpp"
#include "daemon/admin_commands.hpp"
#include "daemon/config.hpp"
#include "daemon/notifier.hpp"
#include "daemon/session_table.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace kvlane::actors {
class engine;
} // namespace kvlane::actors

namespace kvlane::daemon {

namespace http {
class server;
} // namespace http

class admin_server;
class gateway;
class metrics;
class metrics_http;

/// Process exit codes of kvlaned.
enum class exit_code : int {
  ok = 0,
  check_failed = 1,    ///< --check: the config is invalid
  usage = 64,          ///< bad command line (EX_USAGE)
  config_error = 78,   ///< the config is invalid at start-up (EX_CONFIG)
  runtime_failure = 70, ///< start-up or shutdown failed, or a model failed (EX_SOFTWARE)
};

class app {
public:
  ~app();
  app(const app&) = delete;
  app& operator=(const app&) = delete;

  /// Starts every subsystem. On failure, what was started is stopped again and
  /// the error message says which subsystem failed and why. `config_path` is
  /// re-read by reload().
  static expected<std::unique_ptr<app>, std::string> create(config cfg,
                                                            std::string config_path = {});

  /// Serves until shutdown. SIGHUP reloads. The first SIGTERM/SIGINT stops
  /// admitting and lets running sequences finish for daemon.shutdown_grace,
  /// then cancels the rest and stops; a second one cuts the grace short.
  /// Pings the systemd watchdog while no backend call hangs. Returns the
  /// process exit code.
  exit_code run(const sigset_t& signals);

  /// Re-reads the config file and applies what can change live: log levels,
  /// scheduler knobs, shutdown bounds, admin allow lists. Says what else
  /// changed and needs a restart. Thread-safe against run().
  reload_report reload();

  /// Stops every started subsystem in reverse order; idempotent. Returns
  /// false when the shutdown bound was exceeded.
  bool stop();

  const config& cfg() const noexcept { return cfg_; }
  const std::string& runtime_dir() const noexcept { return runtime_dir_; }
  actors::engine& engine() noexcept { return *engine_; }
  /// Path of the client control socket.
  std::string client_socket_path() const { return runtime_dir_ + "/kvlane.sock"; }
  /// Path of the admin socket.
  std::string admin_socket_path() const { return runtime_dir_ + "/kvlane-admin.sock"; }

private:
  explicit app(config cfg);

  void on_stop(std::string what, std::function<void()> fn);
  std::string summary() const;
  void tick(std::chrono::steady_clock::time_point now);
  /// Stops admitting and gives running sequences the shutdown grace.
  void begin_drain(std::chrono::steady_clock::time_point now, std::string_view why);

  struct drain_state {
    bool active = false;
    std::chrono::steady_clock::time_point deadline;
  };

  config cfg_;
  std::string config_path_;
  std::mutex reload_mutex_; ///< one reload at a time (SIGHUP and the admin socket)
  std::string runtime_dir_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  notifier notify_;
  std::optional<std::chrono::microseconds> watchdog_;
  bool watchdog_starved_ = false;
  bool model_failed_ = false; ///< a model failed: drain, then exit 70 (no watchdog pings)
  std::chrono::steady_clock::time_point last_status_;
  drain_state drain_;
  std::unique_ptr<metrics> metrics_;
  std::unique_ptr<admin_server> admin_;
  std::unique_ptr<metrics_http> http_;
  admin_services services_;
  std::unique_ptr<caf::actor_system_config> actor_cfg_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<actors::engine> engine_;
  std::shared_ptr<session_table> sessions_; ///< clients' conversations (gateway, admin)
  std::unique_ptr<gateway> gateway_; ///< client socket <runtime_dir>/kvlane.sock
  std::unique_ptr<http::server> api_; ///< the HTTP API ([http] listen)
  std::atomic<bool> serving_{false};  ///< READY=1 was sent (GET /health)
  std::vector<std::pair<std::string, std::function<void()>>> stops_;
};

/// Resolves config.daemon.runtime_dir's empty default (see config.hpp).
std::string resolve_runtime_dir(const daemon_section& d);

/// kvlaned's main: command line, config, app, run.
int run_main(int argc, char** argv);

} // namespace kvlane::daemon
