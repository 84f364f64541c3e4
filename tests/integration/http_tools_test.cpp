// Tool calls and structured output through the real daemon (sim backend): bad input gets a
// precise 400 in each API's shape; good requests render, and their answers carry the calls
// (OpenAI's message.tool_calls and delta.tool_calls, Ollama's message.tool_calls) and JSON
// valid for the schema, held there by the engine's grammar enforcement.

#include "tests/integration/http_fixture.hpp"

#include <set>
#include <sstream>

using namespace kvlane::test::http;

namespace {

std::string tools_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 4096
snapshot_bytes = "4MiB"
time_scale = 1000
[[model]]
name = "ex"
chat_format = "exaone"
[model.sim]
slots = 1
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 1000
[http]
listen = "127.0.0.1:0"
api_key = "{}"
)",
                     run_dir, api_key);
}

/// A function whose arguments form a finite language, so a call ends well within max_tokens.
const json weather_tool = json::parse(R"({"type": "function", "function": {
  "name": "get_weather", "description": "The weather in a city",
  "parameters": {"type": "object", "properties": {
    "city": {"enum": ["Paris", "Oslo"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}})");
const json time_tool = json::parse(R"({"type": "function", "function": {"name": "get_time",
  "parameters": {"type": "object", "properties": {}}}})");

json tool_chat(json tools, json choice = nullptr) {
  json body{{"model", "tiny"},
            {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
            {"max_tokens", 300},
            {"seed", 7},
            {"tools", std::move(tools)}};
  if (!choice.is_null())
    body["tool_choice"] = std::move(choice);
  return body;
}

/// `args` (JSON text) are valid arguments of weather_tool.
void check_weather_arguments(const std::string& args) {
  CAPTURE(args);
  const auto a = json::parse(args);
  REQUIRE(a.is_object());
  CHECK(a.size() == 2);
  CHECK((a["city"] == "Paris" || a["city"] == "Oslo"));
  REQUIRE(a["days"].is_number_integer());
  CHECK(a["days"].get<int>() >= 1);
  CHECK(a["days"].get<int>() <= 7);
}

reply post(http_fixture& d, std::string_view path, const json& body) {
  return d.request("POST", path, body.dump());
}

} // namespace

TEST_CASE("http tools: malformed tools, tool_choice and schemas are 400s naming the field") {
  http_fixture d{tools_config};
  struct bad {
    std::string_view patch;
    std::string param;
    std::string says;
  };
  const bad cases[] = {
    {R"({"tools": [{"type": "function", "function": {"name": "x", "parameters": "nope"}}]})",
     "tools[0].function.parameters", "must be a JSON Schema object"},
    {R"({"tools": [{"type": "function", "function": {"name": "x"}}],
         "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
     "tool_choice.function.name", "not among 'tools'"},
    {R"({"tools": [{"type": "function", "function": {"name": "x"}}], "tool_choice": "sometimes"})",
     "tool_choice", "must be \"auto\""},
    {R"({"tools": [{"type": "function", "function": {"name": "x", "parameters":
         {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}}}}]})",
     "tools[0].function.parameters", "multipleOf"},
    {R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema":
         {"type": "string", "contentMediaType": "text/html"}}}})",
     "response_format.json_schema.schema", "contentMediaType"},
  };
  for (const auto& c : cases) {
    auto body = chat_body("hi", 8);
    body.update(json::parse(c.patch));
    CAPTURE(body.dump());
    const auto r = post(d, "/v1/chat/completions", body);
    CHECK(r.status == 400);
    const auto e = json::parse(r.body)["error"];
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["param"] == c.param);
    CHECK(e["message"].get<std::string>().find(c.says) != std::string::npos);
  }
  // Ollama's shape: {"error": "..."}.
  const auto r = post(d, "/api/chat", {{"model", "tiny"}, {"stream", false},
                                       {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                       {"format", {{"type", "object"}, {"patternProperties", json::object()}}}});
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"].get<std::string>().find("patternProperties") != std::string::npos);
  // Nothing was submitted for any of them.
  CHECK(d.ps()["sequences"].empty());
}

