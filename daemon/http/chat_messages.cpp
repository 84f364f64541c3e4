#include "daemon/http/chat_messages.hpp"

#include "daemon/http/json_reader.hpp"
#include "daemon/http/tool_calls.hpp"

namespace kvlane::daemon::http {

namespace {

/// Content as a string or an array of {"type": "text", "text": ...} parts.
field_status read_content(const nlohmann::ordered_json& v, const std::string& param, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
    return {};
  }
  if (!v.is_array())
    return unexpected(wrong_type(param, "a string or an array of content parts", v));
  out.clear();
  for (std::size_t j = 0; j < v.size(); ++j) {
    const auto& part = v[j];
    const auto p = fmt::format("{}[{}]", param, j);
    if (!part.is_object())
      return unexpected(wrong_type(p, "an object", part));
    std::string type, text;
    bool has_text = false;
    for (const auto& [k, x] : part.items()) {
      if (k == "type") {
        KVLANE_HTTP_TRY(read_string(x, p + ".type", type, 32));
      } else if (k == "text") {
        KVLANE_HTTP_TRY(read_string(x, p + ".text", text));
        has_text = true;
      } else {
        return unexpected(unsupported(p + "." + k));
      }
    }
    if (type != "text")
      return unexpected(unsupported(p + ".type", fmt::format("only \"text\" parts are, got \"{}\"",
                                                             type)));
    if (!has_text)
      return unexpected(invalid(p + ".text", "a text part needs 'text'"));
    out += text;
  }
  return {};
}

} // namespace

field_status read_messages(const nlohmann::ordered_json& v, std::vector<backends::chat_message>& out, bool ollama) {
  if (!v.is_array())
    return unexpected(wrong_type("messages", "an array", v));
  if (v.empty() && !ollama) // an empty Ollama chat loads the model
    return unexpected(invalid("messages", "'messages' must hold at least one message"));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& m = v[i];
    const auto p = fmt::format("messages[{}]", i);
    if (!m.is_object())
      return unexpected(wrong_type(p, "an object", m));
    backends::chat_message msg;
    bool has_role = false, has_content = false, null_content = false, has_call_id = false,
         has_calls = false;
    for (const auto& [k, x] : m.items()) {
      if (k == "role") {
        KVLANE_HTTP_TRY(read_string(x, p + ".role", msg.role, 32));
        has_role = true;
      } else if (k == "content") {
        if (x.is_null() && !ollama) // an assistant message that only calls tools
          null_content = true;
        else if (ollama)
          KVLANE_HTTP_TRY(read_string(x, p + ".content", msg.content));
        else
          KVLANE_HTTP_TRY(read_content(x, p + ".content", msg.content));
        has_content = true;
      } else if (k == "tool_calls") {
        auto calls = decode_message_tool_calls(x, p + ".tool_calls", ollama ? dialect::ollama : dialect::openai);
        if (!calls)
          return unexpected(std::move(calls).error());
        msg.tool_calls = std::move(*calls);
        has_calls = true;
      } else if (k == "tool_call_id" && !ollama) {
        KVLANE_HTTP_TRY(read_string(x, p + ".tool_call_id", msg.tool_call_id, 256));
        has_call_id = true;
      } else if (k == "tool_name" && ollama) {
        KVLANE_HTTP_TRY(read_string(x, p + ".tool_name", msg.tool_name, max_tool_name));
      } else if (k == "images" && ollama && x.is_array() && x.empty()) {
        // Ollama clients send an empty image list with text-only messages.
      } else {
        return unexpected(unsupported(p + "." + k));
      }
    }
    if (!has_role)
      return unexpected(invalid(p + ".role", fmt::format("'{}.role' is required", p)));
    if (msg.role == "developer")
      msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return unexpected(invalid(p + ".role",
                                fmt::format("'{}.role' must be system, user, assistant or tool, got \"{}\"",
                                            p, msg.role)));
    const bool calls = !msg.tool_calls.empty();
    if (has_calls && msg.role != "assistant")
      return unexpected(invalid(p + ".tool_calls", fmt::format("'{}.tool_calls' is only allowed in an "
                                                               "assistant message", p)));
    if (has_call_id && msg.role != "tool")
      return unexpected(invalid(p + ".tool_call_id", fmt::format("'{}.tool_call_id' is only allowed in "
                                                                 "a tool message", p)));
    if (!has_call_id && msg.role == "tool" && !ollama)
      return unexpected(invalid(p + ".tool_call_id", fmt::format("'{}.tool_call_id' is required in a "
                                                                 "tool message", p)));
    if (null_content && !calls)
      return unexpected(invalid(p + ".content", fmt::format("'{}.content' may be null only in an "
                                                            "assistant message with tool_calls", p)));
    if (!has_content && !calls)
      return unexpected(invalid(p + ".content", fmt::format("'{}.content' is required", p)));
    if (msg.role == "tool" && !ollama) { // the function's name, for formats that show it
      for (auto it = out.rbegin(); it != out.rend() && msg.tool_name.empty(); ++it)
        for (const auto& c : it->tool_calls)
          if (c.id == msg.tool_call_id)
            msg.tool_name = c.name;
    }
    out.push_back(std::move(msg));
  }
  return {};
}

} // namespace kvlane::daemon::http
