#pragma once

// kvlane::actors::engine_monitor — watches every model's scheduler for the
// engine and keeps each model's figures fresh.
//
// Problem it solves: without it a scheduler that quits (a lane error, an
// exception; its two lanes are linked to it, so a lane's death ends it too)
// is noticed by no one. The monitor holds a CAF monitor on every scheduler:
// on an abnormal exit it marks the model failed in its model_health (the
// engine then refuses submits to it) and calls `on_failure`. Every session
// monitors its own model's scheduler as well, so each live stream of the
// model ends with an error that names the cause (actors/session).
//
// It also asks every live scheduler for its stats every `refresh` and stores
// the answer in model_health, so callers that must not block (the client
// loop's stats replies) read figures without a round trip.
//
// Threading: a CAF event-based actor. `on_failure` runs on its worker thread
// and must not block. The engine stops the monitor before it stops the
// schedulers, so an orderly shutdown is not reported as a failure.

#include "actors/model_health.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

struct monitored_model {
  std::string name;
  caf::actor scheduler;
  std::shared_ptr<model_health> health;
  bool reported = false; ///< the monitor has logged its failure and called the hook
};

/// Called once per failed model with its name and why it failed.
using failure_hook = std::function<void(std::string_view model, std::string_view why)>;

caf::actor spawn_engine_monitor(caf::actor_system& sys, std::vector<monitored_model> models,
                                std::chrono::milliseconds refresh, failure_hook on_failure = {});

} // namespace kvlane::actors
