// The embedding endpoints' bodies (embeddings_request) and answers (embeddings_response).
#include "daemon/http/embeddings_request.hpp"
#include "daemon/http/embeddings_response.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <string>

using namespace kvlane::daemon::http;
using json = nlohmann::json;

namespace {

api_error error_of(const kvlane::expected<embedding_request, api_error>& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

/// The 400 `body` gets from `decode`: its param and message.
std::pair<std::string, std::string> refusal(
  kvlane::expected<embedding_request, api_error> (*decode)(std::string_view), const json& body) {
  const auto e = error_of(decode(body.dump()));
  CHECK(e.status == 400);
  return {e.param, e.message};
}

} // namespace

TEST_CASE("embeddings_request: OpenAI input as a string, strings, token ids and arrays of token ids") {
  auto one = decode_openai_embeddings(R"({"model": "m", "input": "hello"})");
  REQUIRE(one.has_value());
  CHECK(one->api == embedding_api::openai);
  CHECK(one->model == "m");
  CHECK(one->texts == std::vector<std::string>{"hello"});
  CHECK_FALSE(one->listed);
  CHECK_FALSE(one->base64);
  CHECK_FALSE(one->dimensions.has_value());

  auto many = decode_openai_embeddings(
    R"({"model": "m", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 256, "user": "u"})");
  REQUIRE(many.has_value());
  CHECK(many->texts == std::vector<std::string>{"a", "b"});
  CHECK(many->listed);
  CHECK(many->base64);
  CHECK(many->dimensions == 256u);

  auto ids = decode_openai_embeddings(R"({"model": "m", "input": [1, 2, 3]})");
  REQUIRE(ids.has_value());
  CHECK(ids->texts.empty());
  REQUIRE(ids->token_inputs.size() == 1);
  CHECK(ids->token_inputs[0] == std::vector<kvlane::backends::token_id>{1, 2, 3});
  CHECK_FALSE(ids->listed);

  auto nested = decode_openai_embeddings(R"({"model": "m", "input": [[1], [4294967295, 0]], "encoding_format": null})");
  REQUIRE(nested.has_value());
  REQUIRE(nested->token_inputs.size() == 2);
  CHECK(nested->token_inputs[1] == std::vector<kvlane::backends::token_id>{4294967295u, 0});
  CHECK(nested->listed);
}

TEST_CASE("embeddings_request: bad OpenAI bodies get a 400 naming the field") {
  const auto d = &decode_openai_embeddings;
  CHECK(refusal(d, {{"input", "x"}}) == std::pair<std::string, std::string>{"model", "'model' is required"});
  CHECK(refusal(d, {{"model", "m"}}) == std::pair<std::string, std::string>{"input", "'input' is required"});
  CHECK(refusal(d, {{"model", "m"}, {"input", ""}}).second == "'input' must not be empty");
  CHECK(refusal(d, {{"model", "m"}, {"input", json::array()}}).second
        == "'input' must hold at least one input");
  CHECK(refusal(d, {{"model", "m"}, {"input", 5}}).second
        == "'input' must be a string, an array of strings, an array of token ids or an array of "
           "arrays of token ids, got number");
  CHECK(refusal(d, {{"model", "m"}, {"input", {"a", ""}}})
        == std::pair<std::string, std::string>{"input[1]", "'input[1]' must not be empty"});
  CHECK(refusal(d, {{"model", "m"}, {"input", {"a", 7}}})
        == std::pair<std::string, std::string>{"input[1]", "'input[1]' must be a string, as input[0] is, got number"});
  CHECK(refusal(d, {{"model", "m"}, {"input", {1, -2}}})
        == std::pair<std::string, std::string>{"input[1]", "'input[1]' must be an integer between 0 and 4294967295, got -2"});
  CHECK(refusal(d, {{"model", "m"}, {"input", {{1}, json::array()}}}).second
        == "'input[1]' must hold at least one token id");
  CHECK(refusal(d, {{"model", "m"}, {"input", {true}}}).first == "input[0]");
  CHECK(refusal(d, {{"model", "m"}, {"input", "x"}, {"encoding_format", "int8"}})
        == std::pair<std::string, std::string>{"encoding_format", "'encoding_format' must be \"float\" or \"base64\", got \"int8\""});
  CHECK(refusal(d, {{"model", "m"}, {"input", "x"}, {"dimensions", 0}}).first == "dimensions");
  const auto unknown = error_of(decode_openai_embeddings(R"({"model": "m", "input": "x", "truncate": true})"));
  CHECK(unknown.param == "truncate");
  CHECK(unknown.code == "unsupported_parameter");
  CHECK(error_of(decode_openai_embeddings("[1]")).code == "invalid_json");
  CHECK(error_of(decode_openai_embeddings(R"({"model": "m", "input": )")).code == "invalid_json");
}

TEST_CASE("embeddings_request: inputs are bounded in count and, as token ids, in total tokens") {
  json strings = json::array();
  for (std::size_t i = 0; i <= max_embedding_inputs; ++i)
    strings.push_back("x");
  CHECK(refusal(&decode_openai_embeddings, {{"model", "m"}, {"input", strings}})
        == std::pair<std::string, std::string>{"input", "'input' holds 2049 inputs; at most 2048 are allowed"});
  CHECK(refusal(&decode_ollama_embed, {{"model", "m"}, {"input", strings}}).second
        == "'input' holds 2049 inputs; at most 2048 are allowed");
  strings.erase(strings.begin());
  CHECK(decode_openai_embeddings(json{{"model", "m"}, {"input", strings}}.dump()).has_value());

  const json ids(std::vector<int>(max_embedding_tokens + 1, 1));
  CHECK(refusal(&decode_openai_embeddings, {{"model", "m"}, {"input", ids}}).second
        == "the inputs hold more than 300000 tokens in all");
  const json halves = {std::vector<int>(max_embedding_tokens / 2, 1),
                       std::vector<int>(max_embedding_tokens / 2 + 1, 1)};
  CHECK(refusal(&decode_openai_embeddings, {{"model", "m"}, {"input", halves}}).first == "input[1]");
}

TEST_CASE("embeddings_request: Ollama /api/embed reads input, truncate, dimensions, keep_alive and options.num_ctx") {
  auto sut = decode_ollama_embed(
    R"({"model": "m:latest", "input": ["a", "b"], "truncate": false, "keep_alive": "5m",
        "dimensions": 64, "options": {"num_ctx": 100}})");
  REQUIRE(sut.has_value());
  CHECK(sut->api == embedding_api::ollama);
  CHECK(sut->model == "m:latest");
  CHECK(sut->texts == std::vector<std::string>{"a", "b"});
  CHECK(sut->listed);
  CHECK_FALSE(sut->truncate);
  CHECK(sut->dimensions == 64u);
  CHECK(sut->num_ctx == 100u);

