#include "ipc/protocol.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kvlane::ipc::proto {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and encoded with plain memcpy");
static_assert(std::numeric_limits<float>::is_iec559, "floats travel as IEEE-754 binary32");

namespace {

// -- fixed-width field access -------------------------------------------------

template <class T>
T get(std::span<const std::byte> b, std::size_t at) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

template <class T>
void put(std::span<std::byte> b, std::size_t at, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(b.data() + at, &v, sizeof v);
}

void put_bytes(std::span<std::byte> b, std::size_t at, std::string_view s) {
  if (!s.empty()) // memcpy from an empty view's nullptr is undefined even for 0 bytes
    std::memcpy(b.data() + at, s.data(), s.size());
}

std::string get_bytes(std::span<const std::byte> b, std::size_t at, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(b.data() + at), n);
}

bool all_zero(std::span<const std::byte> b, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i)
    if (b[i] != std::byte{0})
      return false;
  return true;
}

std::string num(std::uint64_t v) {
  return std::to_string(v);
}

unexpected<protocol_error> bad(std::string msg, errc code = errc::bad_message) {
  return unexpected(protocol_error{code, std::move(msg)});
}

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
                      reserved = 21, temperature = 24, top_p = 28, top_k = 32, max_tokens = 36,
                      seed = 40, prompt_bytes = 48, inline_bytes = 52, model = 56, stops = 120,
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

bool known_errc(std::uint32_t v) {
  return v <= static_cast<std::uint32_t>(errc::timeout);
}

// -- control layouts ----------------------------------------------------------
// Header: 0 u32 magic, 4 u16 version, 6 u16 type, 8 u32 body_len.

std::vector<std::byte> control(control_type t, std::size_t body_len) {
  std::vector<std::byte> out(control_header_size + body_len);
  put<std::uint32_t>(out, 0, magic);
  put<std::uint16_t>(out, 4, version);
  put<std::uint16_t>(out, 6, static_cast<std::uint16_t>(t));
  put<std::uint32_t>(out, 8, static_cast<std::uint32_t>(body_len));
  return out;
}

constexpr std::size_t welcome_body = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 4 + 2 + 2 + max_name;
constexpr std::size_t stats_body = 4 + 4 + 8 * 10;
constexpr std::size_t refuse_fixed = 4 + 4 + 8 + 2 + 2;

std::string cut(std::string_view s, std::size_t max) {
  return std::string(s.substr(0, utf8_prefix(s, max)));
}

std::vector<std::byte> encode_refuse(control_type t, const refuse_msg& m) {
  auto msg = cut(m.message, control_message_capacity);
  auto out = control(t, refuse_fixed + msg.size());
  std::span<std::byte> b{out};
  const std::size_t at = control_header_size;
  put<std::uint32_t>(b, at, static_cast<std::uint32_t>(m.code));
  put<std::uint64_t>(b, at + 8, m.request_id);
  put<std::uint16_t>(b, at + 16, static_cast<std::uint16_t>(msg.size()));
  put_bytes(b, at + 20, msg);
  return out;
}

expected<refuse_msg, protocol_error> decode_refuse(std::span<const std::byte> body) {
  if (body.size() < refuse_fixed)
    return bad("refuse/fatal body of " + num(body.size()) + " bytes is shorter than " +
               num(refuse_fixed));
  refuse_msg m;
  const auto code = get<std::uint32_t>(body, 0);
  if (!known_errc(code) || code == 0)
    return bad("refuse/fatal carries unknown error code " + num(code));
  m.code = static_cast<errc>(code);
  m.request_id = get<std::uint64_t>(body, 8);
  const auto len = get<std::uint16_t>(body, 16);
  if (len > control_message_capacity || refuse_fixed + len != body.size())
    return bad("refuse/fatal message length " + num(len) + " does not match the body");
  m.message = get_bytes(body, refuse_fixed, len);
  if (!valid_utf8(m.message))
    return bad("refuse/fatal message is not valid UTF-8");
  return m;
}

} // namespace

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
  }
  return "unknown";
}

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

