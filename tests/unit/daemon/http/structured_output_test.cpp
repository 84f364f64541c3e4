#include "daemon/http/structured_output.hpp"

#include "common/grammar/matcher.hpp"
#include "daemon/http/tool_grammar.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace kvlane::daemon::http;
using kvlane::backends::chat_format;
using kvlane::backends::chat_tool;
using kvlane::backends::tool_call_syntax;
using json = nlohmann::ordered_json;

using kvlane::test::accepts;

namespace {

const std::vector<chat_tool> tools{
  {"get_weather", "",
   R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city","unit"]})"},
  {"get_time", "", R"({"type":"object","properties":{}})"}};

tool_request offer(tool_choice::mode m, std::string name = {}, bool parallel = true) {
  tool_request t;
  t.tools = tools;
  t.choice.m = m;
  t.choice.name = std::move(name);
  t.parallel = parallel;
  return t;
}

auto build(const output_format& f, const tool_request& t, chat_format chat = chat_format::chatml) {
  return build_constraint(f, t, chat, "m1");
}

} // namespace

TEST_CASE("structured_output: response_format json_object and json_schema decode, text is none") {
  auto text = decode_response_format(json::parse(R"({"type":"text"})"));
  REQUIRE(text.has_value());
  CHECK(text->k == output_format::kind::text);
  auto object = decode_response_format(json::parse(R"({"type":"json_object"})"));
  REQUIRE(object.has_value());
  CHECK(object->k == output_format::kind::json_object);
  auto schema = decode_response_format(json::parse(
    R"({"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}}})"));
  REQUIRE(schema.has_value());
  CHECK(schema->k == output_format::kind::json_schema);
  CHECK(schema->schema == R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");
}

TEST_CASE("structured_output: bad response_format and format values are 400s naming the field") {
  auto no_name = decode_response_format(json::parse(R"({"type":"json_schema","json_schema":{"schema":{}}})"));
  REQUIRE_FALSE(no_name.has_value());
  CHECK(no_name.error().param == "response_format.json_schema.name");
  auto bad_type = decode_response_format(json::parse(R"({"type":"yaml"})"));
  REQUIRE_FALSE(bad_type.has_value());
  CHECK(bad_type.error().param == "response_format.type");
  auto extra = decode_response_format(json::parse(R"({"type":"json_object","x":1})"));
  REQUIRE_FALSE(extra.has_value());
  CHECK(extra.error().param == "response_format.x");
  CHECK(extra.error().code == "unsupported_parameter");
  auto not_schema = decode_response_format(json::parse(R"({"type":"json_schema","json_schema":{"name":"n","schema":[1]}})"));
  REQUIRE_FALSE(not_schema.has_value());
  CHECK(not_schema.error().param == "response_format.json_schema.schema");
  auto ollama_bad = decode_ollama_format(json::parse(R"("xml")"));
  REQUIRE_FALSE(ollama_bad.has_value());
  CHECK(ollama_bad.error().message == "'format' must be \"json\" or a JSON Schema object, got \"xml\"");
  auto ollama_json = decode_ollama_format(json::parse(R"("json")"));
  REQUIRE(ollama_json.has_value());
  CHECK(ollama_json->k == output_format::kind::json_object);
  auto ollama_none = decode_ollama_format(json::parse(R"("")"));
  REQUIRE(ollama_none.has_value());
  CHECK(ollama_none->k == output_format::kind::text);
}

TEST_CASE("structured_output: a schema holds from the first token, in the schema's property order") {
  auto f = decode_ollama_format(json::parse(
    R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"boolean"}},"required":["b","a"]})"));
  REQUIRE(f.has_value());
  auto sut = build(*f, {});
  REQUIRE(sut.has_value());
  CHECK((*sut)->triggers.empty());
  CHECK(accepts(*sut, R"({"b":12,"a":true})"));
  CHECK_FALSE(accepts(*sut, R"({"a":true,"b":12})"));
  CHECK_FALSE(accepts(*sut, R"(Sure: {"b":12,"a":true})"));
}

TEST_CASE("structured_output: an unsupported schema keyword is a 400 naming it and the field") {
  auto f = decode_response_format(json::parse(
    R"({"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"x":{"type":"string","contentEncoding":"base64"}}}}})"));
  REQUIRE(f.has_value());
  auto sut = build(*f, {});
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().status == 400);
  CHECK(sut.error().param == "response_format.json_schema.schema");
  CHECK(sut.error().message.find("contentEncoding") != std::string::npos);
  tool_request t = offer(tool_choice::mode::automatic);
  t.tools[1].parameters = R"({"type":"object","properties":{"n":{"type":"number","multipleOf":2}}})";
  auto tool = build({}, t);
  REQUIRE_FALSE(tool.has_value());
  CHECK(tool.error().param == "tools[1].function.parameters");
  CHECK(tool.error().message.find("multipleOf") != std::string::npos);
  CHECK(tool.error().message.find("get_time") != std::string::npos);
}

