#pragma once

// kvlane::actors::engine — the in-process face of the serving core.
//
// Owns the shared snapshot store and, per loaded model, its backend and
// scheduler actor (which owns the model's two lanes, actors/model_instance).
// Models load on first use and unload after their keep_alive, at most
// [models] max_loaded at once (actors/model_registry). submit() validates a
// request synchronously — draining, unknown model, bad sampling parameters, a
// request larger than the model's context, an empty prompt — and on success
// returns at once, with the request's token_stream or, given a stream_sink,
// its sequence id; nothing else is disturbed by a bad request. Used by the
// daemon (each client connection submits through it, the admin socket lists,
// cancels and reloads through it), by tests and by benchmarks.
//
// A request for a model that is not loaded waits for it to load: the sink form
// of submit() returns at once and submits once the model is loaded (or ends the
// stream with the load's error); the token_stream form blocks meanwhile.
// Every running request holds a lease on its model until its stream ends, so a
// model with running requests never unloads.
//
// Threading: every public method but shutdown() and the destructor is thread-safe.
// shutdown() and the destructor run on the owner's thread; after shutdown() every submit()
// fails with shutting_down.

#include "actors/disk_lane.hpp"
#include "actors/engine_config.hpp"
#include "actors/engine_monitor.hpp"
#include "actors/grammar_vocabulary.hpp"
#include "actors/model_health.hpp"
#include "actors/model_instance.hpp"
#include "actors/model_registry.hpp"
#include "actors/output_constraint.hpp"
#include "actors/scheduler.hpp"
#include "actors/store_restart.hpp"
#include "actors/token_stream.hpp"
#include "common/expected.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

struct submit_request {
  std::string model;
  std::string client = "local";
  /// The unit of the per-client round robin (docs/scheduling.md, "Rank"); empty: the
  /// client. An HTTP identity sets it, so that its requests share one turn whatever
  /// names they show under.
  std::string fairness_unit;
  /// Who may reuse this request's KV (reuse scope "user"): the app's peer uid
  /// for IPC requests; in-process callers pick their own.
  std::uint64_t owner = 0;
  /// The client session (conversation name) this request is a turn of, empty
  /// if none: its retained KV is dropped with the session.
  std::string session_name;
  priority_class priority = priority_class::interactive;
  std::string prompt_text;            ///< encoded with the model's tokenizer, after BOS
  std::vector<token_id> prompt_tokens; ///< used as is when prompt_text is empty
  sampling_params sampling;
  bool stop_at_eos = true; ///< add the model's stop tokens (its tokenizer's) to the stop tokens
  /// The grammar the output follows (structured output, tool calls); null: free text.
  std::shared_ptr<const output_constraint> constraint;
  /// How long the model stays loaded after this request (Ollama's keep_alive);
  /// none: the model's configured keep_alive.
  std::optional<keep_alive> keep;
};

enum class submit_errc : std::uint8_t {
  unknown_model,
  invalid_request,
  too_long,
  draining,      ///< not admitting new requests (kvlane drain, SIGTERM grace)
  shutting_down,
  model_failed,  ///< the model's scheduler stopped; the model serves nothing any more
  /// Refused at the door: predicted to get a slot later than [scheduler.slo] refuse_over
  /// allows (actors/door_forecast); retry_after_ms says when it is predicted to start.
  busy,
};
std::string_view to_string(submit_errc e) noexcept;

struct submit_error {
  submit_errc code = submit_errc::invalid_request;
  std::string message;
  /// busy: how long until the request was predicted to get a slot, in ms.
  std::uint64_t retry_after_ms = 0;
};

/// One finished request, for metrics and the completion log line.
struct completion {
  std::string_view model;
  std::string_view client;
  seq_id id = 0;
  priority_class priority = priority_class::interactive;
  const stream_end* end = nullptr;
};

/// Called from an actor thread when a request ends; must not block.
using completion_hook = std::function<void(const completion&)>;