// -- control messages ---------------------------------------------------------

std::vector<std::byte> encode(const hello_msg& m) {
  auto name = std::string_view{m.client_name}.substr(0, max_name);
  auto out = control(control_type::hello, 4 + name.size());
  std::span<std::byte> b{out};
  put<std::uint16_t>(b, control_header_size, static_cast<std::uint16_t>(name.size()));
  put_bytes(b, control_header_size + 4, name);
  return out;
}

std::vector<std::byte> encode(const welcome_msg& m) {
  auto out = control(control_type::welcome, welcome_body);
  std::span<std::byte> b{out};
  std::size_t at = control_header_size;
  auto model = std::string_view{m.default_model}.substr(0, max_name);
  put<std::uint32_t>(b, at + 0, 0); // status: ok
  put<std::uint32_t>(b, at + 4, m.record_size);
  put<std::uint64_t>(b, at + 8, m.client_id);
  put<std::uint64_t>(b, at + 16, m.memfd_size);
  put<std::uint64_t>(b, at + 24, m.submit_offset);
  put<std::uint32_t>(b, at + 32, m.submit_capacity);
  put<std::uint32_t>(b, at + 36, m.events_capacity);
  put<std::uint64_t>(b, at + 40, m.events_offset);
  put<std::uint32_t>(b, at + 48, m.spin_us);
  put<std::uint32_t>(b, at + 52, m.max_requests);
  put<std::uint32_t>(b, at + 56, m.max_prompt_bytes);
  put<std::uint32_t>(b, at + 60, 0); // reserved
  put<std::uint16_t>(b, at + 64, static_cast<std::uint16_t>(model.size()));
  put<std::uint16_t>(b, at + 66, 0); // reserved
  put_bytes(b, at + 68, model);
  static_assert(68 + max_name == welcome_body);
  return out;
}

std::vector<std::byte> encode(const refuse_msg& m) {
  return encode_refuse(control_type::refuse, m);
}

std::vector<std::byte> encode(const fatal_msg& m) {
  return encode_refuse(control_type::fatal, m);
}

std::vector<std::byte> encode(const stats_request_msg&) {
  return control(control_type::stats_request, 0);
}

std::vector<std::byte> encode(const stats_reply_msg& m) {
  auto out = control(control_type::stats_reply, stats_body);
  std::span<std::byte> b{out};
  std::size_t at = control_header_size;
  put<std::uint32_t>(b, at, m.clients);
  const std::uint64_t fields[] = {m.clients_total,    m.requests_live,   m.engine_live,
                                  m.store_used_bytes, m.store_snapshots, m.records_in,
                                  m.records_out,      m.violations,      m.backlog_cancels,
                                  m.disconnect_cancels};
  for (std::size_t i = 0; i < std::size(fields); ++i)
    put<std::uint64_t>(b, at + 8 + 8 * i, fields[i]);
  return out;
}

