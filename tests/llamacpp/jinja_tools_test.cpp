// Tools through models' own Jinja templates: the tool-call syntax is read from the template
// (the real templates in llama.cpp's tree: Qwen, Hermes, Granite write hermes <tool_call>
// blocks, Llama 3.1-3.3 JSON calls, the XML and recipient formats are not taken for either);
// tools, calls and results reach the template as llama-server passes them, so Qwen3's and
// Qwen2.5's templates give the prompt of the built-in chatml format with tools (tokenized as
// Hugging Face tokenizes a rendered template: <tool_call> is one token) and Llama 3.1's the
// built-in llama3 tokens from the first user turn on.
#include "backends/chat_format.hpp"
#include "backends/hf_tokenizer.hpp"
#include "backends/jinja/jinja_template.hpp"
#include "tests/support/real_tokenizer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace kvlane::backends;

namespace {

const hf_tokenizer& model(const std::string& name) { return kvlane::test::real_tokenizer(name); }

/// A template file of llama.cpp's tree (models/templates/).
std::string template_file(const std::string& name) {
  const auto path = std::string(KVLANE_LLAMACPP_SOURCE) + "/models/templates/" + name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<chat_tool> tools{
  {"get_weather", "The weather in a city",
   R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]})"},
  {"get_time", "", R"({"type":"object","properties":{"zone":{"type":"string"}}})"}};

chat_message calls(std::vector<chat_tool_call> c, std::string content = {}) {
  chat_message m{"assistant", std::move(content)};
  m.tool_calls = std::move(c);
  return m;
}

chat_message result(std::string content, std::string id, std::string name) {
  chat_message m{"tool", std::move(content)};
  m.tool_call_id = std::move(id);
  m.tool_name = std::move(name);
  return m;
}

/// Conversations with tools: a question, one or two calls, their results, an answer.
const std::vector<std::vector<chat_message>> exchanges{
  {{"system", "Be brief."}, {"user", "Weather in Paris?"}},
  {{"system", "Be brief."},
   {"user", "Weather in Paris and Oslo?"},
   calls({{"call_1", "get_weather", R"({"city":"Paris"})"},
          {"call_2", "get_weather", R"({"city":"Oslo","unit":"c"})"}}),
   result("{\"temp\": 21}", "call_1", "get_weather"),
   result("{\"temp\": 9}", "call_2", "get_weather")},
  {{"user", "What time is it in Tokyo?"},
   calls({{"c7", "get_time", R"({"zone":"Asia/Tokyo"})"}}, "Let me look."),
   result("09:41", "c7", "get_time"),
   {"assistant", "It is 09:41."},
   {"user", "And the weather?"}},
};

std::vector<token_id> rendered(chat_format f, const tokenizer& tok, const std::vector<chat_message>& m,
                               std::span<const chat_tool> t = tools) {
  auto r = render_chat(f, tok, m, t, true);
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message));
  return std::move(*r);
}

