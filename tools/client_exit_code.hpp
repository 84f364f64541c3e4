#pragma once

// kvlane::tools::client_exit_code — the exit code of `kvlane run` and `kvlane
// chat` for a client library error (documented in the usage text). Included
// only by the tools' sources: the client library is private to them.

#include <kvlane/client.hpp>

namespace kvlane::tools {

inline int client_exit_code(client::errc e) {
  switch (e) {
    case client::errc::daemon_not_running: return 69; // EX_UNAVAILABLE
    case client::errc::permission_denied:
    case client::errc::not_allowed: return 77;        // EX_NOPERM
    case client::errc::version_mismatch:
    case client::errc::protocol_error: return 76;     // EX_PROTOCOL
    case client::errc::timeout: return 75;            // EX_TEMPFAIL
    case client::errc::invalid_argument: return 64;
    default: return 1;
  }
}

} // namespace kvlane::tools
