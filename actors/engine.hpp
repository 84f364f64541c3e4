#pragma once

// kvlane::actors::engine — the in-process face of the serving core.
//
// Owns the shared snapshot store and, per configured model, its backend and
// scheduler actor (which owns the model's two lanes). submit() validates a
// request synchronously — unknown model, bad sampling parameters, a request
// larger than the model's context, an empty prompt — and on success returns
// the request's token_stream at once; nothing else is disturbed by a bad
// request. Used by tests, benchmarks and (later) the IPC gateway.
//
// Threading: submit(), stats() and store_stats() are thread-safe. shutdown()
// and the destructor run on the owner's thread; after shutdown() every
// submit() fails with shutting_down.

#include "actors/scheduler.hpp"
#include "actors/token_stream.hpp"
#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

struct submit_request {
  std::string model;
  std::string client = "local";
  priority_class priority = priority_class::interactive;
  std::string prompt_text;            ///< encoded with the model's tokenizer, after BOS
  std::vector<token_id> prompt_tokens; ///< used as is when prompt_text is empty
  sampling_params sampling;
  bool stop_at_eos = true; ///< add the model's EOS token to the stop tokens
};

enum class submit_errc : std::uint8_t { unknown_model, invalid_request, too_long, shutting_down };
std::string_view to_string(submit_errc e) noexcept;

struct submit_error {
  submit_errc code = submit_errc::invalid_request;
  std::string message;
};

struct model_entry {
  std::string name;
  std::uint32_t index = 0;
  backends::backend_info info;
  std::shared_ptr<backends::backend> backend;
  caf::actor scheduler;
};

class engine {
public:
  /// Creates the store and one backend + scheduler per model. In mode
  /// `ideal` every model must use the sim, whose transfer times are zeroed.
  static expected<std::unique_ptr<engine>, std::string> create(caf::actor_system& sys,
                                                               const daemon::config& cfg,
                                                               scheduler_observer observer = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Submits a request whose tokens go to a token_stream (returned).
  expected<std::shared_ptr<token_stream>, submit_error> submit(submit_request req);

  /// Submits a request whose tokens go to `sink` (called from an actor
  /// thread; must not block). Returns the sequence id, for cancel().
  expected<seq_id, submit_error> submit(submit_request req, std::shared_ptr<stream_sink> sink);

  /// Cancels a sequence of `model`; unknown ids are ignored. Returns at once.
  void cancel(std::string_view model, seq_id id);

  /// Ends every stream (reason cancelled, `why`), frees slots and snapshots,
  /// and stops the schedulers and lanes. Idempotent.
  void shutdown(std::string_view why = "daemon shutting down");

  expected<scheduler_stats, std::string> stats(std::string_view model,
                                               std::chrono::milliseconds timeout
                                               = std::chrono::seconds(5)) const;
  ipc::store_stats store_stats() const;

  const std::vector<model_entry>& models() const noexcept { return models_; }
  const model_entry* find_model(std::string_view name) const noexcept;
  ipc::snapshot_store& store() noexcept { return *store_; }

private:
  engine(caf::actor_system& sys, std::shared_ptr<ipc::snapshot_store> store);

  /// Validates `req` into a submission for the returned model.
  expected<std::pair<const model_entry*, submission_ptr>, submit_error>
  prepare(submit_request& req);

  caf::actor_system& sys_;
  std::shared_ptr<ipc::snapshot_store> store_;
  std::vector<model_entry> models_;
  std::atomic<seq_id> next_id_{1};
  std::atomic<bool> stopped_{false};
};

} // namespace kvlane::actors
