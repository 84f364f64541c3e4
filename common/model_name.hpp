#pragma once

// kvlane::valid_model_name — the one rule for model names, shared by the
// configuration ([[model]] name) and the client protocol (a submit's model).
// Header-only: the client library compiles the protocol sources without
// linking any kvlane library.

#include <cstddef>
#include <string_view>

namespace kvlane {

inline constexpr std::size_t max_model_name = 64; ///< bytes

/// Model names: 1..64 bytes of [A-Za-z0-9._-].
constexpr bool valid_model_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_model_name)
    return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '.' || c == '_' || c == '-';
    if (!ok)
      return false;
  }
  return true;
}

} // namespace kvlane
