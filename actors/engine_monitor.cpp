#include "actors/engine_monitor.hpp"

#include "actors/exception_handler.hpp"
#include "common/logging.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

namespace kvlane::actors {

namespace {

using refresh_atom = caf::atom_constant<caf::atom("refresh")>;

struct engine_monitor_state {
  static inline const char* name = "engine_monitor";
  std::vector<monitored_model> models;
  std::chrono::milliseconds refresh{};
  failure_hook on_failure;
};

caf::behavior engine_monitor_behavior(caf::stateful_actor<engine_monitor_state>* self,
                                      std::vector<monitored_model> models,
                                      std::chrono::milliseconds refresh, failure_hook on_failure) {
  auto& st = self->state;
  st.models = std::move(models);
  st.refresh = refresh;
  st.on_failure = std::move(on_failure);
  for (auto& m : st.models)
    self->monitor(m.scheduler);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& m : self->state.models) {
      if (m.scheduler.address() != dm.source)
        continue;
      // A session of the model may have marked it failed first (same
      // reason); the failure is reported here, once, either way.
      auto why = scheduler_stopped(dm.reason);
      m.health->mark_failed(why);
      if (m.reported)
        return;
      m.reported = true;
      logging::get("scheduler")->critical("model '{}' failed: {}; its streams end with an error "
                                          "and it accepts no requests",
                                          m.name, why);
      if (self->state.on_failure)
        self->state.on_failure(m.name, why);
      return;
    }
  });
  self->set_exception_handler(log_and_stop("scheduler", spdlog::level::err, "engine monitor"));
  self->send(self, refresh_atom::value);
  return {
    [self](refresh_atom) {
      auto& s = self->state;
      for (auto& m : s.models) {
        if (m.health->failed())
          continue;
        self->request(m.scheduler, s.refresh * 10, stats_atom::value)
          .then([h = m.health](scheduler_stats_ptr p) { h->set_stats(*p); },
                [](caf::error&) {}); // a dead scheduler is reported by the down handler
      }
      self->delayed_send(self, s.refresh, refresh_atom::value);
    },
  };
}

} // namespace

caf::actor spawn_engine_monitor(caf::actor_system& sys, std::vector<monitored_model> models,
                                std::chrono::milliseconds refresh, failure_hook on_failure) {
  return sys.spawn(engine_monitor_behavior, std::move(models), refresh, std::move(on_failure));
}

} // namespace kvlane::actors
