#pragma once

// kvlane::daemon::http access checks: API keys and CORS origins.
//
// Pure functions. The key comparison takes the same time whatever the first
// differing byte is (and leaks only the configured key's length), so the key
// cannot be guessed byte by byte from response times.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

/// True when `a` and `b` are equal; the time depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

/// The token of an Authorization header "Bearer <token>" (scheme case-insensitive,
/// surrounding spaces dropped); nothing for another scheme or none.
std::optional<std::string_view> bearer_token(std::string_view authorization) noexcept;

/// True when `authorization` is "Bearer <key>" (scheme case-insensitive).
bool bearer_matches(std::string_view authorization, std::string_view key) noexcept;

/// `origin` when it is one of `allowed` (exact match), else nothing.
std::optional<std::string> allowed_origin(std::string_view origin,
                                          const std::vector<std::string>& allowed);

/// Whether a request's Host header names this server, so that a page on another site
/// cannot reach it by DNS rebinding (a name of the attacker's resolving to this address).
/// Allowed, case-insensitively and whatever the port: a loopback name (localhost,
/// *.localhost, 127.0.0.1, [::1]), the listen address's host, any IP literal (a browser
/// sends one only to a page served from that very address), and `allowed` (host names
/// from [http] allowed_hosts; "*" allows every host, for a reverse proxy that checks).
/// An absent Host (HTTP/1.0 tools) is allowed: browsers always send one.
bool host_allowed(std::string_view host_header, std::string_view listen_host,
                  const std::vector<std::string>& allowed);

/// Whether a client-sent header list (Access-Control-Request-Headers) is safe
/// to echo back: header-name characters, commas and spaces only.
bool valid_header_list(std::string_view list) noexcept;

} // namespace kvlane::daemon::http
