#pragma once

// kvlane::actors::session — one actor per sequence: its stream to the consumer.
//
// The scheduler owns what the step loop needs between two steps (tokens,
// sampler, KV location) so that sampling costs no message round trip; the
// session owns everything the consumer sees: token delivery in order, the
// request's timings (time to first token, time per output token, end to end)
// and the end of the stream. The consumer side is a stream_sink: the
// in-process token_stream (actors/token_stream.hpp), or a client connection's
// sink that writes the tokens as records into its events ring
// (daemon/client_session.cpp).
//
// Threading: a CAF event-based actor. The sink is called from the actor's
// worker thread, one call at a time, and must not block.

#include "actors/messages.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <span>

namespace kvlane::actors {

class stream_sink {
public:
  virtual ~stream_sink() = default;
  virtual void on_tokens(std::span<const token_id> tokens) = 0;
  /// Only for a request with sampling_params::logprobs: called just before
  /// on_tokens() with one entry per token of that call, in order.
  virtual void on_logprobs(std::span<const token_logprobs> /*logprobs*/) {}
  virtual void on_end(const stream_end& end) = 0;
};

/// Called once per request when its stream ends, with the completed timings.
using end_hook = std::function<void(const stream_end&)>;

/// The scheduler a session depends on: if it stops before the stream ended,
/// the session ends the stream itself (reason error, naming the model and
/// why its scheduler stopped; reason cancelled for an orderly stop).
class model_health;

struct session_owner {
  std::string model;
  caf::actor scheduler;
  /// The model's health: marked failed before the stream ends when the
  /// scheduler stops abnormally (null: nothing to mark).
  std::shared_ptr<model_health> health;
};

/// Spawns a session delivering to `sink`; timings count from `submitted`.
/// `on_end` (optional) runs after the sink's on_end.
caf::actor spawn_session(caf::actor_system& sys, std::shared_ptr<stream_sink> sink,
                         std::chrono::steady_clock::time_point submitted, session_owner owner,
                         end_hook on_end = {});

} // namespace kvlane::actors
