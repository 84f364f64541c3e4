#pragma once

// kvlane::actors::model_registry — which configured models are loaded, and
// loading and unloading them as Ollama does (docs/architecture.md, "Model
// lifecycle").
//
// Problem it solves: models load on first use and unload once idle for their
// keep_alive; [models] max_loaded bounds how many are resident, and a load
// that needs room first unloads the least recently used idle model. A model
// with running requests is never unloaded: a load that needs its room waits.
// Requests for a model that is loading wait for it (bounded by
// [models] load_timeout_ms); a failed load fails every waiting request with the
// model's name and the cause. The decisions are model_residency's pure
// functions; this class applies them.
//
// Leases: whoever uses a loaded model holds a model_lease (a running request
// holds one until its stream ends; a caller preparing a request holds one
// meanwhile). A model is idle when it has no lease; its keep_alive clock starts
// when the last lease goes, with the keep_alive the last acquirer gave
// (Ollama: each request sets it; a request that does not say uses the model's
// configured one).
//
// Threading: every public method is thread-safe and never blocks on a load,
// except unload() and acquire_wait() which wait (bounded). Loads and unloads
// run one at a time on the registry's worker thread (a plain thread: loading a
// backend blocks for seconds). acquire()'s callback runs on the caller's
// thread when the model is loaded already, else on the worker (or in stop());
// it must not block. Leases may outlive the registry (they share its core).

#include "actors/keep_alive.hpp"
#include "actors/model_residency.hpp"
#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

struct model_entry;

namespace detail {
struct registry_core;
}

/// One user's hold on a loaded model: the model stays loaded while it lives.
class model_lease {
public:
  model_lease(std::shared_ptr<detail::registry_core> core, std::size_t index,
              std::shared_ptr<const model_entry> entry);
  ~model_lease();
  model_lease(const model_lease&) = delete;
  model_lease& operator=(const model_lease&) = delete;

  const model_entry& model() const noexcept { return *entry_; }
  const std::shared_ptr<const model_entry>& entry() const noexcept { return entry_; }

private:
  std::shared_ptr<detail::registry_core> core_;
  std::size_t index_ = 0;
  std::shared_ptr<const model_entry> entry_;
};
using lease_ptr = std::shared_ptr<model_lease>;

/// What the registry calls to load and unload; both block, on its worker.
struct model_loader {
  std::function<expected<std::shared_ptr<model_entry>, std::string>(std::size_t index)> load;
  std::function<void(const model_entry&)> unload;
};

/// One configured model as status, ps and /api/ps show it.
struct model_status {
  std::string name;
  residency state = residency::unloaded;
  std::uint32_t users = 0;   ///< leases: running requests and callers preparing one
  std::uint32_t waiting = 0; ///< requests waiting for it to load
  keep_alive keep = keep_alive::pinned(); ///< what applies once it is idle
  /// When it unloads if nothing uses it again: loaded and idle with a finite
  /// keep_alive (in use: the keep_alive from now). None: pinned or not loaded.
  std::optional<std::chrono::system_clock::time_point> expires_at;
  std::string last_error; ///< why its last load failed (cleared by a load)
  std::shared_ptr<const model_entry> entry; ///< loaded: the instance
};

class model_registry {
public:
  using clock = std::chrono::steady_clock;
  using acquired = expected<lease_ptr, std::string>;
  using acquire_callback = std::function<void(acquired)>;

  struct options {
    std::uint32_t max_loaded = 0;
    std::chrono::milliseconds load_timeout{std::chrono::minutes(5)};
  };

  /// `names[i]` and `defaults[i]` (its configured keep_alive) describe model i.
  model_registry(std::vector<std::string> names, std::vector<keep_alive> defaults, options opts,
                 model_loader loader);
  ~model_registry();
  model_registry(const model_registry&) = delete;
  model_registry& operator=(const model_registry&) = delete;

  /// Before start(): model `index` was loaded by the caller (load_at_start).
  void adopt(std::size_t index, std::shared_ptr<model_entry> entry);
  /// Starts the worker thread.
  void start();
  /// Fails every waiting request (`why`), stops the worker (after the load or
  /// unload it is running) and returns the loaded instances, for the caller to
  /// stop. Idempotent.
  std::vector<std::shared_ptr<const model_entry>> stop(const std::string& why);

  std::optional<std::size_t> index_of(std::string_view name) const noexcept;
  const std::vector<std::string>& names() const noexcept { return names_; }

  /// The instance of a loaded model (null otherwise). No lease: for a caller
  /// that only reads figures or sends a message.
  std::shared_ptr<const model_entry> loaded(std::size_t index) const;
  std::vector<std::shared_ptr<const model_entry>> loaded_models() const;

  /// A lease on model `index` if it is loaded now (null otherwise; nothing loads).
  lease_ptr try_acquire(std::size_t index, std::optional<keep_alive> keep);

  /// Calls `done` with a lease once model `index` is loaded, loading it (and
  /// making room) first if needed; or with an error naming the model and the
  /// cause (a failed load, load_timeout passed, the daemon stopping).
  /// `keep`: the requester's keep_alive (none: the model's configured one).
  void acquire(std::size_t index, std::optional<keep_alive> keep, acquire_callback done);

  /// acquire(), waiting for the answer (at most load_timeout and a margin).
  acquired acquire_wait(std::size_t index, std::optional<keep_alive> keep);

  /// Unloads model `index` now if nothing uses it and waits until it is
  /// unloaded; a model in use unloads when its last request ends (its
  /// keep_alive becomes 0). Returns what happened, for the admin.
  expected<std::string, std::string> unload(std::size_t index);

  std::vector<model_status> statuses() const;

private:
  void run();

  std::vector<std::string> names_;
  std::shared_ptr<detail::registry_core> core_;
};

} // namespace kvlane::actors
