#include "daemon/http/request_decoder.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace kvlane::daemon::http;
using kvlane::actors::priority_class;

namespace {

api_error error_of(const kvlane::expected<generation_request, api_error>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

} // namespace

TEST_CASE("request_decoder: a chat completion reads every supported field") {
  const auto sut = decode_chat_completion(R"({
    "model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": -1,
    "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.25,
    "stream": true, "stream_options": {"include_usage": true}, "n": 1, "logprobs": false,
    "user": "u1", "priority": "batch", "session": "s1"})");
  REQUIRE(sut.has_value());
  CHECK(sut->what == generation_request::kind::chat);
  CHECK(sut->model == "m");
  REQUIRE(sut->messages.size() == 2);
  CHECK(sut->messages[0].role == "system");
  CHECK(sut->messages[1].content == "hi there");
  CHECK(sut->max_tokens == 7u);
  CHECK(sut->temperature == 0.5f);
  CHECK(sut->top_p == 0.9f);
  CHECK(sut->top_k == 5);
  CHECK(sut->seed == ~std::uint64_t{0});
  CHECK(sut->stop == std::vector<std::string>{"\n\n", "END"});
  CHECK(sut->presence_penalty == 0.5f);
  CHECK(sut->frequency_penalty == -0.25f);
  CHECK(sut->stream);
  CHECK(sut->include_usage);
  CHECK(sut->priority == priority_class::batch);
  CHECK(sut->session == "s1");
}

TEST_CASE("request_decoder: chat defaults leave max_tokens to the context") {
  const auto sut = decode_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  REQUIRE(sut.has_value());
  CHECK_FALSE(sut->max_tokens.has_value());
  CHECK(sut->temperature == 1.0f);
  CHECK_FALSE(sut->stream);
  CHECK(sut->priority == priority_class::interactive);
}

TEST_CASE("request_decoder: chat reads logprobs and top_logprobs, completions an integer logprobs") {
  const auto chat = decode_chat_completion(
    R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20})");
  REQUIRE(chat.has_value());
  CHECK(chat->logprobs);
  CHECK(chat->top_logprobs == 20);
  const auto off = decode_chat_completion(R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  REQUIRE(off.has_value());
  CHECK_FALSE(off->logprobs);
  const auto text = decode_completion(R"({"model":"m","prompt":"x","logprobs":3})");
  REQUIRE(text.has_value());
  CHECK(text->logprobs);
  CHECK(text->top_logprobs == 3);
  const auto zero = decode_completion(R"({"model":"m","prompt":"x","logprobs":0})");
  REQUIRE(zero.has_value());
  CHECK(zero->logprobs);
  CHECK(zero->top_logprobs == 0);
}

TEST_CASE("request_decoder: logprobs out of range or inconsistent get a 400 naming the field") {
  for (auto [body, param] : {
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
                   "top_logprobs"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
                   "top_logprobs"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})",
                   "logprobs"},
       }) {
    CAPTURE(body);
    const auto e = error_of(decode_chat_completion(body));
    CHECK(e.status == 400);
    CHECK(e.param == param);
    CHECK(e.message.find(param) != std::string::npos);
  }
  const auto e = error_of(decode_completion(R"({"model":"m","prompt":"x","logprobs":6})"));
  CHECK(e.status == 400);
  CHECK(e.param == "logprobs");
  CHECK(e.message.find("logprobs") != std::string::npos);
  CHECK(error_of(decode_ollama_chat(R"({"model":"m","messages":[],"logprobs":true})")).param == "logprobs");
}

TEST_CASE("request_decoder: unsupported fields get a 400 naming the field") {
  for (auto [body, param] : {
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2})", "n"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"functions":[]})", "functions"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x","name":"a"}]})",
                   "messages[0].name"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
                   "messages[0].content[0].image_url"},
       }) {
    CAPTURE(body);
    const auto e = error_of(decode_chat_completion(body));
    CHECK(e.status == 400);
    CHECK(e.param == param);
    CHECK(e.message.find(param) != std::string::npos);
  }
}

