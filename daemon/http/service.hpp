#pragma once

// kvlane::daemon::http::service — what the API handlers share.
//
// Built once by the server; handlers run on the HTTP thread and read it. The
// engine's methods are thread-safe; `ready` reports whether the daemon admits
// requests (false while starting or draining). `models` (the configuration)
// does not change after start-up, so render jobs may read it too; which models
// are loaded does change: a handler that needs one holds a lease (with_model).

#include "actors/model_registry.hpp"
#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "daemon/http/errors.hpp"
#include "daemon/http/post_gate.hpp"
#include "daemon/http/render_pool.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::actors {
class engine;
struct model_entry;
} // namespace kvlane::actors

namespace kvlane::daemon {
class admission;
} // namespace kvlane::daemon

namespace kvlane::daemon::http {

struct service {
  actors::engine* engine = nullptr;
  std::vector<model_section> models; ///< the configured models (chat_format, ...)
  std::function<bool()> ready;
  /// [clients] admission, shared with the apps' gateway; null = no limits (tests).
  std::shared_ptr<admission> admit;
  std::shared_ptr<post_gate> gate;       ///< posts to the HTTP thread
  std::uint64_t next_request = 1;        ///< HTTP thread only
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();

  /// The engine's model named `name` (an Ollama ":latest" tag is ignored) if it
  /// is loaded now, or nullptr.
  std::shared_ptr<const actors::model_entry> find_model(std::string_view name) const;
  /// Calls `then` on the HTTP thread with a lease on model `name` once it is
  /// loaded (loading it first), or with the error to answer: 404 for a model
  /// that is not configured, 503 when it does not load (naming the cause).
  using model_ready = std::function<void(expected<actors::lease_ptr, api_error>)>;
  void with_model(std::string_view name, std::optional<actors::keep_alive> keep, model_ready then);
  /// The configured models' names, for an error message.
  std::string model_names() const;
  /// Its configuration (same lookup).
  const model_section* find_model_config(std::string_view name) const;

  /// The threads that render and tokenize prompts (started on first use;
  /// HTTP thread). Declared last: its workers are joined before anything
  /// above goes.
  render_pool& renders();
  std::unique_ptr<render_pool> render_workers;
};

} // namespace kvlane::daemon::http
