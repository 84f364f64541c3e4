// The tool-call syntax a Jinja chat template teaches, read from its text (the real templates
// are checked in tests/llamacpp/jinja_tools_test.cpp): the call shapes of Qwen/Hermes and
// Llama 3.1 templates, written as templates write them, and the look-alikes that are not them.
#include "backends/chat_format.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::backends;

namespace {

struct templated : tokenizer {
  std::string text;
  explicit templated(std::string t) : text(std::move(t)) {}
  std::vector<token_id> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const token_id>) const override { return {}; }
  std::optional<token_id> bos() const noexcept override { return std::nullopt; }
  std::span<const token_id> stop_tokens() const noexcept override { return {}; }
  std::optional<token_id> special_token(std::string_view) const noexcept override { return std::nullopt; }
  std::uint32_t size() const noexcept override { return 0; }
  std::string_view chat_template() const noexcept override { return text; }
};

// As Qwen2.5's template writes a call, and as Hermes 3's describes one (quotes escaped in a
// "..." literal).
const std::string qwen_call = R"({{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }})"
                              R"({{- '", "arguments": ' }}{{- tool_call.arguments | tojson }})";
const std::string hermes_doc = R"({{- "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args>}" }})";
const std::string llama_doc =
  R"({{- "<|start_header_id|>user<|end_header_id|>\n\n" }})"
  R"({{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }})";

} // namespace

TEST_CASE("tool syntax: hermes and llama3 templates are recognised by the calls they write") {
  CHECK(detect_tool_syntax(qwen_call) == tool_call_syntax::hermes);
  CHECK(detect_tool_syntax(hermes_doc) == tool_call_syntax::hermes);
  CHECK(detect_tool_syntax(llama_doc) == tool_call_syntax::llama3);
  CHECK(to_string(tool_call_syntax::hermes) == "hermes");
}

TEST_CASE("tool syntax: look-alikes and templates without tools are none") {
  // XML calls that also open with <tool_call> (Qwen3-Coder, GLM).
  CHECK(detect_tool_syntax(qwen_call + "<function=x><parameter=y>") == tool_call_syntax::none);
  CHECK(detect_tool_syntax(qwen_call + "<arg_key>") == tool_call_syntax::none);
  // <tool_call> without the JSON object, Llama headers without the parameters object.
  CHECK(detect_tool_syntax("{{ '<tool_call>' + tc.name }}") == tool_call_syntax::none);
  CHECK(detect_tool_syntax("<|start_header_id|>{{ m.role }}<|end_header_id|>") == tool_call_syntax::none);
  // Functionary and FireFunction write Llama 3 headers with calls of their own.
  CHECK(detect_tool_syntax(llama_doc + ">>>all") == tool_call_syntax::none);
  CHECK(detect_tool_syntax(llama_doc + " functools[") == tool_call_syntax::none);
  CHECK(detect_tool_syntax("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}")
        == tool_call_syntax::none);
}

TEST_CASE("tool syntax: template formats take it from the model's template, built-in formats have "
          "their own, and a template without one refuses tools before rendering") {
  const templated qwen{qwen_call};
  const templated other{"{{ messages[0].content }}"};
  CHECK(tool_syntax_of(chat_format::automatic, qwen) == tool_call_syntax::hermes);
  CHECK(tool_syntax_of(chat_format::jinja, qwen) == tool_call_syntax::hermes);
  CHECK(tool_syntax_of(chat_format::jinja, other) == tool_call_syntax::none);
  CHECK(tool_syntax_of(chat_format::llama3, qwen) == tool_call_syntax::llama3);
  CHECK(tool_syntax_of(chat_format::exaone, qwen) == tool_call_syntax::none);

  const std::vector<chat_message> m{{"user", "hi"}};
  const std::vector<chat_tool> tools{{"f", "", R"({"type":"object"})"}};
  auto r = render_chat(chat_format::jinja, other, m, tools, true);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == backend_errc::invalid_argument);
  CHECK(r.error().message.find("no tool-call syntax kvlane knows") != std::string::npos);
}
