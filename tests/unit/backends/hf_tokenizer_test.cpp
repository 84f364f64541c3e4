#include "backends/hf_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using kvlane::backends::hf_tokenizer;
using kvlane::backends::token_id;
using json = nlohmann::json;

namespace {

const std::string fixtures = std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/fixtures";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json tiny_json() { return json::parse(read(fixtures + "/tiny/tokenizer.json")); }

std::unique_ptr<hf_tokenizer> tiny() {
  auto t = hf_tokenizer::load(fixtures + "/tiny");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  return std::move(*t);
}

// The load error for the tiny tokenizer.json after `edit`.
std::string error_after(const std::function<void(json&)>& edit) {
  auto j = tiny_json();
  edit(j);
  auto t = hf_tokenizer::parse(j.dump());
  REQUIRE_FALSE(t.has_value());
  return t.error().message;
}

// Ids of the tiny fixture's vocabulary (tests/tokenizer/fixtures/tiny).
constexpr token_id hello = 259, space_world = 263, abc = 266, e_acute = 267;
constexpr token_id begin_of_text = 300, im_start = 301, im_end = 302, eot = 303, think = 304,
                   im_start_x = 305;

} // namespace

TEST_CASE("hf_tokenizer: ranked merges build whole words and bytes stay single tokens") {
  const auto sut = tiny();
  CHECK(sut->encode("hello world") == std::vector<token_id>{hello, space_world});
  CHECK(sut->encode("hello!") == std::vector<token_id>{hello, '!'});
  CHECK(sut->encode("") .empty());
  CHECK(sut->size() == 308);
}

TEST_CASE("hf_tokenizer: ignore_merges takes a word found in the vocabulary as one token") {
  CHECK(tiny()->encode("abc") == std::vector<token_id>{abc});
  auto j = tiny_json();
  j["model"]["ignore_merges"] = false;
  auto sut = hf_tokenizer::parse(j.dump());
  REQUIRE(sut.has_value());
  CHECK((*sut)->encode("abc") == std::vector<token_id>{265, 'c'}); // merge "a b", then the byte
}

TEST_CASE("hf_tokenizer: merges written as [a, b] arrays equal merges written as \"a b\"") {
  auto j = tiny_json();
  json arrays = json::array();
  for (const auto& m : j["model"]["merges"]) {
    const auto s = m.get<std::string>();
    arrays.push_back(json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)}));
  }
  j["model"]["merges"] = arrays;
  auto sut = hf_tokenizer::parse(j.dump());
  REQUIRE(sut.has_value());
  CHECK((*sut)->encode("hello world") == std::vector<token_id>{hello, space_world});
}

TEST_CASE("hf_tokenizer: the NFC normalizer composes combining sequences before the BPE") {
  const auto sut = tiny();
  CHECK(sut->encode("e\xcc\x81") == std::vector<token_id>{e_acute});
  CHECK(sut->encode("\xc3\xa9") == std::vector<token_id>{e_acute});
  auto j = tiny_json();
  j["normalizer"] = nullptr;
  auto raw = hf_tokenizer::parse(j.dump());
  REQUIRE(raw.has_value());
  CHECK((*raw)->encode("e\xcc\x81") == std::vector<token_id>{'e', 0xcc, 0x81});
}

TEST_CASE("hf_tokenizer: special tokens are recognised only when parse_special is set") {
  const auto sut = tiny();
  const std::string text = "<|im_start|>hello<|im_end|><think>";
  CHECK(sut->encode(text, true) == std::vector<token_id>{im_start, hello, im_end, think});
  const auto plain = sut->encode(text);
  for (token_id t : plain)
    CHECK(t < begin_of_text); // no added token
  CHECK(plain.size() > 10);
  CHECK(sut->decode(plain) == text);
  // Leftmost, then longest: "<|im_start|>x" wins over "<|im_start|>".
  CHECK(sut->encode("<|im_start|>x", true) == std::vector<token_id>{im_start_x});
}

TEST_CASE("hf_tokenizer: decode gives raw bytes, special tokens give nothing, added text its content") {
  const auto sut = tiny();
  const std::vector<token_id> ids{begin_of_text, hello, im_end, think, space_world, 0xe2, 99999};
  CHECK(sut->decode(ids) == "hello<think> world\xe2");
  // A token may end inside a UTF-8 sequence: decode does not repair it.
  CHECK(sut->decode(std::vector<token_id>{0xc3}) == "\xc3");
}

