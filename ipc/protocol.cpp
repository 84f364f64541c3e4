#include "ipc/protocol.hpp"

#include "ipc/utf8.hpp"

#include <algorithm>

namespace kvlane::ipc::proto {

std::string_view to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::bad_message: return "bad_message";
    case errc::version_mismatch: return "version_mismatch";
    case errc::not_allowed: return "not_allowed";
    case errc::server_busy: return "server_busy";
    case errc::unknown_model: return "unknown_model";
    case errc::invalid_request: return "invalid_request";
    case errc::too_long: return "too_long";
    case errc::shutting_down: return "shutting_down";
    case errc::duplicate_request: return "duplicate_request";
    case errc::too_many_requests: return "too_many_requests";
    case errc::ring_corrupt: return "ring_corrupt";
    case errc::backlog: return "backlog";
    case errc::internal: return "internal";
    case errc::timeout: return "timeout";
    case errc::model_failed: return "model_failed";
    case errc::busy: return "busy";
    case errc::session_busy: return "session_busy";
  }
  return "unknown";
}

bool valid_client_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_name || !valid_utf8(name))
    return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

} // namespace kvlane::ipc::proto
