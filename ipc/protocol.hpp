#pragma once

// kvlane::ipc::proto — the client protocol's vocabulary: wire constants, error
// codes and the naming rules both sides check.
//
// Problem it solves: the daemon and the client library (which must not pull
// CAF) need one definition of every byte that crosses the process boundary,
// and the daemon must survive anything a hostile client writes. The codecs
// built on this vocabulary are pure functions: every decoder takes raw bytes
// and returns either a typed value or a protocol_error naming what was wrong;
// nothing throws, nothing reads outside the span, nothing keeps state. That
// makes them a fuzzer's entry points (tests/fuzz/protocol_fuzz.cpp).
//
// Two kinds of messages (byte-by-byte layout: docs/protocol.md):
//  - control messages (ipc/control_codec.hpp): SOCK_SEQPACKET datagrams on
//    <runtime_dir>/kvlane.sock: a 12-byte header {magic, version, type, body_len}
//    and a body;
//  - records (ipc/record_codec.hpp): fixed 256-byte little-endian slots in the
//    shared-memory rings: a 16-byte header {type, version, body_len, reserved,
//    request_id} and a body.
// All multi-byte fields are little-endian and read/written with std::memcpy of
// fixed-width integers (the supported targets are little-endian; a static_assert
// in ipc/wire_fields.hpp enforces it). Text fields are UTF-8 (ipc/utf8.hpp).
// The daemon's per-connection state (duplicate ids, chunk order, prompt limits)
// is daemon/request_tracker.hpp.
//
// Threading: everything is reentrant.

#include "common/model_name.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlane::ipc::proto {

inline constexpr std::uint32_t magic = 0x4E4C564B; ///< "KVLN" as bytes on the wire
inline constexpr std::uint16_t version = 3;
inline constexpr std::size_t record_size = 256;
inline constexpr std::size_t record_header_size = 16;
inline constexpr std::size_t record_body_size = record_size - record_header_size;
inline constexpr std::size_t control_header_size = 12;
inline constexpr std::size_t max_control_size = 1024; ///< largest datagram either side sends
inline constexpr std::size_t max_name = 64;           ///< client, model and session names, bytes
inline constexpr std::size_t max_stop_tokens = 16;
inline constexpr std::size_t submit_inline_capacity = 72;
inline constexpr std::size_t chunk_capacity = 232;
inline constexpr std::size_t tokens_capacity = 224; ///< 4 * tokens + text bytes
inline constexpr std::size_t end_message_capacity = 198;
inline constexpr std::size_t error_message_capacity = 234;
inline constexpr std::size_t control_message_capacity = 512;
inline constexpr std::uint32_t max_max_tokens = 1u << 20;
inline constexpr std::uint32_t max_top_k = 1u << 20;
inline constexpr float max_temperature = 100.0f;
static_assert(max_name == max_model_name, "model names travel in max_name bytes");

using record_bytes = std::array<std::byte, record_size>;

/// Error codes on the wire (u32). Stable: append only.
enum class errc : std::uint32_t {
  ok = 0,
  bad_message = 1,       ///< a malformed control message or record
  version_mismatch = 2,  ///< hello with another protocol version
  not_allowed = 3,       ///< the peer's user/group is not in [clients] allow_*
  server_busy = 4,       ///< [clients] max_clients reached
  unknown_model = 5,
  invalid_request = 6,   ///< the engine refused the request's parameters
  too_long = 7,          ///< prompt + max_tokens exceed the context, or the prompt the byte limit
  shutting_down = 8,
  duplicate_request = 9, ///< a submit reused the id of a live request
  too_many_requests = 10, ///< more live requests than [clients] max_requests
  ring_corrupt = 11,     ///< the client wrote impossible ring indices
  backlog = 12,          ///< the client stopped reading its events
  internal = 13,
  timeout = 14,          ///< no hello within [clients] hello_timeout_ms
  model_failed = 15,     ///< the model's scheduler stopped; it serves nothing any more
  busy = 16,             ///< an admission limit is reached; the message says when to retry
  session_busy = 17,     ///< the session's last turn is still running, or all of the user's are
};
std::string_view to_string(errc e) noexcept;

/// True for a u32 that names an errc value.
constexpr bool known_errc(std::uint32_t v) noexcept {
  return v <= static_cast<std::uint32_t>(errc::session_busy);
}

struct protocol_error {
  errc code = errc::bad_message;
  std::string message;
};

/// Client names: 1..64 bytes of UTF-8 without control characters. (Model
/// names follow kvlane::valid_model_name, common/model_name.hpp.)
bool valid_client_name(std::string_view name) noexcept;

/// Session (conversation) names follow the model-name rule: 1..64 bytes of
/// [A-Za-z0-9._-].
constexpr bool valid_session_name(std::string_view name) noexcept {
  return valid_model_name(name);
}

} // namespace kvlane::ipc::proto
