#include "ipc/control_codec.hpp"

#include "ipc/utf8.hpp"
#include "ipc/wire_fields.hpp"

namespace kvlane::ipc::proto {

using namespace wire;

namespace {

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
constexpr std::size_t session_drop_fixed = 1 + 1 + 2; // u8 model_len, u8 session_len, u16 reserved
constexpr std::size_t session_dropped_body = 4;

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

std::vector<std::byte> encode(const session_drop_msg& m) {
  auto model = std::string_view{m.model}.substr(0, max_name);
  auto session = std::string_view{m.session}.substr(0, max_name);
  auto out = control(control_type::session_drop, session_drop_fixed + model.size() + session.size());
  std::span<std::byte> b{out};
  const std::size_t at = control_header_size;
  put<std::uint8_t>(b, at, static_cast<std::uint8_t>(model.size()));
  put<std::uint8_t>(b, at + 1, static_cast<std::uint8_t>(session.size()));
  put_bytes(b, at + session_drop_fixed, model);
  put_bytes(b, at + session_drop_fixed + model.size(), session);
  return out;
}

std::vector<std::byte> encode(const session_dropped_msg& m) {
  auto out = control(control_type::session_dropped, session_dropped_body);
  put<std::uint32_t>(std::span<std::byte>{out}, control_header_size, m.existed ? 1 : 0);
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
    case control_type::session_drop: {
      if (body.size() < session_drop_fixed)
        return bad("session_drop body is shorter than " + num(session_drop_fixed) + " bytes");
      const auto model_len = get<std::uint8_t>(body, 0);
      const auto session_len = get<std::uint8_t>(body, 1);
      if (get<std::uint16_t>(body, 2) != 0)
        return bad("session_drop reserved field is not zero");
      if (session_drop_fixed + std::size_t{model_len} + session_len != body.size())
        return bad("session_drop name lengths " + num(model_len) + " + " + num(session_len) +
                   " do not match the body");
      session_drop_msg m;
      m.model = get_bytes(body, session_drop_fixed, model_len);
      m.session = get_bytes(body, session_drop_fixed + model_len, session_len);
      if (!m.model.empty() && !valid_model_name(m.model))
        return bad("session_drop model name is not 1..64 characters of [A-Za-z0-9._-]");
      if (!valid_session_name(m.session))
        return bad("session_drop session name is not 1..64 characters of [A-Za-z0-9._-]");
      return control_message{std::move(m)};
    }
    case control_type::session_dropped: {
      if (body.size() != session_dropped_body)
        return bad("session_dropped has " + num(body.size()) + " bytes, expected " +
                   num(session_dropped_body));
      const auto existed = get<std::uint32_t>(body, 0);
      if (existed > 1)
        return bad("session_dropped flag " + num(existed) + " is neither 0 nor 1");
      return control_message{session_dropped_msg{existed == 1}};
    }
  }
  return bad("unknown control message type " + num(type));
}

} // namespace kvlane::ipc::proto
