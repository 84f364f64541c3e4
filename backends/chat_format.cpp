#include "backends/chat_format.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <utility>

namespace kvlane::backends {

namespace {

constexpr std::array<std::string_view, 4> roles{"system", "user", "assistant", "tool"};

using ordered_json = nlohmann::ordered_json;

backend_error invalid(std::string message) {
  return backend_error{backend_errc::invalid_argument, std::move(message)};
}

// Python's str.isspace() code points: what Jinja's `trim` filter (str.strip()) removes.
bool is_python_space(char32_t c) noexcept {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85
         || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028
         || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Length of the UTF-8 sequence for a code point that is_python_space accepts
// at the front (or back) of `s`, 0 if there is none. Only well-formed
// sequences of the listed code points match.
std::size_t space_prefix(std::string_view s) noexcept {
  if (s.empty())
    return 0;
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80)
    return is_python_space(b0) ? 1 : 0;
  if ((b0 & 0xe0) == 0xc0 && s.size() >= 2)
    return is_python_space(static_cast<char32_t>(((b0 & 0x1f) << 6) | (s[1] & 0x3f))) ? 2 : 0;
  if ((b0 & 0xf0) == 0xe0 && s.size() >= 3)
    return is_python_space(static_cast<char32_t>(((b0 & 0x0f) << 12) | ((s[1] & 0x3f) << 6)
                                                 | (s[2] & 0x3f)))
               ? 3
               : 0;
  return 0;
}

std::size_t space_suffix(std::string_view s) noexcept {
  for (std::size_t n = 1; n <= 3 && n <= s.size(); ++n) {
    const auto tail = s.substr(s.size() - n);
    const auto lead = static_cast<unsigned char>(tail[0]);
    if ((lead & 0xc0) == 0x80)
      continue; // a continuation byte: the sequence starts further back
    return space_prefix(tail) == n ? n : 0;
  }
  return 0;
}

std::string_view trim(std::string_view s) noexcept {
  for (std::size_t n; (n = space_prefix(s)) != 0;)
    s.remove_prefix(n);
  for (std::size_t n; (n = space_suffix(s)) != 0;)
    s.remove_suffix(n);
  return s;
}

// Collects the prompt as special tokens and text runs; a run is encoded when
// the next special token (or the end) closes it.
class prompt_builder {
public:
  explicit prompt_builder(const tokenizer& tok) : tok_(tok) {}

  void text(std::string_view t) { run_ += t; }

  expected<void, backend_error> special(std::string_view name) {
    const auto id = tok_.special_token(name);
    if (!id)
      return unexpected(invalid("the tokenizer has no special token '" + std::string(name)
                                + "' that this chat format needs"));
    flush();
    out_.push_back(*id);
    return {};
  }

  std::vector<token_id> finish() {
    flush();
    return std::move(out_);
  }

private:
  void flush() {
    if (run_.empty())
      return;
    const auto ids = tok_.encode(run_, false);
    out_.insert(out_.end(), ids.begin(), ids.end());
    run_.clear();
  }

