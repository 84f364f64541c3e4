#include "ipc/record_codec.hpp"

#include "ipc/utf8.hpp"
#include "ipc/wire_fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvlane::ipc::proto {

using namespace wire;

namespace {

std::string_view type_name(record_type t) {
  switch (t) {
    case record_type::submit: return "submit";
    case record_type::submit_chunk: return "submit_chunk";
    case record_type::cancel: return "cancel";
    case record_type::tokens: return "tokens";
    case record_type::end: return "end";
    case record_type::error: return "error";
  }
  return "unknown";
}

// -- record layouts (offsets from the start of the record) --------------------
// Header: 0 u8 type, 1 u8 version, 2 u16 body_len, 4 u32 reserved, 8 u64 request_id.
namespace submit_at {
constexpr std::size_t kind = 16, prio = 17, stop_at_eos = 18, model_len = 19, stop_count = 20,
                      session_len = 21, reserved = 22, temperature = 24, top_p = 28, top_k = 32,
                      max_tokens = 36, seed = 40, prompt_bytes = 48, inline_bytes = 52, model = 56, stops = 120,
                      inline_data = 184;
static_assert(model + max_name == stops);
static_assert(stops + 4 * max_stop_tokens == inline_data);
static_assert(inline_data + submit_inline_capacity == record_size);
} // namespace submit_at
namespace chunk_at {
constexpr std::size_t offset = 16, length = 20, data = 24;
static_assert(data + chunk_capacity == record_size);
} // namespace chunk_at
namespace tokens_at {
constexpr std::size_t time = 16, count = 24, text_len = 26, reserved = 28, data = 32;
static_assert(data + tokens_capacity == record_size);
} // namespace tokens_at
namespace end_at {
constexpr std::size_t reason = 16, reserved = 17, prompt = 20, generated = 24, preemptions = 28,
                      ttft = 32, tpot = 40, e2e = 48, message_len = 56, message = 58;
static_assert(message + end_message_capacity == record_size);
} // namespace end_at
namespace error_at {
constexpr std::size_t code = 16, message_len = 20, message = 22;
static_assert(message + error_message_capacity == record_size);
} // namespace error_at

void put_header(std::span<std::byte, record_size> out, record_type t, std::uint16_t body_len,
                std::uint64_t id) {
  std::fill(out.begin(), out.end(), std::byte{0});
  put<std::uint8_t>(out, 0, static_cast<std::uint8_t>(t));
  put<std::uint8_t>(out, 1, static_cast<std::uint8_t>(version));
  put<std::uint16_t>(out, 2, body_len);
  put<std::uint64_t>(out, 8, id);
}

} // namespace

std::string_view to_string(end_reason r) noexcept {
  switch (r) {
    case end_reason::length: return "length";
    case end_reason::stop: return "stop";
    case end_reason::cancelled: return "cancelled";
    case end_reason::error: return "error";
    case end_reason::backlog: return "backlog";
  }
  return "unknown";
}

// -- records ----------------------------------------------------------------

void encode(const submit_rec& r, std::span<std::byte, record_size> out) {
  namespace at = submit_at;
  put_header(out, record_type::submit, record_body_size, r.request_id);
  auto model = std::string_view{r.model}.substr(0, max_name);
  auto session = std::string_view{r.session}.substr(0, max_name);
  const auto stops = std::min(r.stop_tokens.size(), max_stop_tokens);
  const auto inl = std::string_view{r.inline_data}.substr(0, submit_inline_room(session.size()));
  put<std::uint8_t>(out, at::kind, static_cast<std::uint8_t>(r.kind));
  put<std::uint8_t>(out, at::prio, static_cast<std::uint8_t>(r.prio));
  put<std::uint8_t>(out, at::stop_at_eos, r.stop_at_eos ? 1 : 0);
  put<std::uint8_t>(out, at::model_len, static_cast<std::uint8_t>(model.size()));
  put<std::uint8_t>(out, at::stop_count, static_cast<std::uint8_t>(stops));
  put<std::uint8_t>(out, at::session_len, static_cast<std::uint8_t>(session.size()));
  put<float>(out, at::temperature, r.temperature);
  put<float>(out, at::top_p, r.top_p);
  put<std::uint32_t>(out, at::top_k, r.top_k);
  put<std::uint32_t>(out, at::max_tokens, r.max_tokens);
  put<std::uint64_t>(out, at::seed, r.seed);
  put<std::uint32_t>(out, at::prompt_bytes, r.prompt_bytes);
  put<std::uint32_t>(out, at::inline_bytes, static_cast<std::uint32_t>(inl.size()));
  put_bytes(out, at::model, model);
  for (std::size_t i = 0; i < stops; ++i)
    put<std::uint32_t>(out, at::stops + 4 * i, r.stop_tokens[i]);
  put_bytes(out, at::inline_data, session);
  put_bytes(out, at::inline_data + session.size(), inl);
}

