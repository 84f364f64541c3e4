#include "daemon/http/access.hpp"

#include <algorithm>
#include <cctype>

namespace kvlane::daemon::http {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_ipv4(std::string_view s) noexcept {
  int parts = 0;
  while (true) {
    std::size_t digits = 0;
    unsigned value = 0;
    while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits])) && digits < 4) {
      value = value * 10 + static_cast<unsigned>(s[digits] - '0');
      ++digits;
    }
    if (digits == 0 || digits > 3 || value > 255)
      return false;
    s.remove_prefix(digits);
    if (++parts == 4)
      return s.empty();
    if (s.empty() || s.front() != '.')
      return false;
    s.remove_prefix(1);
  }
}

bool is_bracketed_ipv6(std::string_view s) noexcept {
  if (s.size() < 4 || s.front() != '[' || s.back() != ']')
    return false;
  s = s.substr(1, s.size() - 2);
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  });
}

} // namespace

bool host_allowed(std::string_view host_header, std::string_view listen_host,
                  const std::vector<std::string>& allowed) {
  if (host_header.empty())
    return true;
  // The host without its port: "[v6]:port", "[v6]", "name:port", "name".
  std::string_view host = host_header;
  if (host.front() == '[') {
    const auto close = host.find(']');
    if (close == std::string_view::npos)
      return false;
    host = host.substr(0, close + 1);
  } else if (const auto colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  const auto h = lower(host);
  if (h == "localhost" || h.ends_with(".localhost") || is_ipv4(h) || is_bracketed_ipv6(h))
    return true;
  const auto listen = lower(listen_host);
  if (h == listen || h == "[" + listen + "]")
    return true;
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& a) { return a == "*" || lower(a) == h; });
}

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

std::optional<std::string_view> bearer_token(std::string_view authorization) noexcept {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size())
    return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i])
      return std::nullopt;
  auto token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ')
    token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ')
    token.remove_suffix(1);
  return token;
}

bool bearer_matches(std::string_view authorization, std::string_view key) noexcept {
  const auto token = bearer_token(authorization);
  return token && constant_time_equal(*token, key);
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