/// A model that failed, and why.
struct model_failure {
  std::string model;
  std::string reason;
};

class engine {
public:
  /// Creates the store and loads the models with load_at_start. In mode
  /// `free-transfer` every model must use the sim, whose transfer times are zeroed.
  /// `on_failure` (optional) is called once per model that fails, on an
  /// actor thread; it must not block. `handoff`: an earlier daemon's store
  /// (actors/store_restart), taken back when usable.
  static expected<std::unique_ptr<engine>, std::string> create(caf::actor_system& sys,
                                                               const engine_config& cfg,
                                                               scheduler_observer observer = {},
                                                               completion_hook on_complete = {},
                                                               failure_hook on_failure = {},
                                                               store_handoff handoff = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Submits a request whose tokens go to a token_stream (returned); waits
  /// for the model to load if it is not loaded.
  expected<std::shared_ptr<token_stream>, submit_error> submit(submit_request req);

  /// Submits a request whose tokens go to `sink` (called from an actor
  /// thread, or the model registry's when the model fails to load; must not
  /// block). Returns the sequence id, for cancel(). For a model that is not
  /// loaded it returns at once: the request is checked and submitted once the
  /// model has loaded, and a request that fails then ends its stream with
  /// reason error and the cause.
  expected<seq_id, submit_error> submit(submit_request req, std::shared_ptr<stream_sink> sink);

  /// Cancels a sequence of `model`; unknown ids are ignored. Returns at once.
  void cancel(std::string_view model, seq_id id);

  /// Ends a sequence of `model` as if a stop token had been sampled after its
  /// first `generated` generated tokens: the stream ends with reason stop and
  /// generated_tokens = `generated`, it counts as finished (not cancelled),
  /// and the KV of the prompt and of the first `keep` (at most `generated`)
  /// generated tokens is retained for reuse like any finished request's.
  /// For a consumer that matches stop strings on the text: tokens the
  /// scheduler made past `generated` meanwhile are dropped. Ignored if the
  /// sequence already ended (by itself, or cancelled). Returns at once.
  void stop(std::string_view model, seq_id id, std::uint32_t generated, std::uint32_t keep);

  /// Cancels a sequence of any model. Returns false if no model has it.
  bool cancel(seq_id id, std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Stops (false) or resumes (true) admitting new requests; running ones go on.
  void set_admitting(bool admitting) noexcept { admitting_ = admitting; }
  bool admitting() const noexcept { return admitting_; }

  /// Applies new scheduler knobs to every model (the mode stays). Returns
  /// false if a scheduler did not confirm within `timeout`.
  bool update_policy(const actors::scheduler_policy& policy,
                     std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Applies new reuse knobs to every model and the retained share to the
  /// store. Returns false if a scheduler did not confirm within `timeout`.
  bool update_reuse(const actors::reuse_policy& reuse,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Describes the first backend call that has been running longer than
  /// `limit` (a hung device), or returns an empty string.
  std::string stuck_call(std::chrono::nanoseconds limit) const;

  /// Every live sequence of every model, by id.
  std::vector<sequence_info> list(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  /// The retained entries of `model` (every model when empty), by model then
  /// id. Fails on an unknown model or one that does not answer in `timeout`.
  expected<std::vector<retained_info>, std::string>
  list_retained(std::string_view model = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  /// Drops the retained entries of `model` that `req` selects and frees their
  /// slots and snapshots. Fails on an unknown or failed model, or no reply.
  expected<retained_drop_result, std::string>
  drop_retained(std::string_view model, const retained_drop_request& req,
                std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Drops, without waiting, the retained KV that turns of `user`'s client
  /// session `session` left in `model` (a dropped session). Requests
  /// submitted after this call never reuse it. Nothing on an unknown model.
  void forget_session(std::string_view model, std::uint64_t user, std::string session);

  /// Ends every stream (reason cancelled, `why`), frees slots and snapshots,
  /// and stops the schedulers and lanes. Idempotent.
  void shutdown(std::string_view why = "daemon shutting down");

  /// Asks the model's scheduler for its figures. A failed model answers at
  /// once with its last known figures, `failed` set and `failure` saying why.
  expected<scheduler_stats, std::string> stats(std::string_view model,
                                               std::chrono::milliseconds timeout
                                               = std::chrono::seconds(5)) const;

  /// The model's figures as of the monitor's last refresh (every
  /// `stats_refresh`), without a round trip: for callers that must not
  /// block. Nullopt before the first refresh.
  std::optional<scheduler_stats> cached_stats(std::string_view model) const;

  /// Every model that failed (its scheduler or a lane stopped), in model order.
  std::vector<model_failure> failures() const;

  /// How often the monitor refreshes cached_stats().
  static constexpr std::chrono::milliseconds stats_refresh{100};
  ipc::store_stats store_stats() const;

  // -- models and their lifecycle (docs/architecture.md, "Model lifecycle") -------

  /// Every configured model (loadable), in config order.
  const std::vector<model_config>& configured() const noexcept { return models_; }
  bool is_configured(std::string_view name) const noexcept;
  /// The loaded models' instances, in config order.
  std::vector<std::shared_ptr<const model_entry>> loaded_models() const;
  /// The instance of `name` if it is loaded now (nothing loads).
  std::shared_ptr<const model_entry> find_model(std::string_view name) const;
  /// Calls `done` with a lease on `name` once it is loaded (loading it first
  /// if needed), or an error naming the model and the cause. See
  /// model_registry::acquire for the threads `done` runs on.
  void acquire(std::string_view name, std::optional<keep_alive> keep,
               model_registry::acquire_callback done);
  /// Loads `name` (waits, bounded by [models] load_timeout_ms); it then stays
  /// loaded for `keep` (none: its configured keep_alive). Returns what happened.
  expected<std::string, std::string> load(std::string_view name, std::optional<keep_alive> keep);
  /// Unloads `name` now, or when its running requests end (its warm KV goes
  /// to the store first). Returns what happened.
  expected<std::string, std::string> unload(std::string_view name);
  /// Every configured model with its state, keep_alive and expiry.
  std::vector<model_status> model_statuses() const;

  ipc::snapshot_store& store() noexcept { return *store_; }

private:
  engine(caf::actor_system& sys, std::shared_ptr<ipc::snapshot_store> store);

  end_hook end_hook_for(const model_entry& m, const submission& sub, lease_ptr lease) const;

  /// Validates `req` into a submission for `m`.
  expected<submission_ptr, submit_error> prepare(submit_request& req, const model_entry& m,
                                                seq_id preset_id);
  /// Checks before anything loads: shutting down, unknown model, draining.
  std::optional<submit_error> refuse(const submit_request& req) const;
  /// Prepares and submits `req` on its leased, loaded model; `id`: preset (deferred) or 0.
  expected<seq_id, submit_error> submit_loaded(submit_request req, std::shared_ptr<stream_sink> sink,
                                               lease_ptr lease, seq_id id);
  engine_config current_config() const;
  /// "unknown model 'x' (configured: ...)".
  std::string unknown_model(std::string_view name) const;

  caf::actor_system& sys_;
  std::shared_ptr<ipc::snapshot_store> store_;
  std::shared_ptr<disk_lane> disk_; ///< the store's disk tier ([store.disk]); null: none
  std::vector<model_config> models_;
  mutable std::mutex cfg_mu_;
  engine_config cfg_; ///< what a model loads with (policy and reuse as last updated)
  instance_context ctx_;
  std::unique_ptr<model_registry> registry_;
  std::mutex deferred_mu_;
  std::unordered_set<seq_id> deferred_;  ///< submitted while their model loads
  std::unordered_set<seq_id> cancelled_; ///< of those, cancelled before they ran
  std::atomic<seq_id> next_id_{1};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> admitting_{true};
  completion_hook on_complete_;
};

} // namespace kvlane::actors