void encode(const chunk_rec& r, std::span<std::byte, record_size> out) {
  auto data = std::string_view{r.data}.substr(0, chunk_capacity);
  put_header(out, record_type::submit_chunk, static_cast<std::uint16_t>(8 + data.size()),
             r.request_id);
  put<std::uint32_t>(out, chunk_at::offset, r.offset);
  put<std::uint32_t>(out, chunk_at::length, static_cast<std::uint32_t>(data.size()));
  put_bytes(out, chunk_at::data, data);
}

void encode(const cancel_rec& r, std::span<std::byte, record_size> out) {
  put_header(out, record_type::cancel, 0, r.request_id);
}

namespace {

/// Writes a tokens record from views (no temporaries: the per-token hot path).
void encode_tokens(std::uint64_t id, std::uint64_t time, std::span<const std::uint32_t> tokens,
                   std::string_view text, std::span<std::byte, record_size> out) {
  const auto n = std::min(tokens.size(), tokens_capacity / 4);
  text = text.substr(0, utf8_prefix(text, tokens_capacity - 4 * n));
  const auto body = tokens_at::data - record_header_size + 4 * n + text.size();
  put_header(out, record_type::tokens, static_cast<std::uint16_t>(body), id);
  put<std::uint64_t>(out, tokens_at::time, time);
  put<std::uint16_t>(out, tokens_at::count, static_cast<std::uint16_t>(n));
  put<std::uint16_t>(out, tokens_at::text_len, static_cast<std::uint16_t>(text.size()));
  if (n != 0)
    std::memcpy(out.data() + tokens_at::data, tokens.data(), 4 * n); // little-endian u32s
  put_bytes(out, tokens_at::data + 4 * n, text);
}

} // namespace

void encode(const tokens_rec& r, std::span<std::byte, record_size> out) {
  encode_tokens(r.request_id, r.daemon_time_ns, r.tokens, r.text, out);
}

void encode(const end_rec& r, std::span<std::byte, record_size> out) {
  namespace at = end_at;
  auto msg = cut(r.message, end_message_capacity);
  put_header(out, record_type::end, static_cast<std::uint16_t>(at::message - 16 + msg.size()),
             r.request_id);
  put<std::uint8_t>(out, at::reason, static_cast<std::uint8_t>(r.reason));
  put<std::uint32_t>(out, at::prompt, r.prompt_tokens);
  put<std::uint32_t>(out, at::generated, r.generated_tokens);
  put<std::uint32_t>(out, at::preemptions, r.preemptions);
  put<std::uint64_t>(out, at::ttft, r.ttft_us);
  put<std::uint64_t>(out, at::tpot, r.tpot_us);
  put<std::uint64_t>(out, at::e2e, r.e2e_us);
  put<std::uint16_t>(out, at::message_len, static_cast<std::uint16_t>(msg.size()));
  put_bytes(out, at::message, msg);
}

