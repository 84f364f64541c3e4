#include "daemon/http/access.hpp"

#include <algorithm>
#include <cctype>

namespace kvlane::daemon::http {

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Always walks all of `b` (the secret), whatever `a` holds.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    diff |= static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char sink = diff;
  return sink == 0;
}

bool bearer_matches(std::string_view authorization, std::string_view key) noexcept {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size())
    return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i])
      return false;
  auto token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ')
    token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ')
    token.remove_suffix(1);
  return constant_time_equal(token, key);
}

std::optional<std::string> allowed_origin(std::string_view origin,
                                          const std::vector<std::string>& allowed) {
  if (origin.empty())
    return std::nullopt;
  if (std::find(allowed.begin(), allowed.end(), origin) == allowed.end())
    return std::nullopt;
  return std::string{origin};
}

bool valid_header_list(std::string_view list) noexcept {
  return list.size() <= 1024 && std::all_of(list.begin(), list.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ','
                  || c == ' ';
         });
}

} // namespace kvlane::daemon::http