TEST_CASE("http tools: a model whose chat format cannot express tools gets a 400 naming it") {
  http_fixture d{tools_config};
  auto body = tool_chat({weather_tool});
  body["model"] = "ex";
  const auto r = post(d, "/v1/chat/completions", body);
  CHECK(r.status == 400);
  const auto e = json::parse(r.body)["error"];
  CHECK(e["param"] == "tools");
  CHECK(e["code"] == "tools_not_supported");
  CHECK(e["message"].get<std::string>().find("'ex'") != std::string::npos);
  const auto o = post(d, "/api/chat", {{"model", "ex"}, {"stream", false}, {"tools", {weather_tool}},
                                       {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  CHECK(o.status == 400);
  CHECK(json::parse(o.body)["error"].get<std::string>().find("'ex'") != std::string::npos);
}

TEST_CASE("http tools: a conversation with calls and results renders; tool_choice none answers in text") {
  http_fixture d{tools_config};
  json body{{"model", "tiny"},
            {"max_tokens", 8},
            {"tools", {weather_tool}},
            {"tool_choice", "none"},
            {"messages",
             {{{"role", "user"}, {"content", "Weather?"}},
              {{"role", "assistant"}, {"content", nullptr},
               {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Oslo","days":1})"}}}}}}},
              {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "cold"}}}}};
  const auto r = d.post_json("/v1/chat/completions", body);
  const auto& choice = r["choices"][0];
  CHECK(choice["finish_reason"] == "length");
  CHECK(choice["message"]["content"].is_string());
  CHECK_FALSE(choice["message"].contains("tool_calls"));
  // The tools and the exchange are in the prompt: it is longer than the conversation alone.
  CHECK(r["usage"]["prompt_tokens"].get<int>() > 500);
  const auto o = d.post_json("/api/chat", {{"model", "tiny"}, {"stream", false}, {"options", {{"num_predict", 4}}},
                                           {"tools", {weather_tool}},
                                           {"messages", {{{"role", "user"}, {"content", "Weather?"}},
                                                         {{"role", "assistant"}, {"content", ""},
                                                          {"tool_calls", {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Oslo"}, {"days", 1}}}}}}}}},
                                                         {{"role", "tool"}, {"tool_name", "get_weather"}, {"content", "cold"}}}}});
  CHECK(o["done"] == true);
}

// The tests below need the engine to enforce the request's output constraint.

TEST_CASE("http tools: tool_choice required answers with a call valid for its schema, in OpenAI's shape") {
  http_fixture d{tools_config};
  // One call: the sim never ends an answer by itself, so parallel calls would run to max_tokens.
  auto body = tool_chat({weather_tool}, "required");
  body["parallel_tool_calls"] = false;
  const auto r = d.post_json("/v1/chat/completions", body);
  const auto& choice = r["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  const auto& message = choice["message"];
  CHECK(message["role"] == "assistant");
  CHECK(message["content"].is_null());
  REQUIRE(message["tool_calls"].is_array());
  REQUIRE(message["tool_calls"].size() >= 1);
  std::set<std::string> ids;
  for (const auto& call : message["tool_calls"]) {
    CHECK(call["type"] == "function");
    CHECK(call["id"].get<std::string>().starts_with("call_"));
    ids.insert(call["id"].get<std::string>());
    CHECK(call["function"]["name"] == "get_weather");
    check_weather_arguments(call["function"]["arguments"].get<std::string>());
  }
  CHECK(ids.size() == message["tool_calls"].size());
}

TEST_CASE("http tools: a named function, streamed, comes as delta.tool_calls: id and name, then arguments") {
  http_fixture d{tools_config};
  auto body = tool_chat({weather_tool, time_tool},
                        {{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  body["stream"] = true;
  const auto r = post(d, "/v1/chat/completions", body);
  REQUIRE(r.status == 200);
  const auto events = sse_payloads(r.body);
  REQUIRE(events.back() == "[DONE]");
  std::string arguments, finish;
  int headers = 0, fragments = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const auto c = json::parse(events[i]);
    const auto& delta = c["choices"][0]["delta"];
    CHECK_FALSE((delta.contains("content") && delta["content"].get<std::string>().find("tool_call") != std::string::npos));
    if (!c["choices"][0]["finish_reason"].is_null())
      finish = c["choices"][0]["finish_reason"];
    if (!delta.contains("tool_calls"))
      continue;
    const auto& call = delta["tool_calls"][0];
    CHECK(call["index"] == 0);
    if (call.contains("id")) {
      CHECK(headers == 0);
      CHECK(fragments == 0);
      ++headers;
      CHECK(call["type"] == "function");
      CHECK(call["function"]["name"] == "get_weather");
      CHECK(call["function"]["arguments"] == "");
    } else {
      CHECK(headers == 1);
      CHECK_FALSE(call["function"].contains("name"));
      arguments += call["function"]["arguments"].get<std::string>();
      ++fragments;
    }
  }
  CHECK(headers == 1);
  CHECK(fragments >= 1);
  CHECK(finish == "tool_calls");
  check_weather_arguments(arguments);
}

TEST_CASE("http tools: response_format json_schema answers JSON valid for the schema") {
  http_fixture d{tools_config};
  auto body = chat_body("Pick a city.", 200);
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "pick"}, {"strict", true},
                                              {"schema", weather_tool["function"]["parameters"]}}}};
  const auto r = d.post_json("/v1/chat/completions", body);
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  check_weather_arguments(r["choices"][0]["message"]["content"].get<std::string>());
  auto object = chat_body("Anything.", 300);
  object["response_format"] = {{"type", "json_object"}};
  const auto o = d.post_json("/v1/chat/completions", object);
  if (o["choices"][0]["finish_reason"] == "stop")
    CHECK(json::parse(o["choices"][0]["message"]["content"].get<std::string>()).is_object());
}

TEST_CASE("http tools: Ollama format and tools, whole and streamed") {
  http_fixture d{tools_config};
  const json messages = {{{"role", "user"}, {"content", "Weather in Oslo?"}}};
  const auto formatted = d.post_json("/api/chat", {{"model", "tiny"}, {"stream", false}, {"messages", messages},
                                                   {"format", weather_tool["function"]["parameters"]}});
  check_weather_arguments(formatted["message"]["content"].get<std::string>());

  // Ollama has no tool_choice. With a format too, the answer is the format or the calls,
  // decided by its first token: some seed makes the sim call.
  const json answer_schema = json::parse(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})");
  auto body = [&](int seed, bool stream) {
    return json{{"model", "tiny"}, {"stream", stream}, {"messages", messages}, {"tools", {weather_tool}},
                {"format", answer_schema}, {"options", {{"num_predict", 300}, {"seed", seed}}}};
  };
  int calling_seed = 0;
  json call;
  for (int seed = 1; seed <= 32 && calling_seed == 0; ++seed) {
    const auto whole = d.post_json("/api/chat", body(seed, false));
    CHECK(whole["done"] == true);
    const auto content = whole["message"]["content"].get<std::string>();
    CHECK(content.find("<tool_call>") == std::string::npos);
    if (!whole["message"].contains("tool_calls")) {
      CHECK(json::parse(content)["ok"].is_boolean());
      continue;
    }
    calling_seed = seed;
    REQUIRE(whole["message"]["tool_calls"].size() >= 1);
    call = whole["message"]["tool_calls"][0];
  }
  REQUIRE(calling_seed != 0);
  CHECK(call["function"]["name"] == "get_weather");
  REQUIRE(call["function"]["arguments"].is_object());
  check_weather_arguments(call["function"]["arguments"].dump());

  // Streamed, each call comes whole in a line of its own, before the final line.
  json streamed;
  for (int seed = calling_seed; seed <= calling_seed + 32 && streamed.is_null(); ++seed) {
    const auto r = post(d, "/api/chat", body(seed, true));
    REQUIRE(r.status == 200);
    std::vector<json> lines;
    std::istringstream in{r.body};
    for (std::string line; std::getline(in, line);)
      if (!line.empty())
        lines.push_back(json::parse(line));
    REQUIRE(lines.size() >= 2);
    CHECK(lines.back()["done"] == true);
    CHECK_FALSE(lines.back()["message"].contains("tool_calls"));
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      const auto& m = lines[i]["message"];
      CHECK(m["content"].get<std::string>().find("<tool_call>") == std::string::npos);
      if (m.contains("tool_calls") && streamed.is_null())
        streamed = m["tool_calls"][0];
    }
  }
  REQUIRE_FALSE(streamed.is_null());
  CHECK(streamed["function"]["name"] == "get_weather");
  CHECK(streamed["function"]["index"] == 0);
  check_weather_arguments(streamed["function"]["arguments"].dump());
}
