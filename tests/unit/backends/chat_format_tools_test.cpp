#include "backends/chat_format.hpp"

#include "backends/byte_tokenizer.hpp"
#include "backends/hf_tokenizer.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane::backends;

namespace {

/// The prompt as text: special tokens by their names, other tokens by their bytes.
std::string text_of(const std::vector<token_id>& ids, const tokenizer& tok,
                    std::initializer_list<std::string_view> specials) {
  std::string out;
  for (const auto id : ids) {
    bool named = false;
    for (const auto s : specials)
      if (tok.special_token(s) == id) {
        out += s;
        named = true;
      }
    if (!named)
      out += tok.decode(std::span{&id, 1});
  }
  return out;
}

const std::vector<chat_tool> weather{
  {"get_weather", "The weather in a city",
   R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]})"}};

} // namespace

TEST_CASE("chat_format: chatml renders tools, calls and results as Qwen's template does") {
  const byte_tokenizer tok;
  std::vector<chat_message> messages{{"system", "Be brief."}, {"user", "Weather in Paris and Oslo?"}};
  chat_message call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"},
                     {"call_2", "get_weather", R"({"city":"Oslo","unit":"c"})"}};
  messages.push_back(call);
  chat_message r1{"tool", "{\"temp\": 21}"};
  r1.tool_call_id = "call_1";
  chat_message r2{"tool", "{\"temp\": 9}"};
  r2.tool_call_id = "call_2";
  messages.push_back(r1);
  messages.push_back(r2);
  auto sut = render_chat(chat_format::chatml, tok, messages, weather, true);
  REQUIRE(sut.has_value());
  CHECK(text_of(*sut, tok, {"<|im_start|>", "<|im_end|>"})
        == "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
           "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
           "XML tags:\n<tools>\n"
           R"({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", )"
           R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}})"
           "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
           "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
           "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
           "<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n"
           "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n"
           "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\n"
           "{\"temp\": 9}\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("chat_format: chatml without tools renders as before") {
  const byte_tokenizer tok;
  const std::vector<chat_message> messages{{"user", "Hi"}};
  auto with = render_chat(chat_format::chatml, tok, messages, {}, true);
  auto without = render_chat(chat_format::chatml, tok, messages, true);
  REQUIRE(with.has_value());
  REQUIRE(without.has_value());
  CHECK(*with == *without);
}

TEST_CASE("chat_format: llama3 puts tools in the first user message, calls as JSON, results as ipython") {
  auto tiny = hf_tokenizer::load(std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/fixtures/tiny");
  REQUIRE(tiny.has_value());
  const auto& tok = **tiny;
  std::vector<chat_message> messages{{"user", "Weather in Paris?"}};
  chat_message call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  messages.push_back(call);
  chat_message result{"tool", "{\"temp\": 21}"};
  result.tool_call_id = "call_1";
  messages.push_back(result);
  auto sut = render_chat(chat_format::llama3, tok, messages, weather, true);
  REQUIRE(sut.has_value());
  const auto text = text_of(*sut, tok, {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  CHECK(text
        == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, "
           "please respond with a JSON for a function call with its proper arguments that best answers "
           "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
           "dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": "
           "\"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
           "\"description\": \"The weather in a city\",\n        \"parameters\": {\n            "
           "\"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n"
           "                    \"type\": \"string\"\n                },\n                \"unit\": {\n"
           "                    \"enum\": [\n                        \"c\",\n                        "
           "\"f\"\n                    ]\n                }\n            },\n            \"required\": [\n"
           "                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
           "{\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 21}"
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  messages[1].tool_calls.push_back({"call_2", "get_weather", "{}"});
  auto two = render_chat(chat_format::llama3, tok, messages, weather, true);
  REQUIRE_FALSE(two.has_value());
  CHECK(two.error().message == "message 1 holds 2 tool calls; the llama3 format holds one per message");
}

TEST_CASE("chat_format: a format without tool syntax refuses tools, calls and results") {
  const byte_tokenizer tok;
  const std::vector<chat_message> messages{{"user", "Hi"}};
  auto sut = render_chat(chat_format::exaone, tok, messages, weather, true);
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().message == "the chat format 'exaone' cannot express tools, tool calls or tool results");
  CHECK(tool_syntax_of(chat_format::chatml) == tool_call_syntax::hermes);
  CHECK(tool_syntax_of(chat_format::llama3) == tool_call_syntax::llama3);
  CHECK(tool_syntax_of(chat_format::automatic) == tool_call_syntax::none);
}

TEST_CASE("chat_format: call arguments and tool parameters must be JSON objects") {
  const byte_tokenizer tok;
  chat_message call{"assistant", ""};
  call.tool_calls = {{"c", "get_weather", "[1]"}};
  const std::vector<chat_message> messages{{"user", "Hi"}, call};
  auto sut = render_chat(chat_format::chatml, tok, messages, {}, false);
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().message == "the arguments of the call to 'get_weather' must be a JSON object");
}
