#include "backends/sim_options.hpp"

namespace kvlane::backends {

std::string_view to_string(transfer_overlap o) noexcept {
  switch (o) {
    case transfer_overlap::full: return "full";
    case transfer_overlap::none: return "none";
    case transfer_overlap::shared: return "shared";
  }
  return "unknown";
}

} // namespace kvlane::backends