expected<control_message, protocol_error> decode_control(std::span<const std::byte> d) {
  if (d.size() < control_header_size)
    return bad("control message of " + num(d.size()) + " bytes is shorter than its " +
               num(control_header_size) + "-byte header");
  if (d.size() > max_control_size)
    return bad("control message of " + num(d.size()) + " bytes exceeds the limit of " +
               num(max_control_size));
  if (get<std::uint32_t>(d, 0) != magic)
    return bad("bad magic: not a kvlane client");
  if (const auto v = get<std::uint16_t>(d, 4); v != version)
    return bad("protocol version " + num(v) + " is not supported (this side speaks version " +
                 num(version) + ")",
               errc::version_mismatch);
  const auto type = get<std::uint16_t>(d, 6);
  const auto body_len = get<std::uint32_t>(d, 8);
  if (body_len != d.size() - control_header_size)
    return bad("control body_len " + num(body_len) + " does not match the " +
               num(d.size() - control_header_size) + " bytes received");
  auto body = d.subspan(control_header_size);
  switch (static_cast<control_type>(type)) {
    case control_type::hello: {
      if (body.size() < 4)
        return bad("hello body is shorter than 4 bytes");
      const auto len = get<std::uint16_t>(body, 0);
      if (get<std::uint16_t>(body, 2) != 0)
        return bad("hello reserved field is not zero");
      if (len == 0 || len > max_name)
        return bad("hello client name length " + num(len) + " is outside 1.." + num(max_name));
      if (4 + std::size_t{len} != body.size())
        return bad("hello name length " + num(len) + " does not match the body");
      hello_msg m{get_bytes(body, 4, len)};
      if (!valid_client_name(m.client_name))
        return bad("hello client name is not printable UTF-8");
      return control_message{std::move(m)};
    }
    case control_type::welcome: {
      if (body.size() != welcome_body)
        return bad("welcome body has " + num(body.size()) + " bytes, expected " +
                   num(welcome_body));
      if (get<std::uint32_t>(body, 0) != 0)
        return bad("welcome status is not ok");
      welcome_msg m;
      m.record_size = get<std::uint32_t>(body, 4);
      m.client_id = get<std::uint64_t>(body, 8);
      m.memfd_size = get<std::uint64_t>(body, 16);
      m.submit_offset = get<std::uint64_t>(body, 24);
      m.submit_capacity = get<std::uint32_t>(body, 32);
      m.events_capacity = get<std::uint32_t>(body, 36);
      m.events_offset = get<std::uint64_t>(body, 40);
      m.spin_us = get<std::uint32_t>(body, 48);
      m.max_requests = get<std::uint32_t>(body, 52);
      m.max_prompt_bytes = get<std::uint32_t>(body, 56);
      const auto len = get<std::uint16_t>(body, 64);
      if (len > max_name)
        return bad("welcome model name length " + num(len) + " exceeds " + num(max_name));
      m.default_model = get_bytes(body, 68, len);
      if (m.record_size != record_size)
        return bad("welcome record size " + num(m.record_size) + " is not " + num(record_size));
      return control_message{std::move(m)};
    }
    case control_type::refuse: {
      auto r = decode_refuse(body);
      if (!r)
        return unexpected(std::move(r).error());
      return control_message{std::move(*r)};
    }
    case control_type::fatal: {
      auto r = decode_refuse(body);
      if (!r)
        return unexpected(std::move(r).error());
      fatal_msg f;
      static_cast<refuse_msg&>(f) = std::move(*r);
      return control_message{std::move(f)};
    }
    case control_type::stats_request:
      if (!body.empty())
        return bad("stats request carries a body");
      return control_message{stats_request_msg{}};
    case control_type::stats_reply: {
      if (body.size() != stats_body)
        return bad("stats reply has " + num(body.size()) + " bytes, expected " + num(stats_body));
      stats_reply_msg m;
      m.clients = get<std::uint32_t>(body, 0);
      std::uint64_t* fields[] = {&m.clients_total,    &m.requests_live,   &m.engine_live,
                                 &m.store_used_bytes, &m.store_snapshots, &m.records_in,
                                 &m.records_out,      &m.violations,      &m.backlog_cancels,
                                 &m.disconnect_cancels};
      for (std::size_t i = 0; i < std::size(fields); ++i)
        *fields[i] = get<std::uint64_t>(body, 8 + 8 * i);
      return control_message{m};
    }
  }
  return bad("unknown control message type " + num(type));
}

// -- records ----------------------------------------------------------------

