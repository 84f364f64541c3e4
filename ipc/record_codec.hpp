#pragma once

// kvlane::ipc::proto records: the fixed 256-byte slots of the shared-memory
// rings (submit, submit_chunk and cancel from the client; tokens, end and
// error from the daemon), with their encoders, the validating decoder and the
// packers that split a prompt or a batch of tokens into records.
//
// Layout: a 16-byte header {u8 type, u8 version, u16 body_len, u32 reserved,
// u64 request_id} and a body (docs/protocol.md, "Records"). Pure functions;
// the decoder never throws and never reads outside the record. Rules that
// span records (duplicate ids, chunk order, prompt limits) are the daemon's
// request_tracker (daemon/request_tracker.hpp).

#include "common/expected.hpp"
#include "ipc/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvlane::ipc::proto {

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
  std::string session; ///< empty: stateless; else the conversation this turn extends
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::uint32_t top_k = 0;
  std::uint32_t max_tokens = 256;
  std::uint64_t seed = 0;
  std::vector<std::uint32_t> stop_tokens;
  std::uint32_t prompt_bytes = 0; ///< total; text bytes or 4 * token count
  std::string inline_data;        ///< the first bytes of the prompt (<= 72 - session size)
};

/// Prompt bytes a submit record carries inline: the inline area holds the
/// session name first, then the prompt.
constexpr std::size_t submit_inline_room(std::size_t session_bytes) noexcept {
  return submit_inline_capacity - session_bytes;
}

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
/// chunk order) are daemon::request_tracker's.
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

} // namespace kvlane::ipc::proto
