#pragma once

// kvlane::daemon::http chat messages — a request's `messages` read from untrusted JSON.
//
// Roles system (also developer), user, assistant and tool; content a string (Ollama) or a
// string or text parts (OpenAI), null only in an assistant message that calls tools; an
// assistant's tool_calls, a tool result's tool_call_id (OpenAI, required) or tool_name
// (Ollama). Every other key is a 400 naming it. Pure; safe from any thread.

#include "backends/chat_format.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"

#include <nlohmann/json_fwd.hpp>

#include <vector>

namespace kvlane::daemon::http {

/// Appends the messages of `v` (the `messages` field) to `out`. `ollama`: Ollama's shapes.
expected<void, api_error> read_messages(const nlohmann::ordered_json& v,
                                        std::vector<backends::chat_message>& out, bool ollama);

} // namespace kvlane::daemon::http