void encode(const error_rec& r, std::span<std::byte, record_size> out) {
  auto msg = cut(r.message, error_message_capacity);
  put_header(out, record_type::error,
             static_cast<std::uint16_t>(error_at::message - 16 + msg.size()), r.request_id);
  put<std::uint32_t>(out, error_at::code, static_cast<std::uint32_t>(r.code));
  put<std::uint16_t>(out, error_at::message_len, static_cast<std::uint16_t>(msg.size()));
  put_bytes(out, error_at::message, msg);
}

expected<record, protocol_error> decode_record(std::span<const std::byte, record_size> in) {
  const std::span<const std::byte> b{in.data(), in.size()};
  const auto type = get<std::uint8_t>(b, 0);
  const auto ver = get<std::uint8_t>(b, 1);
  const auto body_len = get<std::uint16_t>(b, 2);
  const auto id = get<std::uint64_t>(b, 8);
  const auto t = static_cast<record_type>(type);
  // Built only on the error paths: decoding a valid record allocates nothing for it.
  const auto what = [t, id] {
    return "record '" + std::string(type_name(t)) + "' (request " + num(id) + ")";
  };
  if (type_name(t) == "unknown")
    return bad("unknown record type " + num(type));
  if (ver != version)
    return bad(what() + ": record version " + num(ver) + " is not " + num(version),
               errc::version_mismatch);
  if (body_len > record_body_size)
    return bad(what() + ": body_len " + num(body_len) + " exceeds " + num(record_body_size));
  if (get<std::uint32_t>(b, 4) != 0)
    return bad(what() + ": reserved header bytes are not zero");
  const bool client_record =
    t == record_type::submit || t == record_type::submit_chunk || t == record_type::cancel;
  if (client_record && id == 0)
    return bad(what() + ": request id 0 is reserved");

  switch (t) {
    case record_type::submit: {
      namespace at = submit_at;
      if (body_len != record_body_size)
        return bad(what() + ": body_len must be " + num(record_body_size) + ", got " + num(body_len));
      submit_rec r;
      r.request_id = id;
      const auto kind = get<std::uint8_t>(b, at::kind);
      const auto prio = get<std::uint8_t>(b, at::prio);
      const auto eos = get<std::uint8_t>(b, at::stop_at_eos);
      const auto model_len = get<std::uint8_t>(b, at::model_len);
      const auto stop_count = get<std::uint8_t>(b, at::stop_count);
      const auto session_len = get<std::uint8_t>(b, at::session_len);
      if (kind > 1)
        return bad(what() + ": prompt kind " + num(kind) + " is neither 0 (text) nor 1 (tokens)");
      if (prio > 1)
        return bad(what() + ": priority " + num(prio) + " is neither 0 (interactive) nor 1 (batch)");
      if (eos > 1)
        return bad(what() + ": stop_at_eos must be 0 or 1, got " + num(eos));
      if (model_len > max_name)
        return bad(what() + ": model name length " + num(model_len) + " exceeds " + num(max_name));
      if (stop_count > max_stop_tokens)
        return bad(what() + ": " + num(stop_count) + " stop tokens, at most " +
                   num(max_stop_tokens));
      if (session_len > max_name)
        return bad(what() + ": session name length " + num(session_len) + " exceeds " +
                   num(max_name));
      if (!all_zero(b, at::reserved, at::temperature))
        return bad(what() + ": reserved bytes are not zero");
      r.kind = static_cast<prompt_kind>(kind);
      r.prio = static_cast<priority>(prio);
      r.stop_at_eos = eos == 1;
      r.model = get_bytes(b, at::model, model_len);
      if (!r.model.empty() && !valid_model_name(r.model))
        return bad(what() + ": model name is not 1..64 characters of [A-Za-z0-9._-]");
      r.session = get_bytes(b, at::inline_data, session_len);
      if (!r.session.empty() && !valid_session_name(r.session))
        return bad(what() + ": session name is not 1..64 characters of [A-Za-z0-9._-]");
      r.temperature = get<float>(b, at::temperature);
      r.top_p = get<float>(b, at::top_p);
      r.top_k = get<std::uint32_t>(b, at::top_k);
      r.max_tokens = get<std::uint32_t>(b, at::max_tokens);
      r.seed = get<std::uint64_t>(b, at::seed);
      if (!std::isfinite(r.temperature) || r.temperature < 0.0f || r.temperature > max_temperature)
        return bad(what() + ": temperature must be finite and in [0, 100]");
      if (!std::isfinite(r.top_p) || !(r.top_p > 0.0f) || r.top_p > 1.0f)
        return bad(what() + ": top_p must be in (0, 1]");
      if (r.top_k > max_top_k)
        return bad(what() + ": top_k " + num(r.top_k) + " exceeds " + num(max_top_k));
      if (r.max_tokens == 0 || r.max_tokens > max_max_tokens)
        return bad(what() + ": max_tokens " + num(r.max_tokens) + " is outside 1.." +
                   num(max_max_tokens));
      for (std::size_t i = 0; i < stop_count; ++i)
        r.stop_tokens.push_back(get<std::uint32_t>(b, at::stops + 4 * i));
      r.prompt_bytes = get<std::uint32_t>(b, at::prompt_bytes);
      const auto inl = get<std::uint32_t>(b, at::inline_bytes);
      if (r.prompt_bytes == 0)
        return bad(what() + ": the prompt is empty");
      if (r.kind == prompt_kind::tokens && r.prompt_bytes % 4 != 0)
        return bad(what() + ": a token prompt's length " + num(r.prompt_bytes) +
                   " is not a multiple of 4 bytes");
      const auto room = submit_inline_room(session_len);
      if (inl > room || inl > r.prompt_bytes)
        return bad(what() + ": inline length " + num(inl) + " exceeds " +
                   (inl > room ? num(room) + " bytes (72 less the session name)"
                               : "the prompt length " + num(r.prompt_bytes)));
      if (inl < r.prompt_bytes && inl < room)
        return bad(what() + ": a chunked prompt must fill the record's inline space first");
      if (!all_zero(b, at::inline_data + session_len + inl, record_size))
        return bad(what() + ": bytes after the inline prompt are not zero");
      r.inline_data = get_bytes(b, at::inline_data + session_len, inl);
      return record{std::move(r)};
    }
    case record_type::submit_chunk: {
      if (body_len < 9)
        return bad(what() + ": body_len " + num(body_len) + " is too short for a chunk");
      chunk_rec r;
      r.request_id = id;
      r.offset = get<std::uint32_t>(b, chunk_at::offset);
      const auto len = get<std::uint32_t>(b, chunk_at::length);
      if (len == 0 || len > chunk_capacity || 8 + len != body_len)
        return bad(what() + ": chunk length " + num(len) + " is outside 1.." +
                   num(chunk_capacity) + " or does not match body_len");
      r.data = get_bytes(b, chunk_at::data, len);
      return record{std::move(r)};
    }
    case record_type::cancel:
      if (body_len != 0)
        return bad(what() + ": a cancel has no body");
      return record{cancel_rec{id}};
    case record_type::tokens: {
      tokens_rec r;
      r.request_id = id;
      r.daemon_time_ns = get<std::uint64_t>(b, tokens_at::time);
      const auto n = get<std::uint16_t>(b, tokens_at::count);
      const auto text_len = get<std::uint16_t>(b, tokens_at::text_len);
      if (get<std::uint32_t>(b, tokens_at::reserved) != 0)
        return bad(what() + ": reserved bytes are not zero");
      if (4 * std::size_t{n} + text_len > tokens_capacity ||
          tokens_at::data - 16 + 4 * std::size_t{n} + text_len != body_len)
        return bad(what() + ": " + num(n) + " tokens and " + num(text_len) +
                   " text bytes do not match body_len " + num(body_len));
      r.tokens.resize(n);
      for (std::size_t i = 0; i < n; ++i)
        r.tokens[i] = get<std::uint32_t>(b, tokens_at::data + 4 * i);
      r.text = get_bytes(b, tokens_at::data + 4 * n, text_len);
      if (!valid_utf8(r.text))
        return bad(what() + ": text is not valid UTF-8");
      return record{std::move(r)};
    }
    case record_type::end: {
      namespace at = end_at;
      end_rec r;
      r.request_id = id;
      const auto reason = get<std::uint8_t>(b, at::reason);
      if (reason > static_cast<std::uint8_t>(end_reason::backlog))
        return bad(what() + ": unknown end reason " + num(reason));
      if (!all_zero(b, at::reserved, at::prompt))
        return bad(what() + ": reserved bytes are not zero");
      r.reason = static_cast<end_reason>(reason);
      r.prompt_tokens = get<std::uint32_t>(b, at::prompt);
      r.generated_tokens = get<std::uint32_t>(b, at::generated);
      r.preemptions = get<std::uint32_t>(b, at::preemptions);
      r.ttft_us = get<std::uint64_t>(b, at::ttft);
      r.tpot_us = get<std::uint64_t>(b, at::tpot);
      r.e2e_us = get<std::uint64_t>(b, at::e2e);
      const auto len = get<std::uint16_t>(b, at::message_len);
      if (len > end_message_capacity || at::message - 16 + std::size_t{len} != body_len)
        return bad(what() + ": message length " + num(len) + " does not match body_len");
      r.message = get_bytes(b, at::message, len);
      if (!valid_utf8(r.message))
        return bad(what() + ": message is not valid UTF-8");
      return record{std::move(r)};
    }
    case record_type::error: {
      error_rec r;
      r.request_id = id;
      const auto code = get<std::uint32_t>(b, error_at::code);
      if (!known_errc(code) || code == 0)
        return bad(what() + ": unknown error code " + num(code));
      r.code = static_cast<errc>(code);
      const auto len = get<std::uint16_t>(b, error_at::message_len);
      if (len > error_message_capacity || error_at::message - 16 + std::size_t{len} != body_len)
        return bad(what() + ": message length " + num(len) + " does not match body_len");
      r.message = get_bytes(b, error_at::message, len);
      if (!valid_utf8(r.message))
        return bad(what() + ": message is not valid UTF-8");
      return record{std::move(r)};
    }
  }
  return bad("unknown record type " + num(type));
}

