#include "backends/chat_format.hpp"

namespace kvlane::backends {

namespace {

struct markup {
  std::string_view before_role, after_role, end_of_message;
};

markup markup_of(chat_format f) {
  switch (f) {
    case chat_format::chatml: return {"<|im_start|>", "\n", "<|im_end|>\n"};
    case chat_format::llama3:
      return {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>"};
    case chat_format::exaone: return {"[|", "|]", "[|endofturn|]\n"};
  }
  return {"", "", ""};
}

} // namespace

std::string_view to_string(chat_format f) noexcept {
  switch (f) {
    case chat_format::chatml: return "chatml";
    case chat_format::llama3: return "llama3";
    case chat_format::exaone: return "exaone";
  }
  return "unknown";
}

std::optional<chat_format> parse_chat_format(std::string_view name) noexcept {
  for (auto f : {chat_format::chatml, chat_format::llama3, chat_format::exaone})
    if (to_string(f) == name)
      return f;
  return std::nullopt;
}

expected<std::vector<token_id>, backend_error>
render_chat(chat_format f, const tokenizer& tok, std::span<const chat_message> messages,
            bool add_generation_prompt) {
  const auto m = markup_of(f);
  std::string text;
  for (const auto& msg : messages) {
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return unexpected(backend_error{backend_errc::invalid_argument,
                                      "unknown chat role '" + msg.role + "'"});
    text.append(m.before_role).append(msg.role).append(m.after_role);
    text.append(msg.content).append(m.end_of_message);
  }
  if (add_generation_prompt)
    text.append(m.before_role).append("assistant").append(m.after_role);
  std::vector<token_id> out{tok.bos()};
  auto body = tok.encode(text);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

} // namespace kvlane::backends