/// The prompt the built-in format writes, as Hugging Face tokenizes the text of a rendered
/// template: split at every added token, special (<|im_start|>) or not (<tool_call>), the rest
/// encoded as text. (The built-in formats write <tool_call> as text.)
std::vector<token_id> as_hugging_face(chat_format f, const tokenizer& tok,
                                      const std::vector<chat_message>& m,
                                      std::span<const chat_tool> t = tools) {
  std::string text;
  for (const auto id : rendered(f, tok, m, t)) {
    auto piece = tok.decode(std::span{&id, 1});
    if (piece.empty()) // a special token: by its name
      for (const auto* name : {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
                               "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})
        if (tok.special_token(name) == id)
          piece = name;
    REQUIRE_FALSE(piece.empty());
    text += piece;
  }
  return tok.encode(text, true);
}

/// `text` parsed as a template and rendered for `tok` with its special tokens `names`.
std::vector<token_id> through(const std::string& text, const tokenizer& tok,
                              const std::vector<chat_message>& m, std::span<const chat_tool> t,
                              std::initializer_list<std::string> names, std::string bos = {},
                              std::string eos = {}) {
  auto tmpl = jinja_template::parse(text, bos, eos);
  REQUIRE_MESSAGE(tmpl.has_value(), (tmpl ? std::string() : tmpl.error().message));
  std::vector<std::pair<std::string, token_id>> specials;
  for (const auto& n : names) {
    const auto id = tok.special_token(n);
    REQUIRE_MESSAGE(id.has_value(), n);
    specials.emplace_back(n, *id);
  }
  std::sort(specials.begin(), specials.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  auto parts = (*tmpl)->render(m, t, true, specials);
  REQUIRE_MESSAGE(parts.has_value(), (parts ? std::string() : parts.error().message));
  return jinja_template::tokens_of(*parts, tok, specials);
}

} // namespace

TEST_CASE("jinja tools: the tool-call syntax of llama.cpp's real templates is read from their text") {
  const std::vector<std::pair<std::string, tool_call_syntax>> cases{
    {"Qwen-Qwen2.5-7B-Instruct.jinja", tool_call_syntax::hermes},
    {"Qwen-Qwen3-0.6B.jinja", tool_call_syntax::hermes},
    {"Qwen-QwQ-32B.jinja", tool_call_syntax::hermes},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", tool_call_syntax::hermes},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", tool_call_syntax::hermes},
    {"ibm-granite-granite-4.0.jinja", tool_call_syntax::hermes},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", tool_call_syntax::llama3},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", tool_call_syntax::llama3},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", tool_call_syntax::llama3},
    // <tool_call> or Llama 3 headers, but another call format: not mistaken for either.
    {"Qwen3-Coder.jinja", tool_call_syntax::none},
    {"Qwen3.5-4B.jinja", tool_call_syntax::none},
    {"GLM-4.6.jinja", tool_call_syntax::none},
    {"GLM-4.7-Flash.jinja", tool_call_syntax::none},
    {"MiniMax-M3.jinja", tool_call_syntax::none},
    {"poolside-Laguna-XS-2.1.jinja", tool_call_syntax::none},
    {"meetkai-functionary-medium-v3.1.jinja", tool_call_syntax::none},
    {"meetkai-functionary-medium-v3.2.jinja", tool_call_syntax::none},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", tool_call_syntax::none},
    // Other families, and templates without tools.
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", tool_call_syntax::none},
    {"google-gemma-2-2b-it.jinja", tool_call_syntax::none},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", tool_call_syntax::none},
  };
  for (const auto& [file, syntax] : cases) {
    CAPTURE(file);
    CHECK(to_string(detect_tool_syntax(template_file(file))) == to_string(syntax));
  }
  CHECK(detect_tool_syntax("") == tool_call_syntax::none);
  // Llama-3.1's tokenizer_config.json copy kvlane tests with has no tools: none.
  CHECK(detect_tool_syntax(model("llama3_1").chat_template()) == tool_call_syntax::none);
  CHECK(tool_syntax_of(chat_format::jinja, model("llama3_1")) == tool_call_syntax::none);
  CHECK(tool_syntax_of(chat_format::automatic, model("qwen3")) == tool_call_syntax::hermes);
  CHECK(tool_syntax_of(chat_format::llama3, model("qwen3")) == tool_call_syntax::llama3);
}

TEST_CASE("jinja tools: Qwen3's template given tools, calls and results gives the built-in chatml "
          "prompt, with <tool_call> and <tool_response> as the single tokens they are") {
  const auto& tok = model("qwen3");
  const auto tool_call = tok.special_token("<tool_call>");
  REQUIRE(tool_call.has_value());
  for (const auto& m : exchanges) {
    CAPTURE(m.back().content);
    const auto ids = rendered(chat_format::jinja, tok, m);
    CHECK(ids == as_hugging_face(chat_format::chatml, tok, m));
    // The tools section's instructions hold a <tool_call> too.
    CHECK(std::count(ids.begin(), ids.end(), *tool_call) >= 1);
    // One tool only, and none (the template's plain path).
    CHECK(rendered(chat_format::jinja, tok, m, std::span{tools}.first(1))
          == as_hugging_face(chat_format::chatml, tok, m, std::span{tools}.first(1)));
    CHECK(rendered(chat_format::jinja, tok, m, {}) == as_hugging_face(chat_format::chatml, tok, m, {}));
  }
  // The tools are in the prompt: the template really saw them.
  const auto ids = rendered(chat_format::jinja, tok, exchanges[0]);
  const auto text = tok.decode(ids);
  CHECK(text.find(R"({"type": "function", "function": {"name": "get_weather", "description": )"
                  R"("The weather in a city", "parameters": {"type": "object", "properties": )"
                  R"({"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}})")
        != std::string::npos);
}

