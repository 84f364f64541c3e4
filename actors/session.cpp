#include "actors/session.hpp"

#include "actors/model_health.hpp"

#include "actors/exception_handler.hpp"
#include "common/elapsed.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <fmt/format.h>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;

struct session_state {
  static inline const char* name = "session";
  std::shared_ptr<stream_sink> sink;
  end_hook on_end;
  clock::time_point submitted;
  clock::time_point first_token;
  clock::time_point last_token;
  std::uint64_t delivered = 0;
  /// The session's own handle. The scheduler holds the only other one, and a
  /// scheduler that dies drops it: without this the session would be
  /// destroyed as unreachable before it handles the scheduler's down message.
  /// Released with the state when the session quits.
  caf::actor keep_alive;
  /// The monitored scheduler. CAF 0.17 never removes a monitor whose observer
  /// has quit: the scheduler would keep a weak reference to every finished
  /// session, which holds that session's memory for the model's lifetime.
  caf::actor_addr scheduler;
};

/// Ends the stream: completes the timings, tells the sink and the hook, quits.
void finish(caf::stateful_actor<session_state>* self, stream_end end) {
  auto& st = self->state;
  auto now = clock::now();
  end.e2e_ms = ms_between(st.submitted, now);
  if (st.delivered > 0) {
    end.ttft_ms = ms_between(st.submitted, st.first_token);
    if (st.delivered > 1)
      end.tpot_ms = ms_between(st.first_token, st.last_token) / double(st.delivered - 1);
  }
  st.sink->on_end(end);
  if (st.on_end)
    st.on_end(end);
  self->demonitor(st.scheduler);
  self->quit();
}

/// Hands tokens (and, when the request asked, their log probabilities) to the sink.
void deliver(caf::stateful_actor<session_state>* self, std::span<const token_id> tokens,
             std::span<const token_logprobs> logprobs) {
  auto& st = self->state;
  auto now = clock::now();
  if (st.delivered == 0)
    st.first_token = now;
  st.last_token = now;
  st.delivered += tokens.size();
  if (!logprobs.empty())
    st.sink->on_logprobs(logprobs);
  st.sink->on_tokens(tokens);
}

caf::behavior session_behavior(caf::stateful_actor<session_state>* self,
                               std::shared_ptr<stream_sink> sink, clock::time_point submitted,
                               session_owner owner, end_hook on_end) {
  self->state.sink = std::move(sink);
  self->state.on_end = std::move(on_end);
  self->state.submitted = submitted;
  // The scheduler sends this stream's tokens and its end. Should it stop
  // first (a crash, or a lane's, which is linked to it), nobody else would
  // end the stream: do it here. Messages from one sender arrive in order, so
  // an end the scheduler sent before it stopped is handled first.
  self->state.keep_alive = caf::actor_cast<caf::actor>(self);
  self->state.scheduler = owner.scheduler.address();
  self->monitor(owner.scheduler);
  self->set_down_handler([self, model = std::move(owner.model),
                           health = std::move(owner.health)](caf::down_msg& dm) {
    stream_end end;
    end.generated_tokens = static_cast<std::uint32_t>(self->state.delivered);
    if (dm.reason == caf::exit_reason::user_shutdown || dm.reason == caf::exit_reason::normal) {
      end.reason = end_reason::cancelled;
      end.message = fmt::format("model '{}' stopped", model);
    } else {
      // Before the app sees this end: its next submit must be refused, not
      // sent to the dead scheduler (the monitor may learn of it later).
      if (health)
        health->mark_failed(scheduler_stopped(dm.reason));
      end.reason = end_reason::error;
      end.message = fmt::format("model '{}' failed: its scheduler stopped ({})", model,
                                caf::to_string(dm.reason));
    }
    finish(self, std::move(end));
  });
  self->set_exception_handler(log_and_stop("scheduler", spdlog::level::err, "session"));
  return {
    [self](tokens_atom, const std::vector<token_id>& tokens) { deliver(self, tokens, {}); },
    [self](tokens_atom, const std::vector<token_id>& tokens,
           const std::vector<token_logprobs>& logprobs) { deliver(self, tokens, logprobs); },
    [self](end_atom, stream_end end) { finish(self, std::move(end)); },
  };
}

} // namespace

caf::actor spawn_session(caf::actor_system& sys, std::shared_ptr<stream_sink> sink,
                         clock::time_point submitted, session_owner owner, end_hook on_end) {
  return sys.spawn(session_behavior, std::move(sink), submitted, std::move(owner),
                   std::move(on_end));
}

} // namespace kvlane::actors