TEST_CASE("hf_tokenizer: invalid UTF-8 encodes byte by byte and round-trips") {
  const auto sut = tiny();
  const std::string text = "he\xff\xfello \xc3 world\xe2\x82";
  CHECK(sut->decode(sut->encode(text)) == text);
}

TEST_CASE("hf_tokenizer: BOS comes from the post-processor, stop tokens from both configs") {
  const auto sut = tiny();
  CHECK(sut->bos() == begin_of_text);
  const auto stops = sut->stop_tokens();
  CHECK(std::vector<token_id>(stops.begin(), stops.end()) == std::vector<token_id>{im_end, eot});
  CHECK(sut->special_token("<|im_end|>") == im_end);
  CHECK(sut->special_token("<think>") == think);
  CHECK_FALSE(sut->special_token("hello").has_value());
  CHECK(sut->is_special(im_end));
  CHECK_FALSE(sut->is_special(think));

  auto j = tiny_json();
  j["post_processor"] = {{"type", "ByteLevel"}};
  auto no_bos = hf_tokenizer::parse(j.dump());
  REQUIRE(no_bos.has_value());
  CHECK_FALSE((*no_bos)->bos().has_value());
  CHECK((*no_bos)->stop_tokens().empty());
}

TEST_CASE("hf_tokenizer: load accepts the directory or the tokenizer.json path") {
  auto by_file = hf_tokenizer::load(fixtures + "/tiny/tokenizer.json");
  REQUIRE(by_file.has_value());
  CHECK((*by_file)->stop_tokens().size() == 2);
  auto missing = hf_tokenizer::load(fixtures + "/does-not-exist");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.starts_with("cannot read " + fixtures + "/does-not-exist: "));
}

TEST_CASE("hf_tokenizer: every unsupported component is a load error that names it") {
  CHECK(error_after([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; })
        == "tokenizer.json: normalizer type 'Lowercase' is not supported (supported: NFC, Sequence)");
  CHECK(error_after([](json& j) { j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}}; })
            .find("pre_tokenizer type 'Whitespace' is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; })
            .find("behavior \"Removed\" is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; })
            .find("pre_tokenizer Split.pattern: invalid regex at offset 2")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; })
            .find("no ByteLevel step")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["type"] = "WordPiece"; })
            .find("model type 'WordPiece' is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["dropout"] = 0.1; }).find("model.dropout = 0.1 is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["byte_fallback"] = true; })
            .find("model.byte_fallback = true is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; })
            .find("decoder type 'WordPiece' is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; })
            .find("post_processor type 'BertProcessing' is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["truncation"] = {{"max_length", 5}}; })
            .find("tokenizer.json.truncation = {\"max_length\":5} is not supported")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["added_tokens"][1]["lstrip"] = true; })
            .find("added_tokens[1] (\"<|im_start|>\").lstrip = true is not supported")
        != std::string::npos);
}

TEST_CASE("hf_tokenizer: malformed values are load errors with the place named") {
  CHECK(error_after([](json& j) { j["model"]["merges"][0] = "h e x"; })
            .find("model.merges[0] = \"h e x\" is not two tokens separated by one space")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["merges"].push_back("q z"); })
            .find("joins tokens missing from the vocabulary (result part)")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["vocab"]["h"] = -1; })
            .find("model.vocab[\"h\"] = -1 is not an id below")
        != std::string::npos);
  CHECK(error_after([](json& j) { j["added_tokens"][0]["id"] = 1u << 30; })
            .find("added_tokens[0].id 1073741824 is not below")
        != std::string::npos);
  CHECK(error_after([](json& j) { j.erase("model"); }) == "tokenizer.json: tokenizer.json has no model object");
  auto not_json = hf_tokenizer::parse("{\"model\": ");
  REQUIRE_FALSE(not_json.has_value());
  CHECK(not_json.error().message == "tokenizer.json is not valid JSON");
  const auto tj = read(fixtures + "/tiny/tokenizer.json");
  auto bad_eos = hf_tokenizer::parse(tj, R"({"eos_token": "<nope>"})");
  REQUIRE_FALSE(bad_eos.has_value());
  CHECK(bad_eos.error().message
        == "tokenizer_config.json: eos_token \"<nope>\" is not an added token of tokenizer.json");
  auto bad_gen = hf_tokenizer::parse(tj, {}, R"({"eos_token_id": [302, 4000]})");
  REQUIRE_FALSE(bad_gen.has_value());
  CHECK(bad_gen.error().message
        == "generation_config.json: eos_token_id 4000 is not a token id below 308");
}
