#pragma once

// kvlane::ipc::proto — the client protocol's wire format, as pure functions.
//
// Problem it solves: the daemon and the client library (which must not pull
// CAF) need one definition of every byte that crosses the process boundary,
// and the daemon must survive anything a hostile client writes. Every decoder
// here takes raw bytes and returns either a typed value or a protocol_error
// naming what was wrong; nothing throws, nothing reads outside the span, and
// the functions keep no state except request_tracker, which is a plain value.
// That makes them a fuzzer's entry points (tests/fuzz/protocol_fuzz.cpp).
//
// Two kinds of messages (byte-by-byte layout: docs/protocol.md):
//  - control messages: SOCK_SEQPACKET datagrams on <runtime_dir>/kvlane.sock:
//    a 12-byte header {magic, version, type, body_len} and a body;
//  - records: fixed 256-byte little-endian slots in the shared-memory rings:
//    a 16-byte header {type, version, body_len, reserved, request_id} and a body.
// All multi-byte fields are little-endian and read/written with std::memcpy of
// fixed-width integers (the supported targets are little-endian; a static_assert
// in protocol.cpp enforces it).
//
// Threading: everything is reentrant; request_tracker is single-threaded.

#include "common/expected.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace kvlane::ipc::proto {

inline constexpr std::uint32_t magic = 0x4E4C564B; ///< "KVLN" as bytes on the wire
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t record_size = 256;
inline constexpr std::size_t record_header_size = 16;
inline constexpr std::size_t record_body_size = record_size - record_header_size;
inline constexpr std::size_t control_header_size = 12;
inline constexpr std::size_t max_control_size = 1024; ///< largest datagram either side sends
inline constexpr std::size_t max_name = 64;           ///< client and model names, bytes
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
};
std::string_view to_string(errc e) noexcept;

struct protocol_error {
  errc code = errc::bad_message;
  std::string message;
};

// -- control messages ---------------------------------------------------------

enum class control_type : std::uint16_t {
  hello = 1,
  welcome = 2,
  refuse = 3,
  stats_request = 4,
  stats_reply = 5,
  fatal = 6,
};

struct hello_msg {
  std::string client_name; ///< 1..64 bytes of printable UTF-8
};

/// Ring geometry and limits; sent with the fds [memfd, submit eventfd, events eventfd].
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

using control_message = std::variant<hello_msg, welcome_msg, refuse_msg, stats_request_msg,
                                     stats_reply_msg, fatal_msg>;

std::vector<std::byte> encode(const hello_msg& m);
std::vector<std::byte> encode(const welcome_msg& m);
std::vector<std::byte> encode(const refuse_msg& m);
std::vector<std::byte> encode(const fatal_msg& m);
std::vector<std::byte> encode(const stats_request_msg& m);
std::vector<std::byte> encode(const stats_reply_msg& m);

/// Decodes one datagram. A wrong protocol version is reported as
/// errc::version_mismatch (the header layout never changes between versions).
expected<control_message, protocol_error> decode_control(std::span<const std::byte> datagram);

// -- records ----------------------------------------------------------------

enum class record_type : std::uint8_t {
  submit = 1,
  submit_chunk = 2,
  cancel = 3,
  tokens = 0x11,
  end = 0x12,
  error = 0x13,
};

enum class prompt_kind : std::uint8_t { text = 0, tokens = 1 };
enum class priority : std::uint8_t { interactive = 0, batch = 1 };

/// How a stream ended, on the wire. backlog: cancelled because the client did
/// not read its events (see docs/protocol.md, "Backpressure").
enum class end_reason : std::uint8_t { length = 0, stop = 1, cancelled = 2, error = 3, backlog = 4 };
std::string_view to_string(end_reason r) noexcept;

struct submit_rec {
  std::uint64_t request_id = 0;
  prompt_kind kind = prompt_kind::text;
  priority prio = priority::interactive;
  bool stop_at_eos = true;
  std::string model; ///< empty: the daemon's default model
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::uint32_t top_k = 0;
  std::uint32_t max_tokens = 256;
  std::uint64_t seed = 0;
  std::vector<std::uint32_t> stop_tokens;
  std::uint32_t prompt_bytes = 0; ///< total; text bytes or 4 * token count
  std::string inline_data;        ///< the first bytes of the prompt (<= 72)
};

struct chunk_rec {
  std::uint64_t request_id = 0;
  std::uint32_t offset = 0;
  std::string data; ///< 1..232 bytes
};

struct cancel_rec {
  std::uint64_t request_id = 0;
};

struct tokens_rec {
  std::uint64_t request_id = 0;
  std::uint64_t daemon_time_ns = 0; ///< CLOCK_MONOTONIC when the daemon received the tokens
  std::vector<std::uint32_t> tokens;
  std::string text; ///< decoded text that became complete with these tokens
};

struct end_rec {
  std::uint64_t request_id = 0;
  end_reason reason = end_reason::length;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated_tokens = 0;
  std::uint32_t preemptions = 0;
  std::uint64_t ttft_us = 0;
  std::uint64_t tpot_us = 0;
  std::uint64_t e2e_us = 0;
  std::string message;
};

struct error_rec {
  std::uint64_t request_id = 0; ///< 0: the connection, not one request
  errc code = errc::internal;
  std::string message;
};