TEST_CASE("structured_output: plain text needs no constraint; json_object any object") {
  auto none = build({}, {});
  REQUIRE(none.has_value());
  CHECK(*none == nullptr);
  output_format object;
  object.k = output_format::kind::json_object;
  auto sut = build(object, {});
  REQUIRE(sut.has_value());
  CHECK(accepts(*sut, R"({"anything":[1,{"x":null}]})"));
  CHECK_FALSE(accepts(*sut, "[1]"));
  // tool_choice none: the tools are only shown; the format still holds.
  auto shown = build(object, offer(tool_choice::mode::none));
  REQUIRE(shown.has_value());
  CHECK(accepts(*shown, "{}"));
}

TEST_CASE("structured_output: tool_choice auto waits for the call's opening; the call follows its schema") {
  auto sut = build({}, offer(tool_choice::mode::automatic));
  REQUIRE(sut.has_value());
  CHECK((*sut)->triggers == std::vector<std::string>{"<tool_call>"});
  CHECK(accepts(*sut, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>"));
  CHECK(accepts(*sut, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\n"
                      "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"));
  CHECK_FALSE(accepts(*sut, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"k\"}}</tool_call>"));
  CHECK_FALSE(accepts(*sut, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>"));
  CHECK_FALSE(accepts(*sut, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>"));
}

TEST_CASE("structured_output: required and a named function hold from the first token") {
  auto required = build({}, offer(tool_choice::mode::required, {}, false));
  REQUIRE(required.has_value());
  CHECK((*required)->triggers.empty());
  CHECK(accepts(*required, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"));
  CHECK_FALSE(accepts(*required, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\n"
                                 "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"));
  auto named = build({}, offer(tool_choice::mode::named, "get_weather"));
  REQUIRE(named.has_value());
  CHECK(accepts(*named, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\",\"unit\":\"f\"}}</tool_call>"));
  CHECK_FALSE(accepts(*named, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"));
}

TEST_CASE("structured_output: llama3 calls are one JSON object with parameters") {
  auto sut = build({}, offer(tool_choice::mode::automatic), chat_format::llama3);
  REQUIRE(sut.has_value());
  CHECK((*sut)->triggers == std::vector<std::string>{"{\"name\""});
  CHECK(accepts(*sut, "{\"name\": \"get_time\", \"parameters\": {}}"));
  CHECK_FALSE(accepts(*sut, "{\"name\": \"get_time\", \"parameters\": {}}\n{\"name\": \"get_time\", \"parameters\": {}}"));
  for (const auto& trigger : (*sut)->triggers) { // each trigger is a prefix of the language
    kvlane::grammar::matcher m{(*sut)->grammar};
    CHECK(m.feed(trigger));
  }
}

TEST_CASE("structured_output: with a format and tool_choice auto, the answer is the format or the calls") {
  output_format object;
  object.k = output_format::kind::json_object;
  auto sut = build(object, offer(tool_choice::mode::automatic));
  REQUIRE(sut.has_value());
  CHECK((*sut)->triggers.empty());
  CHECK(accepts(*sut, R"({"a":1})"));
  CHECK(accepts(*sut, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"));
  CHECK_FALSE(accepts(*sut, "plain words"));
}

TEST_CASE("structured_output: a model whose chat format has no tool syntax is a 400 naming it") {
  auto sut = build({}, offer(tool_choice::mode::automatic), chat_format::exaone);
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().status == 400);
  CHECK(sut.error().param == "tools");
  CHECK(sut.error().message.find("'m1'") != std::string::npos);
  CHECK(sut.error().message.find("exaone") != std::string::npos);
}

TEST_CASE("tool_grammar: rule names are prefixed; literals, classes and counts are not") {
  CHECK(prefix_gbnf_rules("root ::= a-b \"x y\" [a-z]{2,3} # c d\nq ::= \"\\\"root\"", "p-")
        == "p-root ::= p-a-b \"x y\" [a-z]{2,3} # c d\np-q ::= \"\\\"root\"");
  CHECK(gbnf_literal("a\"b\\\n\x01") == "\"a\\\"b\\\\\\n\\x01\"");
}