  auto defaults = decode_ollama_embed(R"({"model": "m", "input": "a", "truncate": null, "options": null})");
  REQUIRE(defaults.has_value());
  CHECK(defaults->truncate);
  CHECK_FALSE(defaults->listed);
  // No input, or an empty one, is how Ollama clients load a model: no embeddings.
  for (const auto* body : {R"({"model": "m"})", R"({"model": "m", "input": ""})",
                           R"({"model": "m", "input": []})"}) {
    auto load = decode_ollama_embed(body);
    REQUIRE(load.has_value());
    CHECK(load->texts.empty());
  }
}

TEST_CASE("embeddings_request: bad Ollama bodies get a 400 naming the field") {
  const auto d = &decode_ollama_embed;
  CHECK(refusal(d, {{"input", "x"}}).first == "model");
  CHECK(refusal(d, {{"model", "m"}, {"input", {"a", ""}}}).second == "'input[1]' must not be empty");
  CHECK(refusal(d, {{"model", "m"}, {"input", {"a", 1}}}).second == "'input[1]' must be a string, got number");
  CHECK(refusal(d, {{"model", "m"}, {"input", {{"a"}}}}).first == "input[0]");
  CHECK(refusal(d, {{"model", "m"}, {"truncate", "yes"}}).second == "'truncate' must be a boolean, got string");
  CHECK(refusal(d, {{"model", "m"}, {"keep_alive", true}}).first == "keep_alive");
  CHECK(refusal(d, {{"model", "m"}, {"options", {{"temperature", 0.5}}}})
        == std::pair<std::string, std::string>{"options.temperature",
             "'options.temperature' is not supported by kvlane: the only option an embedding reads is num_ctx"});
  CHECK(refusal(d, {{"model", "m"}, {"options", {{"num_ctx", 0}}}}).first == "options.num_ctx");
  CHECK(refusal(d, {{"model", "m"}, {"prompt", "x"}}).first == "prompt"); // the legacy endpoint's field
  CHECK(refusal(d, {{"model", "m"}, {"format", nullptr}}).first == "format");
}

