#include "daemon/config_http.hpp"

#include "common/model_name.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::daemon {

namespace config_tables {

using namespace config_reader;

namespace {

bool valid_bearer_key(std::string_view key) noexcept {
  return std::all_of(key.begin(), key.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
}

/// One [[http.keys]] entry. The key file is read here, so that `kvlaned --check` and a
/// reload report an unreadable one with its line like any other bad value.
status parse_http_key(const reporter& r, const section& s, http_key& out) {
  KVLANE_CONFIG_TRY(
    check_keys(r, s, {"name", "key", "key_file", "max_priority", "max_requests", "scope"}));
  if (s.find("name") == nullptr)
    return unexpected(r.bad_value(s.key("name"), s.line(), "required key is missing"));
  KVLANE_CONFIG_TRY(read_string(r, s, "name", out.name));
  if (!valid_model_name(out.name))
    return unexpected(r.bad_value(
      s.key("name"), s.line("name"),
      fmt::format("must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got {})", quoted(out.name))));
  if (out.name == "default")
    return unexpected(r.bad_value(s.key("name"), s.line("name"),
                                  "\"default\" is reserved: it names the identity of "
                                  "http.api_key (and of a keyless API)"));
  const bool inline_key = s.find("key") != nullptr;
  const bool file_key = s.find("key_file") != nullptr;
  if (inline_key && file_key)
    return unexpected(r.bad_value(s.key("key_file"), s.line("key_file"),
                                  "set key or key_file, not both"));
  if (!inline_key && !file_key)
    return unexpected(r.bad_value(s.key("key"), s.line(),
                                  "required: set key (the bearer key) or key_file (a file "
                                  "holding it on its first line)"));
  if (inline_key) {
    KVLANE_CONFIG_TRY(read_string(r, s, "key", out.key));
    if (out.key.empty() || !valid_bearer_key(out.key))
      return unexpected(r.bad_value(s.key("key"), s.line("key"),
                                    "must be printable ASCII without spaces, not empty"));
  } else {
    KVLANE_CONFIG_TRY(read_string(r, s, "key_file", out.key_file));
    if (out.key_file.empty() || out.key_file.front() != '/')
      return unexpected(r.bad_value(s.key("key_file"), s.line("key_file"),
                                    fmt::format("must be an absolute path (got {})",
                                                quoted(out.key_file))));
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(out.key_file.c_str(), "rb"),
                                                         &std::fclose);
    // The first line, at most 4 KiB: a key file is one short line.
    std::string line(4096, '\0');
    const bool read = file && std::fgets(line.data(), static_cast<int>(line.size()), file.get());
    if (!file || (!read && std::ferror(file.get())))
      return unexpected(r.bad_value(s.key("key_file"), s.line("key_file"),
                                    fmt::format("cannot read {}: {}", quoted(out.key_file),
                                                std::strerror(errno))));
    line.resize(read ? std::strlen(line.c_str()) : 0);
    const auto first = line.find_first_not_of(" \t\r\n");
    const auto last = line.find_last_not_of(" \t\r\n");
    if (first == std::string::npos)
      return unexpected(r.bad_value(s.key("key_file"), s.line("key_file"),
                                    fmt::format("{} holds no key on its first line",
                                                quoted(out.key_file))));
    out.key = line.substr(first, last - first + 1);
    if (!valid_bearer_key(out.key))
      return unexpected(r.bad_value(s.key("key_file"), s.line("key_file"),
                                    fmt::format("the key in {} must be printable ASCII without "
                                                "spaces",
                                                quoted(out.key_file))));
  }
  std::string priority = out.batch_only ? "batch" : "interactive";
  constexpr choice<std::string_view> priorities[] = {{"interactive", "interactive"},
                                                     {"batch", "batch"}};
  KVLANE_CONFIG_TRY(read_choice(r, s, "max_priority", priority,
                                std::span<const choice<std::string_view>>(priorities)));
  out.batch_only = priority == "batch";
  if (s.find("max_requests") != nullptr) {
    std::uint32_t n = 0;
    KVLANE_CONFIG_TRY(read_int(r, s, "max_requests", n, 1, 1'048'576));
    out.max_requests = n;
  }
  auto scope = out.share_all ? actors::reuse_scope::all : actors::reuse_scope::user;
  std::vector<choice<actors::reuse_scope>> scopes;
  for (auto c : {actors::reuse_scope::user, actors::reuse_scope::all})
    scopes.push_back({actors::to_string(c), c});
  KVLANE_CONFIG_TRY(
    read_choice(r, s, "scope", scope, std::span<const choice<actors::reuse_scope>>(scopes)));
  out.share_all = scope == actors::reuse_scope::all;
  return {};
}

/// [[http.keys]]: names unique, keys distinct (one key, one identity).
status parse_http_keys(const reporter& r, const section& http, std::vector<http_key>& out) {
  const auto* n = http.find("keys");
  if (n == nullptr)
    return {};
  const auto* array = n->as_array();
  const bool tables = array != nullptr
                      && std::all_of(array->begin(), array->end(),
                                     [](const toml::node& e) { return e.is_table(); });
  if (!tables)
    return unexpected(r.wrong_type(http.key("keys"), *n, "array of tables ([[http.keys]])"));
  out.clear();
  for (std::size_t i = 0; i < array->size(); ++i) {
    const section s{*array->get(i)->as_table(), fmt::format("{}[{}]", http.key("keys"), i)};
    http_key k;
    KVLANE_CONFIG_TRY(parse_http_key(r, s, k));
    for (std::size_t j = 0; j < out.size(); ++j) {
      const auto& other = *array->get(j)->as_table();
      if (out[j].name == k.name)
        return unexpected(r.bad_value(
          s.key("name"), s.line("name"),
          fmt::format("duplicate key name {} (also used by {}[{}] at line {})", quoted(k.name),
                      http.key("keys"), j, line_of(*other.get("name")))));
      const std::string_view field = k.key_file.empty() ? "key" : "key_file";
      if (out[j].key == k.key) // the key itself is never printed
        return unexpected(r.bad_value(
          s.key(field), s.line(field),
          fmt::format("the same key as {}[{}] ({}): each key must be distinct, it names one "
                      "identity",
                      http.key("keys"), j, quoted(out[j].name))));
    }
    out.push_back(std::move(k));
  }
  return {};
}

/// tls_cert, tls_key and allow_plaintext: a listener outside loopback speaks TLS, or says
/// that something else protects its traffic.
status parse_http_tls(const reporter& r, const section& s, http_section& out) {
  KVLANE_CONFIG_TRY(read_string(r, s, "tls_cert", out.tls_cert));
  KVLANE_CONFIG_TRY(read_string(r, s, "tls_key", out.tls_key));
  KVLANE_CONFIG_TRY(read_bool(r, s, "allow_plaintext", out.allow_plaintext));
  for (const auto* name : {"tls_cert", "tls_key"}) {
    const auto& path = std::string_view{name} == "tls_cert" ? out.tls_cert : out.tls_key;
    if (!path.empty() && path.front() != '/')
      return unexpected(r.bad_value(s.key(name), s.line(name),
                                    fmt::format("must be an absolute path to a PEM file (got {})",
                                                quoted(path))));
  }
  if (out.tls_cert.empty() != out.tls_key.empty()) {
    const std::string_view missing = out.tls_cert.empty() ? "tls_cert" : "tls_key";
    const std::string_view given = out.tls_cert.empty() ? "tls_key" : "tls_cert";
    return unexpected(r.bad_value(s.key(missing), s.line(given),
                                  fmt::format("required with {}: TLS needs the certificate and its "
                                              "private key",
                                              given)));
  }
  const auto where = out.listen.empty() ? std::nullopt : parse_http_listen(out.listen);
  if (where && !where->loopback && out.tls_cert.empty() && !out.allow_plaintext)
    return unexpected(r.bad_value(
      s.key("allow_plaintext"), s.line("listen"),
      fmt::format("listen = {} is not a loopback address and tls_cert/tls_key are not set: the "
                  "API key and the prompts would cross the network in clear text. Set tls_cert "
                  "and tls_key, or allow_plaintext = true when something else protects the "
                  "traffic (a TLS proxy on this host, a trusted network)",
                  quoted(out.listen))));
  return {};
}

} // namespace

status parse_http(const reporter& r, const section& root, http_section& out) {
  auto table = find_table(r, root, "http");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "http"};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"listen", "api_key", "api_key_file", "cors_origins", "allowed_hosts",
                                "max_connections", "max_body_bytes", "max_header_bytes",
                                "idle_timeout_ms", "header_timeout_ms", "keys",
                                "max_connections_per_peer", "tls_cert", "tls_key",
                                "allow_plaintext"}));
  KVLANE_CONFIG_TRY(read_string(r, s, "listen", out.listen));
  KVLANE_CONFIG_TRY(read_string(r, s, "api_key", out.api_key));
  KVLANE_CONFIG_TRY(read_string(r, s, "api_key_file", out.api_key_file));
  if (!out.api_key.empty() && !out.api_key_file.empty())
    return unexpected(r.bad_value(s.key("api_key_file"), s.line("api_key_file"),
                                  "set api_key or api_key_file, not both"));
  if (!out.api_key_file.empty() && out.api_key_file.front() != '/')
    return unexpected(r.bad_value(s.key("api_key_file"), s.line("api_key_file"),
                                  fmt::format("must be an absolute path (got {})",
                                              quoted(out.api_key_file))));
  const bool key_ok = std::all_of(out.api_key.begin(), out.api_key.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (!key_ok)
    return unexpected(r.bad_value(s.key("api_key"), s.line("api_key"),
                                  "must be printable ASCII without spaces"));
  KVLANE_CONFIG_TRY(parse_http_keys(r, s, out.keys));
  if (!out.listen.empty()) {
    const auto where = parse_http_listen(out.listen);
    if (!where)
      return unexpected(r.bad_value(
        s.key("listen"), s.line("listen"),
        fmt::format("must be an IP address and port such as \"127.0.0.1:8471\", "
                    "\"0.0.0.0:8471\" or \"[::1]:8471\", or empty to turn the HTTP API off "
                    "(got {})",
                    quoted(out.listen))));
    if (!where->loopback && out.api_key.empty() && out.api_key_file.empty() && out.keys.empty())
      return unexpected(r.bad_value(
        s.key("api_key"), s.line("listen"),
        fmt::format("required when listen is not a loopback address (listen = {}): set "
                    "http.api_key, http.api_key_file or [[http.keys]], or listen on 127.0.0.1",
                    quoted(out.listen))));
  }
  if (const auto* n = s.find("cors_origins")) {
    const auto* array = n->as_array();
    if (array == nullptr)
      return unexpected(r.wrong_type(s.key("cors_origins"), *n, "array of origins"));
    out.cors_origins.clear();
    for (std::size_t i = 0; i < array->size(); ++i) {
      const auto& e = *array->get(i);
      const auto key = fmt::format("{}[{}]", s.key("cors_origins"), i);
      const auto* str = e.as_string();
      if (str == nullptr)
        return unexpected(r.wrong_type(key, e, "string"));
      const auto& v = str->get();
      const bool scheme = v.starts_with("http://") || v.starts_with("https://");
      const bool clean = std::all_of(v.begin(), v.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
      });
      if (!scheme || !clean || v.back() == '/')
        return unexpected(r.bad_value(
          key, line_of(e),
          fmt::format("must be an origin such as \"http://localhost:3000\" (scheme, host, "
                      "optional port, no path) (got {})",
                      quoted(v))));
      out.cors_origins.push_back(v);
    }
  }
  if (const auto* n = s.find("allowed_hosts")) {
    const auto* array = n->as_array();
    if (array == nullptr)
      return unexpected(r.wrong_type(s.key("allowed_hosts"), *n, "array of host names"));
    out.allowed_hosts.clear();
    for (std::size_t i = 0; i < array->size(); ++i) {
      const auto& e = *array->get(i);
      const auto key = fmt::format("{}[{}]", s.key("allowed_hosts"), i);
      const auto* str = e.as_string();
      if (str == nullptr)
        return unexpected(r.wrong_type(key, e, "string"));
      const auto& v = str->get();
      const bool name = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
      });
      if (v != "*" && !name)
        return unexpected(r.bad_value(
          key, line_of(e),
          fmt::format("must be a host name such as \"kvlane.lan\" (no scheme, port or path), "
                      "or \"*\" for any host (got {})",
                      quoted(v))));
      out.allowed_hosts.push_back(v);
    }
  }
  KVLANE_CONFIG_TRY(read_int(r, s, "max_connections", out.max_connections, 1, 65536));
  if (s.find("max_connections_per_peer") == nullptr) {
    // A loopback listener has one peer address, every local client's: a cap per peer would
    // only be a smaller max_connections.
    const auto where = out.listen.empty() ? std::nullopt : parse_http_listen(out.listen);
    constexpr std::uint32_t beyond_loopback = 32;
    out.max_connections_per_peer = where && !where->loopback
                                     ? std::min(beyond_loopback, out.max_connections)
                                     : out.max_connections;
  }
  KVLANE_CONFIG_TRY(read_int(r, s, "max_connections_per_peer", out.max_connections_per_peer, 1,
                             out.max_connections));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_body_bytes", out.max_body_bytes, kib, 256 * mib));
  std::uint64_t header_bytes = out.max_header_bytes;
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_header_bytes", header_bytes, kib, mib));
  out.max_header_bytes = static_cast<std::uint32_t>(header_bytes);
  std::int64_t idle_ms = out.idle_timeout.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "idle_timeout_ms", idle_ms, 100, 3'600'000));
  out.idle_timeout = std::chrono::milliseconds(idle_ms);
  std::int64_t header_ms = out.header_timeout.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "header_timeout_ms", header_ms, 100, 600'000));
  out.header_timeout = std::chrono::milliseconds(header_ms);
  KVLANE_CONFIG_TRY(parse_http_tls(r, s, out));
  return {};
}

} // namespace config_tables

std::optional<http_listen_address> parse_http_listen(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto host = text.substr(0, colon);
  auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || p != port_text.data() + port_text.size() || port > 65535)
    return std::nullopt;
  http_listen_address out;
  out.port = static_cast<std::uint16_t>(port);
  if (host == "localhost") {
    out.host = "127.0.0.1";
    out.loopback = true;
    return out;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    const std::string literal{host.substr(1, host.size() - 2)};
    in6_addr a6{};
    if (::inet_pton(AF_INET6, literal.c_str(), &a6) != 1)
      return std::nullopt;
    out.host = literal;
    out.loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    return out;
  }
  const std::string literal{host};
  in_addr a4{};
  if (::inet_pton(AF_INET, literal.c_str(), &a4) != 1)
    return std::nullopt;
  out.host = literal;
  out.loopback = (ntohl(a4.s_addr) >> 24) == 127;
  return out;
}

} // namespace kvlane::daemon