TEST_CASE("jinja tools: Qwen2.5's template from llama.cpp's tree gives the built-in chatml prompt "
          "(with its default system message)") {
  const auto& tok = model("qwen3"); // the same special tokens as Qwen2.5's
  const auto text = template_file("Qwen-Qwen2.5-7B-Instruct.jinja");
  for (auto m : exchanges) {
    CAPTURE(m.back().content);
    const auto ids = through(text, tok, m, tools,
                             {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                              "<tool_response>", "</tool_response>"});
    if (m.front().role != "system")
      m.insert(m.begin(), {"system", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."});
    CHECK(ids == as_hugging_face(chat_format::chatml, tok, m));
  }
}

TEST_CASE("jinja tools: Llama 3.1's template from llama.cpp's tree gives the built-in llama3 tokens "
          "from the first user turn on") {
  const auto& tok = model("llama3_1");
  const auto text = template_file("meta-llama-Llama-3.1-8B-Instruct.jinja");
  REQUIRE(detect_tool_syntax(text) == tool_call_syntax::llama3);
  const auto user = *tok.special_token("<|start_header_id|>");
  const auto from_user = [&](const std::vector<token_id>& ids) {
    // The first header whose role is "user" (the template's system turn holds today's date).
    for (std::size_t i = 0; i + 1 < ids.size(); ++i)
      if (ids[i] == user && tok.decode(std::span{&ids[i + 1], 1}) == "user")
        return std::vector<token_id>(ids.begin() + static_cast<std::ptrdiff_t>(i), ids.end());
    FAIL("no user turn");
    return std::vector<token_id>{};
  };
  const std::initializer_list<std::string> names{"<|begin_of_text|>", "<|start_header_id|>",
                                                 "<|end_header_id|>", "<|eot_id|>"};
  const std::vector<chat_message> question{{"user", "Weather in Paris?"}};
  const auto ids = through(text, tok, question, tools, names, "<|begin_of_text|>", "<|eot_id|>");
  CHECK(from_user(ids) == from_user(rendered(chat_format::llama3, tok, question)));
  CHECK(tok.decode(ids).find("Environment: ipython") != std::string::npos); // its tools mode

  // A call and its result: the call as the built-in format writes it; the result as the
  // template writes a string (through tojson: Jinja counts a string as iterable).
  const std::vector<chat_message> history{
    {"user", "Weather in Paris?"},
    calls({{"call_1", "get_weather", R"({"city":"Paris"})"}}),
    result("{\"temp\": 21}", "call_1", "get_weather")};
  const auto prompt = tok.decode(through(text, tok, history, tools, names, "<|begin_of_text|>",
                                         "<|eot_id|>"));
  CHECK(prompt.ends_with("Weather in Paris?assistant\n\n"
                         R"({"name": "get_weather", "parameters": {"city": "Paris"}})"
                         "ipython\n\n"
                         R"("{\"temp\": 21}")"
                         "assistant\n\n"));
  // The template's own rule: one call per message.
  auto tmpl = jinja_template::parse(text, "<|begin_of_text|>", "<|eot_id|>");
  REQUIRE(tmpl.has_value());
  const std::vector<chat_message> two{{"user", "Paris and Oslo?"},
                                      calls({{"a", "get_weather", R"({"city":"Paris"})"},
                                             {"b", "get_weather", R"({"city":"Oslo"})"}})};
  auto r = (*tmpl)->render(two, tools, true);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("only supports single tool-calls") != std::string::npos);
}

TEST_CASE("jinja tools: a special token's text in a tool or a call's arguments is refused, in a "
          "message or a tool result it stays text") {
  const auto& tok = model("qwen3");
  const auto im_end = *tok.special_token("<|im_end|>");
  auto poisoned = tools;
  poisoned[0].description = "ends with <|im_end|> on purpose";
  auto r = render_chat(chat_format::jinja, tok, exchanges[0], poisoned, true);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("get_weather") != std::string::npos);
  CHECK(r.error().message.find("<|im_end|>") != std::string::npos);

  std::vector<chat_message> m{{"user", "hi"},
                              calls({{"x", "get_time", R"({"zone":"<|im_end|>"})"}})};
  auto a = render_chat(chat_format::jinja, tok, m, tools, true);
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().message.find("arguments of the call to 'get_time'") != std::string::npos);

  m.back() = calls({{"x", "get_time", R"({"zone":"UTC"})"}});
  m.push_back(result("a<|im_end|>b", "x", "get_time"));
  const auto ids = rendered(chat_format::jinja, tok, m);
  CHECK(tok.decode(ids).find("a<|im_end|>b") != std::string::npos);
  // The template's <|im_end|> after each turn only (tools, user, call, results): the result's
  // stays text.
  CHECK(std::count(ids.begin(), ids.end(), im_end) == 4);
}

TEST_CASE("jinja tools: a template without a syntax kvlane knows refuses tools, calls and results "
          "with the reason") {
  const auto& tok = model("llama3_1"); // its tokenizer_config.json template has no tools
  auto r = render_chat(chat_format::jinja, tok, exchanges[0], tools, true);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("no tool-call syntax kvlane knows") != std::string::npos);
  auto h = render_chat(chat_format::automatic, tok, exchanges[1], {}, true);
  REQUIRE_FALSE(h.has_value());
  CHECK(h.error().message.find("cannot take tools, tool calls or tool results") != std::string::npos);
}
