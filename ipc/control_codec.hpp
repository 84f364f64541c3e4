#pragma once

// kvlane::ipc::proto control messages: the SOCK_SEQPACKET datagrams of the
// handshake (hello, welcome, refuse), the stats query, the session drop and
// the daemon's fatal notice, with their encoders and the validating decoder.
//
// Layout: a 12-byte header {u32 magic, u16 version, u16 type, u32 body_len}
// and a body (docs/protocol.md, "Control messages"). Pure functions; the
// decoder never throws and never reads outside the datagram.

#include "common/expected.hpp"
#include "ipc/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace kvlane::ipc::proto {

// -- control messages ---------------------------------------------------------

enum class control_type : std::uint16_t {
  hello = 1,
  welcome = 2,
  refuse = 3,
  stats_request = 4,
  stats_reply = 5,
  fatal = 6,
  session_drop = 7,
  session_dropped = 8,
};

struct hello_msg {
  std::string client_name; ///< 1..64 bytes of printable UTF-8
};

/// Ring geometry and limits; sent with the fds [memfd, submit eventfd, events wake-up socket].
struct welcome_msg {
  std::uint32_t record_size = proto::record_size;
  std::uint64_t client_id = 0;
  std::uint64_t memfd_size = 0;
  std::uint64_t submit_offset = 0;
  std::uint32_t submit_capacity = 0; ///< records, a power of two
  std::uint64_t events_offset = 0;
  std::uint32_t events_capacity = 0;
  std::uint32_t spin_us = 0;         ///< how long readers should spin before sleeping
  std::uint32_t max_requests = 0;    ///< live requests per client
  std::uint32_t max_prompt_bytes = 0;
  std::string default_model;         ///< used when a submit names no model
};

/// refuse: the handshake failed. fatal: the daemon is ending this connection.
struct refuse_msg {
  errc code = errc::bad_message;
  std::uint64_t request_id = 0; ///< fatal only: the offending request, or 0
  std::string message;
};
struct fatal_msg : refuse_msg {};

struct stats_request_msg {};

struct stats_reply_msg {
  std::uint32_t clients = 0;           ///< connected now
  std::uint64_t clients_total = 0;     ///< accepted since start
  std::uint64_t requests_live = 0;     ///< gateway view: submitted, not yet ended
  std::uint64_t engine_live = 0;       ///< all models: submitted - finished - cancelled - failed
  std::uint64_t store_used_bytes = 0;
  std::uint64_t store_snapshots = 0;
  std::uint64_t records_in = 0;
  std::uint64_t records_out = 0;
  std::uint64_t violations = 0;        ///< connections ended for a protocol violation
  std::uint64_t backlog_cancels = 0;   ///< requests cancelled because their client stopped reading
  std::uint64_t disconnect_cancels = 0; ///< requests cancelled because their client went away
};

/// Forget one of the connecting user's sessions (its history); answered by
/// session_dropped.
struct session_drop_msg {
  std::string model;   ///< empty: the daemon's default model
  std::string session; ///< 1..64 bytes of [A-Za-z0-9._-]
};

struct session_dropped_msg {
  bool existed = false; ///< false: the user had no such session (nothing changed)
};

using control_message = std::variant<hello_msg, welcome_msg, refuse_msg, stats_request_msg,
                                     stats_reply_msg, fatal_msg, session_drop_msg,
                                     session_dropped_msg>;

std::vector<std::byte> encode(const hello_msg& m);
std::vector<std::byte> encode(const welcome_msg& m);
std::vector<std::byte> encode(const refuse_msg& m);
std::vector<std::byte> encode(const fatal_msg& m);
std::vector<std::byte> encode(const stats_request_msg& m);
std::vector<std::byte> encode(const stats_reply_msg& m);
std::vector<std::byte> encode(const session_drop_msg& m);
std::vector<std::byte> encode(const session_dropped_msg& m);

/// Decodes one datagram. A wrong protocol version is reported as
/// errc::version_mismatch (the header layout never changes between versions).
expected<control_message, protocol_error> decode_control(std::span<const std::byte> datagram);

} // namespace kvlane::ipc::proto