using record = std::variant<submit_rec, chunk_rec, cancel_rec, tokens_rec, end_rec, error_rec>;

/// Encoders write a whole record (unused bytes zero). They expect values that
/// decode would accept and truncate text fields at a UTF-8 boundary to fit;
/// tokens_rec must fit (see pack_tokens).
void encode(const submit_rec& r, std::span<std::byte, record_size> out);
void encode(const chunk_rec& r, std::span<std::byte, record_size> out);
void encode(const cancel_rec& r, std::span<std::byte, record_size> out);
void encode(const tokens_rec& r, std::span<std::byte, record_size> out);
void encode(const end_rec& r, std::span<std::byte, record_size> out);
void encode(const error_rec& r, std::span<std::byte, record_size> out);

/// Decodes and validates one record: type, version, reserved bytes, lengths,
/// UTF-8 of text fields, numeric ranges. Cross-record rules (duplicate ids,
/// chunk order) are request_tracker's.
expected<record, protocol_error> decode_record(std::span<const std::byte, record_size> in);

/// Splits one batch of tokens and its text into tokens records (text is cut at
/// UTF-8 boundaries). Returns how many records were appended to `out`.
std::size_t pack_tokens(std::uint64_t request_id, std::uint64_t daemon_time_ns,
                        std::span<const std::uint32_t> tokens, std::string_view text,
                        std::vector<record_bytes>& out);

/// Splits a submit whose prompt is `prompt` (text bytes, or the tokens as
/// little-endian u32) into a submit record and the chunks that follow it.
/// `head` carries everything but prompt_bytes and inline_data.
void pack_submit(const submit_rec& head, std::string_view prompt, std::vector<record_bytes>& out);

// -- cross-record validation ---------------------------------------------------

/// A submit whose prompt has fully arrived.
struct complete_submit {
  submit_rec head;        ///< inline_data cleared
  std::string prompt;     ///< text (validated UTF-8) or little-endian tokens
  std::vector<std::uint32_t> tokens; ///< decoded when head.kind == tokens
};

/// Tracks one connection's requests: rejects duplicate live ids, chunks out of
/// order, overlapping or past the announced length, prompts over the limit,
/// more than 2 * max_prompt_bytes of prompts being received at once, and more
/// live requests than allowed. A request is live from its submit until
/// finished() (the daemon calls it when the stream's end was queued) or until
/// it is cancelled while its prompt is still arriving.
class request_tracker {
public:
  request_tracker(std::uint32_t max_requests, std::uint32_t max_prompt_bytes)
    : max_requests_(max_requests), max_prompt_bytes_(max_prompt_bytes) {}

  /// `limit` bounds this request's prompt bytes (e.g. 4 * max_context for
  /// token prompts); the tracker also applies max_prompt_bytes. Returns the
  /// complete request when the prompt fit inline. Errors with code too_long
  /// concern only this request (its remaining chunks are checked and dropped);
  /// every other error is a protocol violation.
  expected<std::optional<complete_submit>, protocol_error> on_submit(submit_rec r,
                                                                     std::uint32_t limit);
  expected<std::optional<complete_submit>, protocol_error> on_chunk(chunk_rec c);
  /// True when the request was still assembling (now forgotten): nothing was
  /// submitted, so the caller only reports the end.
  bool on_cancel(std::uint64_t request_id);
  void finished(std::uint64_t request_id) { live_.erase(request_id); }
  bool live(std::uint64_t request_id) const { return live_.count(request_id) != 0; }
  std::size_t live_count() const noexcept { return live_.size(); }

private:
  struct pending {
    submit_rec head;
    std::string data;
    std::size_t received = 0;
    bool discard = false; ///< over the limit: chunks are checked, then dropped
  };
  expected<std::optional<complete_submit>, protocol_error> finish(std::uint64_t id, pending p);

  std::uint32_t max_requests_;
  std::uint32_t max_prompt_bytes_;
  std::unordered_map<std::uint64_t, bool> live_; ///< id -> still assembling
  std::unordered_map<std::uint64_t, pending> assembling_;
  std::uint64_t assembling_bytes_ = 0; ///< announced bytes of the prompts being received
};

// -- UTF-8 ----------------------------------------------------------------------

bool valid_utf8(std::string_view s) noexcept;

/// The longest prefix of `s` of at most `max` bytes that does not split a
/// UTF-8 sequence.
std::size_t utf8_prefix(std::string_view s, std::size_t max) noexcept;

/// Turns a byte stream that arrives in pieces into valid UTF-8: complete
/// sequences pass, an incomplete sequence at the end of a piece is held back
/// until the next, and invalid bytes become U+FFFD. Concatenating feed()
/// results and flush() gives the same text as one feed() of the whole stream
/// followed by flush().
class utf8_stream {
public:
  std::string feed(std::string_view bytes);
  std::string flush();

private:
  std::string held_;
};

/// Model names: 1..64 bytes of [A-Za-z0-9._-] (the config's rule).
bool valid_model_name(std::string_view name) noexcept;
/// Client names: 1..64 bytes of UTF-8 without control characters.
bool valid_client_name(std::string_view name) noexcept;

} // namespace kvlane::ipc::proto
