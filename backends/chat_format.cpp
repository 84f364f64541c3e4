#include "backends/chat_format.hpp"

#include <array>
#include <utility>

namespace kvlane::backends {

namespace {

constexpr std::array<std::string_view, 3> roles{"system", "user", "assistant"};

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
                                + "'; expected system, user or assistant"));
  }
  return {};
}

expected<std::vector<token_id>, backend_error> render_chatml(const tokenizer& tok,
                                                              std::span<const chat_message> messages,
                                                              bool add_generation_prompt) {
  prompt_builder b(tok);
  for (const auto& m : messages) {
    KVLANE_TRY(b.special("<|im_start|>"));
    b.text(m.role);
    b.text("\n");
    b.text(m.content);
    KVLANE_TRY(b.special("<|im_end|>"));
    b.text("\n");
  }
  if (add_generation_prompt) {
    KVLANE_TRY(b.special("<|im_start|>"));
    b.text("assistant\n");
  }
  return b.finish();
}

expected<std::vector<token_id>, backend_error> render_llama3(const tokenizer& tok,
                                                              std::span<const chat_message> messages,
                                                              bool add_generation_prompt) {
  prompt_builder b(tok);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i == 0)
      KVLANE_TRY(b.special("<|begin_of_text|>"));
    KVLANE_TRY(b.special("<|start_header_id|>"));
    b.text(messages[i].role);
    KVLANE_TRY(b.special("<|end_header_id|>"));
    b.text("\n\n");
    b.text(trim(messages[i].content));
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

expected<std::vector<token_id>, backend_error> render_chat(chat_format format, const tokenizer& tok,
                                                            std::span<const chat_message> messages,
                                                            bool add_generation_prompt) {
  if (auto ok = check_roles(messages); !ok)
    return unexpected(std::move(ok.error()));
  switch (format) {
  case chat_format::chatml:
    return render_chatml(tok, messages, add_generation_prompt);
  case chat_format::llama3:
    return render_llama3(tok, messages, add_generation_prompt);
  case chat_format::exaone:
    return render_exaone(tok, messages, add_generation_prompt);
  case chat_format::automatic: {
    const auto tmpl = tok.chat_template();
    if (tmpl.empty())
      return unexpected(invalid("the model has no chat template (chat_format = \"auto\"): set "
                                "chat_format in its [[model]] table, or send a prompt to "
                                "/v1/completions"));
    return render_chat(chat_format::jinja, tok, messages, add_generation_prompt);
  }
  case chat_format::jinja:
    return tok.apply_chat_template(messages, add_generation_prompt);
  }
  return unexpected(invalid("unknown chat format"));
}

} // namespace kvlane::backends