  const tokenizer& tok_;
  std::string run_;
  std::vector<token_id> out_;
};

#define KVLANE_TRY(expr)                                                                           \
  do {                                                                                             \
    if (auto r_ = (expr); !r_)                                                                     \
      return unexpected(std::move(r_.error()));                                                    \
  } while (false)

expected<void, backend_error> check_roles(std::span<const chat_message> messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    bool known = false;
    for (auto r : roles)
      known = known || messages[i].role == r;
    if (!known)
      return unexpected(invalid("message " + std::to_string(i) + " has role '" + messages[i].role
                                + "'; expected system, user, assistant or tool"));
  }
  return {};
}

// JSON as Python's json.dumps writes it by default (", " and ": " separators), which is what
// the templates' `tojson` filter produces; key order as given.
void python_json(const ordered_json& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      out += first ? "" : ", ";
      first = false;
      out += ordered_json(k).dump();
      out += ": ";
      python_json(v, out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < j.size(); ++i) {
      out += i == 0 ? "" : ", ";
      python_json(j[i], out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
}

std::string python_json(const ordered_json& j) {
  std::string out;
  python_json(j, out);
  return out;
}

expected<ordered_json, backend_error> json_object_of(std::string_view text, const std::string& what) {
  auto j = ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return unexpected(invalid(what + " must be a JSON object"));
  return j;
}

// A tool as the templates see it: {"type": "function", "function": {name, description, parameters}}.
expected<ordered_json, backend_error> tool_json(const chat_tool& t) {
  ordered_json fn{{"name", t.name}};
  if (!t.description.empty())
    fn["description"] = t.description;
  auto params = json_object_of(t.parameters, "the parameters of tool '" + t.name + "'");
  if (!params)
    return unexpected(std::move(params.error()));
  fn["parameters"] = std::move(*params);
  return ordered_json{{"type", "function"}, {"function", std::move(fn)}};
}

expected<ordered_json, backend_error> call_arguments(const chat_tool_call& c) {
  return json_object_of(c.arguments.empty() ? std::string_view{"{}"} : std::string_view{c.arguments},
                        "the arguments of the call to '" + c.name + "'");
}

bool uses_tools(std::span<const chat_message> messages, std::span<const chat_tool> tools) {
  if (!tools.empty())
    return true;
  for (const auto& m : messages)
    if (m.role == "tool" || !m.tool_calls.empty())
      return true;
  return false;
}

// Qwen's template (Qwen3's system section: no default system text).
expected<std::vector<token_id>, backend_error> render_chatml(const tokenizer& tok,
                                                              std::span<const chat_message> messages,
                                                              std::span<const chat_tool> tools,
                                                              bool add_generation_prompt) {
  prompt_builder b(tok);
  std::size_t first = 0;
  if (!tools.empty()) {
    KVLANE_TRY(b.special("<|im_start|>"));
    b.text("system\n");
    if (!messages.empty() && messages[0].role == "system") {
      b.text(messages[0].content);
      b.text("\n\n");
      first = 1;
    }
    b.text("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const auto& t : tools) {
      auto j = tool_json(t);
      if (!j)
        return unexpected(std::move(j.error()));
      b.text("\n");
      b.text(python_json(*j));
    }
    b.text("\n</tools>\n\nFor each function call, return a json object with function name and "
           "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
           "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    KVLANE_TRY(b.special("<|im_end|>"));
    b.text("\n");
  }
  for (std::size_t i = first; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "tool") {
      // Consecutive results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") {
        KVLANE_TRY(b.special("<|im_start|>"));
        b.text("user");
      }
      b.text("\n<tool_response>\n");
      b.text(m.content);
      b.text("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
        KVLANE_TRY(b.special("<|im_end|>"));
        b.text("\n");
      }
      continue;
    }
    KVLANE_TRY(b.special("<|im_start|>"));
    b.text(m.role);
    if (m.tool_calls.empty()) {
      b.text("\n");
      b.text(m.content);
    } else {
      if (!m.content.empty()) {
        b.text("\n");
        b.text(m.content);
      }
      for (const auto& c : m.tool_calls) {
        auto args = call_arguments(c);
        if (!args)
          return unexpected(std::move(args.error()));
        b.text("\n<tool_call>\n{\"name\": \"");
        b.text(c.name);
        b.text("\", \"arguments\": ");
        b.text(python_json(*args));
        b.text("}\n</tool_call>");
      }
    }
    KVLANE_TRY(b.special("<|im_end|>"));
    b.text("\n");
  }
  if (add_generation_prompt) {
    KVLANE_TRY(b.special("<|im_start|>"));
    b.text("assistant\n");
  }
  return b.finish();
}

// Llama 3.1's template for custom tools (tools_in_user_message): the tools go into the first
// user message; a call is the assistant's JSON object; a result is an ipython turn.
expected<std::vector<token_id>, backend_error> render_llama3(const tokenizer& tok,
                                                              std::span<const chat_message> messages,
                                                              std::span<const chat_tool> tools,
                                                              bool add_generation_prompt) {
  prompt_builder b(tok);
  std::string tool_preamble;
  if (!tools.empty()) {
    tool_preamble = "Given the following functions, please respond with a JSON for a function call "
                    "with its proper arguments that best answers the given prompt.\n\n"
                    "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                    "argument name and its value}.Do not use variables.\n\n";
    for (const auto& t : tools) {
      auto j = tool_json(t);
      if (!j)
        return unexpected(std::move(j.error()));
      tool_preamble += j->dump(4, ' ', false, ordered_json::error_handler_t::replace);
      tool_preamble += "\n\n";
    }
    bool has_user = false;
    for (const auto& m : messages)
      has_user = has_user || m.role == "user";
    if (!has_user)
      return unexpected(invalid("the llama3 format puts tools in the first user message; the "
                                "conversation has none"));
  }
  bool tools_placed = tools.empty();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (i == 0)
      KVLANE_TRY(b.special("<|begin_of_text|>"));
    KVLANE_TRY(b.special("<|start_header_id|>"));
    b.text(m.role == "tool" ? std::string_view{"ipython"} : std::string_view{m.role});
    KVLANE_TRY(b.special("<|end_header_id|>"));
    b.text("\n\n");
    if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1)
        return unexpected(invalid("message " + std::to_string(i) + " holds "
                                  + std::to_string(m.tool_calls.size())
                                  + " tool calls; the llama3 format holds one per message"));
      const auto& c = m.tool_calls.front();
      auto args = call_arguments(c);
      if (!args)
        return unexpected(std::move(args.error()));
      b.text("{\"name\": \"" + c.name + "\", \"parameters\": " + python_json(*args) + "}");
    } else if (m.role == "tool") {
      b.text(m.content);
    } else if (m.role == "user" && !tools_placed) {
      b.text(tool_preamble);
      b.text(trim(m.content));
      tools_placed = true;
    } else {
      b.text(trim(m.content));
    }
    KVLANE_TRY(b.special("<|eot_id|>"));
  }
  if (add_generation_prompt) {
    KVLANE_TRY(b.special("<|start_header_id|>"));
    b.text("assistant");
    KVLANE_TRY(b.special("<|end_header_id|>"));
    b.text("\n\n");
  }
  return b.finish();
}

