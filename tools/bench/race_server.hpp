#pragma once

// kvlane::tools::bench — race_server: one server of a race, as a child process.
//
// Problem it solves: a race starts kvlaned and llama-server one after the
// other on the same machine, each on the same GGUF and settings, and must
// leave nothing running behind it, whether the run completes, fails or is
// interrupted. start() picks a free loopback port, writes kvlaned's
// configuration into a fresh temporary directory (race_server_config; its
// runtime directory inside it), starts the program (common/child_process:
// killed if this process dies, its output drained and kept for error
// messages) and waits until GET /health answers 200 — both servers answer 503
// while they load the model. stop() sends SIGTERM, then SIGKILL if it lingers;
// the destructor stops a server still running.
//
// Threading: one thread at a time; start and stop from the thread that
// outlives the server (child_process kills children when their starting
// thread exits).

#include "common/child_process.hpp"
#include "common/expected.hpp"
#include "common/temp_dir.hpp"
#include "tools/bench/completion_request.hpp"
#include "tools/bench/http_client.hpp"
#include "tools/bench/race_server_config.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvlane::tools::bench {

struct race_server_options {
  server_kind kind = server_kind::kvlane;
  std::string exe;              ///< kvlaned or llama-server
  race_settings settings;
  std::string kvlane_config;    ///< kvlane: a kvlane.toml to adapt instead of the generated one
  std::string log_level = "warn"; ///< kvlaned's loggers
  std::chrono::milliseconds ready_timeout{600000}; ///< loading a model can take minutes
  std::function<void(std::string_view)> progress;
};

/// A free TCP port on 127.0.0.1 (bound, read, released), or an error.
expected<std::uint16_t, std::string> free_loopback_port();

class race_server {
public:
  /// Starts the server and waits for its /health to answer 200.
  static expected<std::unique_ptr<race_server>, std::string> start(const race_server_options& o);

  ~race_server();
  race_server(const race_server&) = delete;
  race_server& operator=(const race_server&) = delete;

  const http_endpoint& endpoint() const noexcept { return endpoint_; }
  server_kind kind() const noexcept { return kind_; }
  /// Seconds from the start to /health answering 200.
  double ready_s() const noexcept { return ready_s_; }
  /// kvlaned's admin socket (empty for llama-server).
  std::string admin_socket() const;
  /// The configuration kvlaned was started with (empty for llama-server).
  const std::string& config_text() const noexcept { return config_text_; }

  /// Whether the process still runs.
  bool running();
  /// SIGTERM, SIGKILL after a grace; the exit status, or an error if it had to be killed.
  expected<int, std::string> stop();
  /// The last lines it printed, indented, for messages.
  std::string tail(std::size_t lines = 20) const;

private:
  race_server(server_kind kind, std::optional<temp_dir> dir, child_process child,
              http_endpoint ep);

  server_kind kind_;
  std::optional<temp_dir> dir_;
  child_process child_;
  http_endpoint endpoint_;
  double ready_s_ = 0;
  std::string config_text_;
  bool stopped_ = false;
};

} // namespace kvlane::tools::bench
