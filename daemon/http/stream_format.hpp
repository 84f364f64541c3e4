#pragma once

// kvlane::daemon::http stream framing: Server-Sent Events and NDJSON.
//
// sse_event() frames one `data:` event (the JSON never holds a raw newline,
// so one data line suffices); sse_done() is OpenAI's terminator; ndjson_line()
// is one line of Ollama's streams. to_json_text() serialises with invalid
// UTF-8 replaced by U+FFFD, so a model's stray bytes never break a client's
// JSON parser.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

std::string to_json_text(const nlohmann::json& j);
std::string sse_event(const nlohmann::json& j);
std::string sse_done();
std::string ndjson_line(const nlohmann::json& j);

/// RFC 3339 UTC with nanoseconds, as Ollama writes `created_at`.
std::string rfc3339_now();
/// Seconds since the Unix epoch, as OpenAI writes `created`.
std::int64_t unix_now();

} // namespace kvlane::daemon::http