TEST_CASE("request_decoder: bad values get a 400 naming the field and the limit") {
  for (auto [body, param] : {
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})",
                   "temperature"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})",
                   "max_tokens"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})",
                   "stop"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":[""]})", "stop[0]"},
         std::pair{R"({"model":"m","messages":[{"role":"function","content":"x"}]})", "messages[0].role"},
         std::pair{R"({"model":"m","messages":[]})", "messages"},
         std::pair{R"({"messages":[{"role":"user","content":"x"}]})", "model"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"priority":"high"})",
                   "priority"},
         std::pair{R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
                   "stream_options"},
       }) {
    CAPTURE(body);
    const auto e = error_of(decode_chat_completion(body));
    CHECK(e.status == 400);
    CHECK(e.param == param);
  }
}

TEST_CASE("request_decoder: malformed JSON is a 400 invalid_json, never a crash") {
  for (std::string body : {std::string{"{"}, std::string{"[]"}, std::string{"nul"},
                           std::string(100000, '['), std::string{"{\"model\":\"m\"} trailing"}}) {
    CAPTURE(body.substr(0, 40));
    const auto e = error_of(decode_chat_completion(body));
    CHECK(e.status == 400);
    CHECK(e.code == "invalid_json");
  }
}

namespace {

/// A well-formed chat request whose extra field "x" holds arrays and objects
/// nested so that the whole body is `levels` deep (the body's object is level 1).
std::string nested_request(std::size_t levels) {
  std::string open, close;
  for (std::size_t level = 2; level <= levels; ++level) {
    if (level % 2 == 0) {
      open += "[";
      close.insert(0, "]");
    } else {
      open += "{\"a\":";
      close.insert(0, "}");
    }
  }
  return R"({"model":"m","messages":[{"role":"user","content":"x"}],"x":)" + open + "1" + close
         + "}";
}

} // namespace

TEST_CASE("request_decoder: well-formed JSON 33 levels deep is a 400 naming the limit, 32 levels parse") {
  REQUIRE(max_json_depth == 32);
  const auto too_deep = nested_request(max_json_depth + 1);
  REQUIRE(nlohmann::json::accept(too_deep)); // well-formed: only the depth is wrong
  const auto e = error_of(decode_chat_completion(too_deep));
  CHECK(e.status == 400);
  CHECK(e.code == "invalid_json");
  CHECK(e.message == "malformed JSON: nested deeper than 32 levels");

  // One level less passes the depth bound and is parsed: the decoder gets as far as
  // the field it does not implement and names it.
  const auto deepest = decode_chat_completion(nested_request(max_json_depth));
  REQUIRE_FALSE(deepest.has_value());
  CHECK(deepest.error().code == "unsupported_parameter");
  CHECK(deepest.error().param == "x");

  // Brackets inside strings are text, not nesting.
  const auto in_string = decode_chat_completion(
    R"({"model":"m","messages":[{"role":"user","content":")" + std::string(100, '[') + R"("}]})");
  REQUIRE(in_string.has_value());
  CHECK(in_string->messages[0].content == std::string(100, '['));
}

TEST_CASE("request_decoder: a completion takes a string or token ids and defaults to 16 tokens") {
  auto text = decode_completion(R"({"model":"m","prompt":"Once"})");
  REQUIRE(text.has_value());
  CHECK(text->prompt_text == "Once");
  CHECK(text->max_tokens == 16u);
  auto ids = decode_completion(R"({"model":"m","prompt":[1,2,3],"max_tokens":4})");
  REQUIRE(ids.has_value());
  CHECK(ids->prompt_tokens == std::vector<kvlane::backends::token_id>{1, 2, 3});
  CHECK(error_of(decode_completion(R"({"model":"m","prompt":["a","b"]})")).param == "prompt");
  CHECK(error_of(decode_completion(R"({"model":"m","prompt":[1,-2]})")).param == "prompt[1]");
  CHECK(error_of(decode_completion(R"({"model":"m","prompt":"x","echo":true})")).param == "echo");
  CHECK(error_of(decode_completion(R"({"model":"m"})")).param == "prompt");
}