std::size_t pack_tokens(std::uint64_t request_id, std::uint64_t daemon_time_ns,
                        std::span<const std::uint32_t> tokens, std::string_view text,
                        std::vector<record_bytes>& out) {
  std::size_t n = 0;
  // Tokens first (up to 56 a record); text gets the room they leave, cut at a
  // UTF-8 boundary. Always at least one record.
  do {
    const auto take = std::min(tokens.size(), tokens_capacity / 4);
    const auto room = tokens_capacity - 4 * take;
    const auto t = utf8_prefix(text, room);
    encode_tokens(request_id, daemon_time_ns, tokens.first(take), text.substr(0, t),
                  out.emplace_back());
    tokens = tokens.subspan(take);
    text.remove_prefix(t);
    ++n;
    if (take == 0 && t == 0)
      break; // cannot happen with room left; never loop forever
  } while (!tokens.empty() || !text.empty());
  return n;
}

void pack_submit(const submit_rec& head, std::string_view prompt, std::vector<record_bytes>& out) {
  submit_rec s = head;
  s.prompt_bytes = static_cast<std::uint32_t>(prompt.size());
  const auto inl =
    std::min(prompt.size(), submit_inline_room(std::min(head.session.size(), max_name)));
  s.inline_data = std::string(prompt.substr(0, inl));
  encode(s, out.emplace_back());
  for (std::size_t off = inl; off < prompt.size(); off += chunk_capacity) {
    chunk_rec c;
    c.request_id = head.request_id;
    c.offset = static_cast<std::uint32_t>(off);
    c.data = std::string(prompt.substr(off, chunk_capacity));
    encode(c, out.emplace_back());
  }
}

} // namespace kvlane::ipc::proto
