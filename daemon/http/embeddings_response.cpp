#include "daemon/http/embeddings_response.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <iterator>

namespace kvlane::daemon::http {

namespace {

std::size_t rows_of(const backends::embeddings& e) {
  return e.dimension == 0 ? 0 : e.values.size() / e.dimension;
}

/// A JSON string literal for `text` (escaped; invalid UTF-8 replaced).
std::string quoted(std::string_view text) {
  return nlohmann::json(std::string{text}).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
}

/// `[f, f, ...]`: each float in its shortest round-trip form. The vectors are unit length,
/// so never NaN or infinite (which JSON cannot write).
void append_floats(std::string& out, std::span<const float> row) {
  out += '[';
  for (std::size_t d = 0; d < row.size(); ++d) {
    if (d > 0)
      out += ',';
    fmt::format_to(std::back_inserter(out), "{}", row[d]);
  }
  out += ']';
}

/// `"<base64>"` of the row's float32 values, little-endian whatever the host (as OpenAI sends
/// them and its clients decode them).
void append_base64(std::string& out, std::span<const float> row) {
  std::string bytes;
  bytes.reserve(row.size() * 4);
  for (const float f : row) {
    const auto bits = std::bit_cast<std::uint32_t>(f);
    for (int b = 0; b < 4; ++b)
      bytes += static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  out += '"';
  out += base64_encode(std::as_bytes(std::span{bytes.data(), bytes.size()}));
  out += '"';
}

} // namespace

std::string base64_encode(std::span<const std::byte> bytes) {
  static constexpr char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto v = (std::to_integer<std::uint32_t>(bytes[i]) << 16)
                   | (std::to_integer<std::uint32_t>(bytes[i + 1]) << 8)
                   | std::to_integer<std::uint32_t>(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (const auto rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = std::to_integer<std::uint32_t>(bytes[i]) << 16;
    if (rest == 2)
      v |= std::to_integer<std::uint32_t>(bytes[i + 1]) << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += rest == 2 ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string render_openai_embeddings(const backends::embeddings& e, bool base64,
                                     std::string_view model, std::uint64_t prompt_tokens) {
  const auto rows = rows_of(e);
  std::string out;
  // About 11 bytes per float as text, 5.4 as base64.
  out.reserve(128 + rows * (48 + e.dimension * (base64 ? 6 : 12)));
  out += R"({"object":"list","data":[)";
  for (std::size_t i = 0; i < rows; ++i) {
    if (i > 0)
      out += ',';
    fmt::format_to(std::back_inserter(out), R"({{"object":"embedding","index":{},"embedding":)", i);
    if (base64)
      append_base64(out, e.row(i));
    else
      append_floats(out, e.row(i));
    out += '}';
  }
  fmt::format_to(std::back_inserter(out),
                 R"(],"model":{},"usage":{{"prompt_tokens":{},"total_tokens":{}}}}})",
                 quoted(model), prompt_tokens, prompt_tokens);
  return out;
}

std::string render_ollama_embed(const backends::embeddings& e, std::string_view model,
                                std::uint64_t prompt_tokens, std::int64_t total_ns) {
  const auto rows = rows_of(e);
  std::string out;
  out.reserve(160 + rows * (2 + e.dimension * 12));
  fmt::format_to(std::back_inserter(out), R"({{"model":{},"embeddings":[)", quoted(model));
  for (std::size_t i = 0; i < rows; ++i) {
    if (i > 0)
      out += ',';
    append_floats(out, e.row(i));
  }
  fmt::format_to(std::back_inserter(out),
                 R"(],"total_duration":{},"load_duration":0,"prompt_eval_count":{}}})", total_ns,
                 prompt_tokens);
  return out;
}

std::string render_ollama_embedding(const backends::embeddings& e) {
  std::string out = R"({"embedding":)";
  if (rows_of(e) == 0)
    out += "[]";
  else
    append_floats(out, e.row(0));
  out += '}';
  return out;
}

} // namespace kvlane::daemon::http