TEST_CASE("request_decoder: Ollama requests stream by default and map options") {
  auto sut = decode_ollama_generate(
    R"({"model":"m","prompt":"p","system":"s","options":{"temperature":0.1,"num_predict":9,"top_k":3,"stop":["x"],"num_ctx":2048},"keep_alive":"5m"})");
  REQUIRE(sut.has_value());
  CHECK(sut->stream);
  CHECK_FALSE(sut->raw_prompt);
  CHECK(sut->system == "s");
  CHECK(sut->temperature == doctest::Approx(0.1));
  CHECK(sut->max_tokens == 9u);
  CHECK(sut->top_k == 3);
  CHECK(sut->stop == std::vector<std::string>{"x"});
  auto chat = decode_ollama_chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"options":{"num_predict":-1}})");
  REQUIRE(chat.has_value());
  CHECK_FALSE(chat->stream);
  CHECK_FALSE(chat->max_tokens.has_value());
  CHECK(error_of(decode_ollama_chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"options":{"mirostat":1}})")).param
        == "options.mirostat");
  CHECK(error_of(decode_ollama_generate(R"({"model":"m","prompt":"x","format":"xml"})")).param
        == "format");
  auto load = decode_ollama_chat(R"({"model":"m","messages":[]})"); // how clients load a model
  REQUIRE(load.has_value());
  CHECK(load->messages.empty());
}

TEST_CASE("request_decoder: an unknown Ollama field is a 400 naming it, whatever its value, null too") {
  for (const std::string value : {"null", "1", "\"x\"", "{}"}) {
    CAPTURE(value);
    const auto gen = decode_ollama_generate(R"({"model":"m","prompt":"p","context":)" + value + "}");
    REQUIRE_FALSE(gen.has_value());
    CHECK(gen.error().status == 400);
    CHECK(gen.error().param == "context");
    CHECK(gen.error().message.find("'context'") != std::string::npos);
    const auto chat =
      decode_ollama_chat(R"({"model":"m","messages":[],"template":)" + value + "}");
    REQUIRE_FALSE(chat.has_value());
    CHECK(chat.error().param == "template");
    const auto option =
      decode_ollama_chat(R"({"model":"m","messages":[],"options":{"mirostat":)" + value + "}}");
    REQUIRE_FALSE(option.has_value());
    CHECK(option.error().param == "options.mirostat");
  }
}

TEST_CASE("request_decoder: null for an Ollama field kvlane reads means not given") {
  const auto gen = decode_ollama_generate(
    R"({"model":"m","prompt":"p","system":null,"raw":null,"images":null,"keep_alive":null,)"
    R"("stream":null,"options":{"temperature":null,"num_predict":null}})");
  REQUIRE(gen.has_value());
  CHECK(gen->stream); // Ollama's default, as if absent
  CHECK(gen->temperature == doctest::Approx(0.8));
  CHECK(gen->system.empty());
  const auto chat = decode_ollama_chat(R"({"model":"m","messages":null,"options":null,"session":null})");
  REQUIRE(chat.has_value());
  CHECK(chat->messages.empty());
  // A null model is a missing model.
  CHECK(error_of(decode_ollama_chat(R"({"model":null,"messages":[]})")).param == "model");
}

TEST_CASE("request_decoder: tokenize and detokenize bodies") {
  auto t = decode_tokenize(R"({"content":"ab","add_special":true})");
  REQUIRE(t.has_value());
  CHECK(t->content == "ab");
  CHECK(t->add_special);
  auto d = decode_detokenize(R"({"tokens":[97,98]})");
  REQUIRE(d.has_value());
  CHECK(d->tokens.size() == 2);
  CHECK_FALSE(decode_detokenize(R"({"tokens":"ab"})").has_value());
  CHECK_FALSE(decode_tokenize(R"({})").has_value());
}
