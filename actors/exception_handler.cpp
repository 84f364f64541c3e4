#include "actors/exception_handler.hpp"

#include "common/logging.hpp"

#include <exception>
#include <utility>

namespace kvlane::actors {

caf::scheduled_actor::exception_handler log_and_stop(std::string logger,
                                                     spdlog::level::level_enum level,
                                                     std::string who) {
  return [logger = std::move(logger), level, who = std::move(who)](
           caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      logging::get(logger)->log(level, "{}: {}", who, x.what());
      // The text travels in the exit reason, so that monitors can say why.
      return caf::make_error(caf::sec::runtime_error, who + ": " + x.what());
    } catch (...) {
      logging::get(logger)->log(level, "{}: unknown exception", who);
    }
    return caf::sec::runtime_error;
  };
}

} // namespace kvlane::actors
