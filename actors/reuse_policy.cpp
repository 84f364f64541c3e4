#include "actors/reuse_policy.hpp"

namespace kvlane::actors {

std::string_view to_string(reuse_mode m) noexcept {
  switch (m) {
    case reuse_mode::off: return "off";
    case reuse_mode::slot: return "slot";
    case reuse_mode::store: return "store";
  }
  return "unknown";
}

std::string_view to_string(reuse_scope s) noexcept {
  switch (s) {
    case reuse_scope::user: return "user";
    case reuse_scope::all: return "all";
  }
  return "unknown";
}

} // namespace kvlane::actors
