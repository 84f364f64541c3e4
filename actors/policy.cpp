#include "actors/policy.hpp"

namespace kvlane::actors {

std::string_view to_string(scheduler_mode m) noexcept {
  switch (m) {
    case scheduler_mode::fcfs: return "fcfs";
    case scheduler_mode::sync: return "sync";
    case scheduler_mode::overlap: return "overlap";
    case scheduler_mode::ideal: return "ideal";
  }
  return "unknown";
}

} // namespace kvlane::actors