expected<std::vector<token_id>, backend_error> render_exaone(const tokenizer& tok,
                                                              std::span<const chat_message> messages,
                                                              bool add_generation_prompt) {
  prompt_builder b(tok);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (i == 0 && m.role != "system") {
      KVLANE_TRY(b.special("[|system|]"));
      KVLANE_TRY(b.special("[|endofturn|]"));
      b.text("\n");
    }
    KVLANE_TRY(b.special("[|" + m.role + "|]"));
    b.text(m.content);
    if (m.role == "user") {
      b.text("\n");
    } else {
      KVLANE_TRY(b.special("[|endofturn|]"));
      b.text("\n");
    }
  }
  if (add_generation_prompt)
    KVLANE_TRY(b.special("[|assistant|]"));
  return b.finish();
}

#undef KVLANE_TRY

} // namespace

std::string_view to_string(chat_format format) noexcept {
  switch (format) {
  case chat_format::chatml:
    return "chatml";
  case chat_format::llama3:
    return "llama3";
  case chat_format::exaone:
    return "exaone";
  case chat_format::automatic:
    return "auto";
  case chat_format::jinja:
    return "template";
  }
  return "unknown";
}

std::optional<chat_format> parse_chat_format(std::string_view name) noexcept {
  for (auto f : {chat_format::chatml, chat_format::llama3, chat_format::exaone,
                 chat_format::automatic, chat_format::jinja})
    if (name == to_string(f))
      return f;
  return std::nullopt;
}

