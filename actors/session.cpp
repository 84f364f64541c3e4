#include "actors/session.hpp"

#include "actors/exception_handler.hpp"
#include "common/elapsed.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

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
};

caf::behavior session_behavior(caf::stateful_actor<session_state>* self,
                               std::shared_ptr<stream_sink> sink, clock::time_point submitted,
                               end_hook on_end) {
  self->state.sink = std::move(sink);
  self->state.on_end = std::move(on_end);
  self->state.submitted = submitted;
  self->set_exception_handler(log_and_stop("scheduler", spdlog::level::err, "session"));
  return {
    [self](tokens_atom, const std::vector<token_id>& tokens) {
      auto& st = self->state;
      auto now = clock::now();
      if (st.delivered == 0)
        st.first_token = now;
      st.last_token = now;
      st.delivered += tokens.size();
      st.sink->on_tokens(tokens);
    },
    [self](end_atom, stream_end end) {
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
      self->quit();
    },
  };
}

} // namespace

caf::actor spawn_session(caf::actor_system& sys, std::shared_ptr<stream_sink> sink,
                         clock::time_point submitted, end_hook on_end) {
  return sys.spawn(session_behavior, std::move(sink), submitted, std::move(on_end));
}

} // namespace kvlane::actors