TEST_CASE("embeddings_request: the legacy /api/embeddings reads prompt") {
  auto sut = decode_ollama_embeddings(R"({"model": "m", "prompt": "hello", "keep_alive": 0})");
  REQUIRE(sut.has_value());
  CHECK(sut->api == embedding_api::ollama_legacy);
  CHECK(sut->texts == std::vector<std::string>{"hello"});
  auto empty = decode_ollama_embeddings(R"({"model": "m", "prompt": ""})");
  REQUIRE(empty.has_value());
  CHECK(empty->texts.empty());
  CHECK(refusal(&decode_ollama_embeddings, {{"model", "m"}, {"input", "x"}}).first == "input");
  CHECK(refusal(&decode_ollama_embeddings, {{"model", "m"}, {"prompt", 3}}).second
        == "'prompt' must be a string, got number");
}

TEST_CASE("embeddings_response: base64 follows RFC 4648, with padding") {
  const auto b64 = [](std::string_view s) {
    return base64_encode(std::as_bytes(std::span{s.data(), s.size()}));
  };
  // RFC 4648, section 10.
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foob") == "Zm9vYg==");
  CHECK(b64("fooba") == "Zm9vYmE=");
  CHECK(b64("foobar") == "Zm9vYmFy");
  CHECK(b64("\xff\xfe\xfd") == "//79");
}

TEST_CASE("embeddings_response: OpenAI's answer as floats or as base64 little-endian float32") {
  kvlane::backends::embeddings e{2, {0.6f, -0.8f, 1.0f, 0.0f}};
  const auto floats = json::parse(render_openai_embeddings(e, false, "m\"x", 7));
  CHECK(floats["object"] == "list");
  CHECK(floats["model"] == "m\"x");
  CHECK(floats["usage"] == json{{"prompt_tokens", 7}, {"total_tokens", 7}});
  REQUIRE(floats["data"].size() == 2);
  CHECK(floats["data"][1] == json{{"object", "embedding"}, {"index", 1}, {"embedding", {1.0, 0.0}}});
  CHECK(floats["data"][0]["embedding"][0].get<float>() == 0.6f); // read back exactly
  // Shortest round-trip text: 0.6 is written as 0.6, not 0.60000002384185791.
  CHECK(render_openai_embeddings(e, false, "m", 7).find("[0.6,-0.8]") != std::string::npos);

  const auto packed = json::parse(render_openai_embeddings(e, true, "m", 7));
  const auto text = packed["data"][0]["embedding"].get<std::string>();
  const float want[2] = {0.6f, -0.8f};
  std::string raw(8, '\0');
  for (int i = 0; i < 2; ++i)
    for (int b = 0; b < 4; ++b)
      raw[4 * i + b] = static_cast<char>((std::bit_cast<std::uint32_t>(want[i]) >> (8 * b)) & 0xFF);
  CHECK(text == base64_encode(std::as_bytes(std::span{raw.data(), raw.size()})));
  CHECK(text == "mpkZP83MTL8=");
}

TEST_CASE("embeddings_response: Ollama's answers") {
  kvlane::backends::embeddings e{2, {0.6f, -0.8f, 1.0f, 0.0f}};
  const auto floats = [](const json& j) { return j.get<std::vector<std::vector<float>>>(); };
  auto embed = json::parse(render_ollama_embed(e, "m", 9, 1234));
  CHECK(floats(embed["embeddings"]) == std::vector<std::vector<float>>{{0.6f, -0.8f}, {1.0f, 0.0f}});
  embed.erase("embeddings");
  CHECK(embed == json{{"model", "m"}, {"total_duration", 1234}, {"load_duration", 0},
                      {"prompt_eval_count", 9}});
  CHECK(json::parse(render_ollama_embed({2, {}}, "m", 0, 5))["embeddings"] == json::array());
  const auto legacy = json::parse(render_ollama_embedding(e));
  CHECK(legacy.size() == 1);
  CHECK(legacy["embedding"].get<std::vector<float>>() == std::vector<float>{0.6f, -0.8f});
  CHECK(json::parse(render_ollama_embedding({2, {}})) == json{{"embedding", json::array()}});
}