std::optional<chat_format> detect_chat_format(std::string_view chat_template) noexcept {
  if (chat_template.find("<|start_header_id|>") != std::string_view::npos)
    return chat_format::llama3;
  if (chat_template.find("<|im_start|>") != std::string_view::npos)
    return chat_format::chatml;
  if (chat_template.find("[|endofturn|]") != std::string_view::npos)
    return chat_format::exaone;
  return std::nullopt;
}

std::string_view to_string(tool_call_syntax syntax) noexcept {
  switch (syntax) {
  case tool_call_syntax::none:
    return "none";
  case tool_call_syntax::hermes:
    return "hermes";
  case tool_call_syntax::llama3:
    return "llama3";
  }
  return "unknown";
}

tool_call_syntax detect_tool_syntax(std::string_view t) noexcept {
  const auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
  // A template's text is Jinja source: its JSON quotes may be escaped inside a "..." literal.
  const bool name = has(R"("name": )") || has(R"(\"name\": )");
  const bool arguments = has(R"("arguments": )") || has(R"(\"arguments\": )");
  const bool parameters = has(R"("parameters": )") || has(R"(\"parameters\": )");
  if (has("<tool_call>") && name && arguments && !has("<function=") && !has("<arg_key>")
      && !has("<invoke"))
    return tool_call_syntax::hermes;
  if (has("<|start_header_id|>") && name && parameters && !has("<function=") && !has(">>>")
      && !has("functools"))
    return tool_call_syntax::llama3;
  return tool_call_syntax::none;
}

tool_call_syntax tool_syntax_of(chat_format format, const tokenizer& tok) noexcept {
  if (format == chat_format::automatic || format == chat_format::jinja)
    return detect_tool_syntax(tok.chat_template());
  return tool_syntax_of(format);
}

tool_call_syntax tool_syntax_of(chat_format format) noexcept {
  switch (format) {
  case chat_format::chatml:
    return tool_call_syntax::hermes;
  case chat_format::llama3:
    return tool_call_syntax::llama3;
  case chat_format::exaone:
  case chat_format::automatic:
  case chat_format::jinja:
    return tool_call_syntax::none;
  }
  return tool_call_syntax::none;
}

expected<std::vector<token_id>, backend_error> render_chat(chat_format format, const tokenizer& tok,
                                                            std::span<const chat_message> messages,
                                                            bool add_generation_prompt) {
  return render_chat(format, tok, messages, {}, add_generation_prompt);
}

expected<std::vector<token_id>, backend_error> render_chat(chat_format format, const tokenizer& tok,
                                                            std::span<const chat_message> messages,
                                                            std::span<const chat_tool> tools,
                                                            bool add_generation_prompt) {
  if (auto ok = check_roles(messages); !ok)
    return unexpected(std::move(ok.error()));
  if (uses_tools(messages, tools) && tool_syntax_of(format, tok) == tool_call_syntax::none)
    return unexpected(invalid(
      format == chat_format::automatic || format == chat_format::jinja
        ? std::string("the model's chat template has no tool-call syntax kvlane knows (hermes "
                      "<tool_call> or Llama 3.1 JSON calls): it cannot take tools, tool calls "
                      "or tool results")
        : "the chat format '" + std::string(to_string(format))
            + "' cannot express tools, tool calls or tool results"));
  switch (format) {
  case chat_format::chatml:
    return render_chatml(tok, messages, tools, add_generation_prompt);
  case chat_format::llama3:
    return render_llama3(tok, messages, tools, add_generation_prompt);
  case chat_format::exaone:
    return render_exaone(tok, messages, add_generation_prompt);
  case chat_format::automatic: {
    const auto tmpl = tok.chat_template();
    if (tmpl.empty())
      return unexpected(invalid("the model has no chat template (chat_format = \"auto\"): set "
                                "chat_format in its [[model]] table, or send a prompt to "
                                "/v1/completions"));
    return render_chat(chat_format::jinja, tok, messages, tools, add_generation_prompt);
  }
  case chat_format::jinja:
    return tok.apply_chat_template(messages, tools, add_generation_prompt);
  }
  return unexpected(invalid("unknown chat format"));
}

} // namespace kvlane::backends
