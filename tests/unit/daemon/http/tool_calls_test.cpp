#include "daemon/http/request_decoder.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using namespace kvlane::daemon::http;

namespace {

api_error error_of(const kvlane::expected<generation_request, api_error>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

std::string chat_with(std::string_view fields) {
  return std::string{R"({"model":"m","messages":[{"role":"user","content":"hi"}])"} + std::string{fields} + "}";
}

constexpr std::string_view weather =
  R"({"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"string"}}},"strict":true}})";

} // namespace

TEST_CASE("tool_calls: a chat completion reads tools, tool_choice and parallel_tool_calls") {
  const auto sut = decode_chat_completion(chat_with(fmt::format(
    R"(,"tools":[{}],"tool_choice":{{"type":"function","function":{{"name":"get_weather"}}}},"parallel_tool_calls":false)",
    weather)));
  REQUIRE(sut.has_value());
  REQUIRE(sut->tools.tools.size() == 1);
  CHECK(sut->tools.tools[0].name == "get_weather");
  CHECK(sut->tools.tools[0].description == "d");
  // The schema keeps the client's property order.
  CHECK(sut->tools.tools[0].parameters == R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"string"}}})");
  CHECK(sut->tools.choice.m == tool_choice::mode::named);
  CHECK(sut->tools.choice.name == "get_weather");
  CHECK_FALSE(sut->tools.parallel);
  const auto plain = decode_chat_completion(chat_with(R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required")"));
  REQUIRE(plain.has_value());
  CHECK(plain->tools.tools[0].parameters == R"({"type":"object","properties":{}})");
  CHECK(plain->tools.choice.m == tool_choice::mode::required);
}

TEST_CASE("tool_calls: malformed tools and tool_choice are 400s naming the field") {
  struct bad {
    std::string fields, param;
  };
  const bad cases[] = {
    {R"(,"tools":{})", "tools"},
    {R"(,"tools":[{"type":"function"}])", "tools[0].function"},
    {R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}])", "tools[0].type"},
    {R"(,"tools":[{"type":"function","function":{"name":"a b"}}])", "tools[0].function.name"},
    {R"(,"tools":[{"type":"function","function":{"name":""}}])", "tools[0].function.name"},
    {R"(,"tools":[{"type":"function","function":{"description":"x"}}])", "tools[0].function.name"},
    {R"(,"tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])", "tools[0].function.parameters"},
    {R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}])", "tools[0].function.parameters"},
    {R"(,"tools":[{"type":"function","function":{"name":"f","examples":[]}}])", "tools[0].function.examples"},
    {R"(,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools[1].function.name"},
    {R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"any")", "tool_choice"},
    {R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})", "tool_choice.function.name"},
    {R"(,"tool_choice":"auto")", "tool_choice"},
    {R"(,"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":1)", "parallel_tool_calls"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.fields);
    const auto e = error_of(decode_chat_completion(chat_with(c.fields)));
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
  }
  const auto unknown = error_of(decode_chat_completion(chat_with(R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})")));
  CHECK(unknown.message == "'tool_choice' names the function \"g\", which is not among 'tools'");
}

TEST_CASE("tool_calls: assistant tool calls and tool results are read from OpenAI messages") {
  const auto sut = decode_chat_completion(R"({"model":"m","messages":[
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
    {"role":"tool","tool_call_id":"call_9","content":"cold"}]})");
  REQUIRE(sut.has_value());
  REQUIRE(sut->messages.size() == 3);
  const auto& call = sut->messages[1];
  CHECK(call.content.empty());
  REQUIRE(call.tool_calls.size() == 1);
  CHECK(call.tool_calls[0].id == "call_9");
  CHECK(call.tool_calls[0].name == "get_weather");
  CHECK(call.tool_calls[0].arguments == R"({"city":"Oslo"})");
  CHECK(sut->messages[2].role == "tool");
  CHECK(sut->messages[2].tool_call_id == "call_9");
  CHECK(sut->messages[2].tool_name == "get_weather");
}

TEST_CASE("tool_calls: bad tool messages are 400s naming the field") {
  const auto args = error_of(decode_chat_completion(R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]})"));
  CHECK(args.param == "messages[0].tool_calls[0].function.arguments");
  const auto no_id = error_of(decode_chat_completion(R"({"model":"m","messages":[{"role":"tool","content":"x"}]})"));
  CHECK(no_id.param == "messages[0].tool_call_id");
  const auto null_user = error_of(decode_chat_completion(R"({"model":"m","messages":[{"role":"user","content":null}]})"));
  CHECK(null_user.param == "messages[0].content");
  const auto user_calls = error_of(decode_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})"));
  CHECK(user_calls.param == "messages[0].tool_calls");
}

TEST_CASE("tool_calls: Ollama chat reads tools, format, object arguments and tool_name") {
  const auto sut = decode_ollama_chat(R"({"model":"m","format":{"type":"object"},
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],
    "messages":[{"role":"user","content":"w?"},
      {"role":"assistant","content":"","tool_calls":[{"function":{"index":0,"name":"get_weather","arguments":{"city":"Rome"}}}]},
      {"role":"tool","content":"hot","tool_name":"get_weather"}]})");
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string{} : sut.error().message));
  CHECK(sut->format.k == output_format::kind::json_schema);
  CHECK(sut->format.param == "format");
  REQUIRE(sut->tools.tools.size() == 1);
  CHECK(sut->messages[1].tool_calls[0].arguments == R"({"city":"Rome"})");
  CHECK(sut->messages[2].tool_name == "get_weather");
  const auto json_mode = decode_ollama_generate(R"({"model":"m","prompt":"p","format":"json"})");
  REQUIRE(json_mode.has_value());
  CHECK(json_mode->format.k == output_format::kind::json_object);
  const auto string_args = error_of(decode_ollama_chat(R"({"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]})"));
  CHECK(string_args.param == "messages[0].tool_calls[0].function.arguments");
  const auto choice = error_of(decode_ollama_chat(R"({"model":"m","messages":[],"tool_choice":"auto"})"));
  CHECK(choice.param == "tool_choice");
  CHECK(choice.code == "unsupported_parameter");
}

TEST_CASE("tool_calls: response_format is read into the request") {
  const auto sut = decode_chat_completion(chat_with(R"(,"response_format":{"type":"json_object"})"));
  REQUIRE(sut.has_value());
  CHECK(sut->format.k == output_format::kind::json_object);
}