void encode(const submit_rec& r, std::span<std::byte, record_size> out) {
  namespace at = submit_at;
  put_header(out, record_type::submit, record_body_size, r.request_id);
  auto model = std::string_view{r.model}.substr(0, max_name);
  const auto stops = std::min(r.stop_tokens.size(), max_stop_tokens);
  const auto inl = std::string_view{r.inline_data}.substr(0, submit_inline_capacity);
  put<std::uint8_t>(out, at::kind, static_cast<std::uint8_t>(r.kind));
  put<std::uint8_t>(out, at::prio, static_cast<std::uint8_t>(r.prio));
  put<std::uint8_t>(out, at::stop_at_eos, r.stop_at_eos ? 1 : 0);
  put<std::uint8_t>(out, at::model_len, static_cast<std::uint8_t>(model.size()));
  put<std::uint8_t>(out, at::stop_count, static_cast<std::uint8_t>(stops));
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
  put_bytes(out, at::inline_data, inl);
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
      if (!all_zero(b, at::reserved, at::temperature))
        return bad(what() + ": reserved bytes are not zero");
      r.kind = static_cast<prompt_kind>(kind);
      r.prio = static_cast<priority>(prio);
      r.stop_at_eos = eos == 1;
      r.model = get_bytes(b, at::model, model_len);
      if (!r.model.empty() && !valid_model_name(r.model))
        return bad(what() + ": model name is not 1..64 characters of [A-Za-z0-9._-]");
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
      if (inl > submit_inline_capacity || inl > r.prompt_bytes)
        return bad(what() + ": inline length " + num(inl) + " exceeds " +
                   (inl > submit_inline_capacity ? num(submit_inline_capacity) + " bytes"
                                                 : "the prompt length " + num(r.prompt_bytes)));
      if (inl < r.prompt_bytes && inl < submit_inline_capacity)
        return bad(what() + ": a chunked prompt must fill the record's inline space first");
      r.inline_data = get_bytes(b, at::inline_data, inl);
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
  const auto inl = std::min(prompt.size(), submit_inline_capacity);
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

// -- request_tracker ------------------------------------------------------------

expected<std::optional<complete_submit>, protocol_error>
request_tracker::on_submit(submit_rec r, std::uint32_t limit) {
  const auto id = r.request_id;
  const auto what = [id] { return "submit (request " + num(id) + ")"; };
  if (live_.count(id))
    return bad(what() + ": request id is already live on this connection", errc::duplicate_request);
  if (live_.size() >= max_requests_)
    return bad(what() + ": more than " + num(max_requests_) + " live requests",
               errc::too_many_requests);
  pending p{std::move(r), {}, 0, false};
  p.data = std::move(p.head.inline_data);
  p.head.inline_data.clear();
  p.received = p.data.size();
  const auto cap = std::min(limit, max_prompt_bytes_);
  const auto total = p.head.prompt_bytes;
  const bool chunked = p.received < total;
  // Prompts being assembled hold memory: bound them per connection too.
  const std::uint64_t assembly_cap = 2ull * max_prompt_bytes_;
  const bool too_big = total > cap;
  if (too_big || (chunked && assembling_bytes_ + total > assembly_cap)) {
    // A request-level error: the connection stays, the chunks that follow are
    // checked for order and dropped.
    if (chunked) {
      p.discard = true;
      p.data.clear();
      live_[id] = true;
      assembling_.emplace(id, std::move(p));
    }
    if (too_big)
      return bad(what() + ": prompt of " + num(total) + " bytes exceeds the limit of " +
                   num(cap) + " bytes",
                 errc::too_long);
    return bad(what() + ": prompt of " + num(total) + " bytes would make the prompts being "
                 "received on this connection exceed " + num(assembly_cap) + " bytes",
               errc::too_long);
  }
  if (p.received == p.head.prompt_bytes) {
    live_[id] = false;
    return finish(id, std::move(p));
  }
  live_[id] = true;
  assembling_bytes_ += total;
  p.data.reserve(std::min<std::size_t>(total, 64 * 1024)); // grows as chunks really arrive
  assembling_.emplace(id, std::move(p));
  return std::optional<complete_submit>{};
}

expected<std::optional<complete_submit>, protocol_error> request_tracker::on_chunk(chunk_rec c) {
  const auto id = c.request_id;
  const auto what = [id] { return "submit_chunk (request " + num(id) + ")"; };
  auto it = assembling_.find(id);
  if (it == assembling_.end())
    return bad(what() + ": no submit of this request is waiting for chunks");
  auto& p = it->second;
  if (c.offset != p.received)
    return bad(what() + ": chunk at offset " + num(c.offset) + ", expected " + num(p.received) +
               (c.offset < p.received ? " (overlap)" : " (gap or out of order)"));
  if (std::size_t{c.offset} + c.data.size() > p.head.prompt_bytes)
    return bad(what() + ": chunk ends at " + num(std::size_t{c.offset} + c.data.size()) +
               ", past the announced prompt length " + num(p.head.prompt_bytes));
  p.received += c.data.size();
  if (!p.discard)
    p.data += c.data;
  if (p.received < p.head.prompt_bytes)
    return std::optional<complete_submit>{};
  auto done = std::move(p);
  assembling_.erase(it);
  if (!done.discard)
    assembling_bytes_ -= done.head.prompt_bytes;
  if (done.discard) {
    live_.erase(id);
    return std::optional<complete_submit>{};
  }
  live_[id] = false;
  return finish(id, std::move(done));
}

expected<std::optional<complete_submit>, protocol_error> request_tracker::finish(std::uint64_t id,
                                                                                 pending p) {
  complete_submit out;
  out.head = std::move(p.head);
  out.prompt = std::move(p.data);
  if (out.head.kind == prompt_kind::text) {
    if (!valid_utf8(out.prompt)) {
      live_.erase(id);
      return bad("submit (request " + num(id) + "): the prompt text is not valid UTF-8");
    }
  } else {
    out.tokens.resize(out.prompt.size() / 4);
    std::memcpy(out.tokens.data(), out.prompt.data(), out.tokens.size() * 4);
  }
  return std::optional<complete_submit>{std::move(out)};
}

bool request_tracker::on_cancel(std::uint64_t request_id) {
  auto it = assembling_.find(request_id);
  if (it == assembling_.end())
    return false;
  if (!it->second.discard)
    assembling_bytes_ -= it->second.head.prompt_bytes;
  assembling_.erase(it);
  live_.erase(request_id);
  return true;
}

// -- UTF-8 ----------------------------------------------------------------------

namespace {

/// Length of the valid sequence at s[i], 0 if invalid, or -1 if it is a valid
/// prefix cut short by the end of `s`.
int utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80)
    return 1;
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    n = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    n = 3;
    if (c0 == 0xE0)
      lo = 0xA0;
    if (c0 == 0xED)
      hi = 0x9F; // no surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    n = 4;
    if (c0 == 0xF0)
      lo = 0x90;
    if (c0 == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + static_cast<std::size_t>(k) >= s.size())
      return -1;
    const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h)
      return 0;
  }
  return n;
}

} // namespace

bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const int n = utf8_sequence(s, i);
    if (n <= 0)
      return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::size_t utf8_prefix(std::string_view s, std::size_t max) noexcept {
  if (s.size() <= max)
    return s.size();
  std::size_t cut = max;
  // Back off over continuation bytes so the cut lands on a sequence start.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80 && max - cut < 3)
    --cut;
  if ((static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    return max; // not UTF-8 anyway: cut where asked
  return cut;
}

std::string utf8_stream::feed(std::string_view bytes) {
  held_.append(bytes);
  std::string out;
  out.reserve(held_.size());
  std::size_t i = 0;
  while (i < held_.size()) {
    const int n = utf8_sequence(held_, i);
    if (n == -1)
      break; // incomplete at the end: keep for the next piece
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(held_, i, static_cast<std::size_t>(n));
    i += static_cast<std::size_t>(n);
  }
  held_.erase(0, i);
  return out;
}

std::string utf8_stream::flush() {
  std::string out;
  if (!held_.empty())
    out = "\xEF\xBF\xBD"; // a truncated sequence at the very end
  held_.clear();
  return out;
}

bool valid_model_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_name)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
           || c == '_' || c == '-';
  });
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
