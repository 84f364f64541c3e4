#pragma once

// kvlane::actors::log_and_stop — the exception handler every kvlane actor
// installs: an exception escaping a message handler is logged through spdlog
// (CAF's own logging is compiled out in Debian's build) and ends the actor with
// caf::sec::runtime_error carrying "<who>: <what()>", so that its links and
// monitors learn of it and why.

#include <caf/scheduled_actor.hpp>
#include <spdlog/common.h>

#include <string>

namespace kvlane::actors {

/// Logs "<who>: <what()>" (or "<who>: unknown exception") at `level` on the
/// subsystem logger `logger`, looked up when an exception arrives.
caf::scheduled_actor::exception_handler log_and_stop(std::string logger,
                                                     spdlog::level::level_enum level,
                                                     std::string who);

} // namespace kvlane::actors
