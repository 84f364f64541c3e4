// Token masks on a real vocabulary (Qwen2's 151k byte-level BPE tokens from llama.cpp's models/,
// read through the project's GGUF tokenizer), and random walks through the masks that must end
// in JSON valid for the schema.

#include "common/grammar/json_schema.hpp"
#include "common/grammar/mask_cache.hpp"
#include "common/grammar/memo_walk.hpp"
#include "common/grammar/vocabulary.hpp"
#include "common/random.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#ifdef KVLANE_GRAMMAR_VOCAB_DIR
#include "tools/grammarbench/gguf_vocab.hpp"
#endif

#include <memory>
#include <string>
#include <vector>

using namespace kvlane::grammar;

namespace {

bool has(const std::vector<std::uint64_t>& bits, std::uint32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; }

std::shared_ptr<const grammar> schema(std::string_view text) {
  auto g = compile_json_schema(text);
  REQUIRE_MESSAGE(g.has_value(), (g ? std::string{} : g.error().message()));
  return *g;
}

} // namespace

TEST_CASE("grammar vocabulary: the trie mask equals the token-by-token mask and admits end tokens only when complete") {
  const std::vector<std::string> tokens{"{", "}", "{\"", "\"", "a", "ab", "\":", "1", "12", "", "\"}", "x", "{}", "b\""};
  const std::vector<std::uint32_t> end{9};
  const vocabulary sut{tokens, end};
  matcher m{schema(R"({"type":"object","properties":{"ab":{"type":"integer"}},"required":["ab"],"additionalProperties":false})")};
  std::vector<std::uint64_t> fast(sut.words()), slow(sut.words());
  const std::vector<std::string> path{"{\"", "ab", "\":", "12", "}"};
  for (const auto& step : path) {
    fill_mask(m, sut, fast);
    fill_mask_naive(m, sut, slow);
    CHECK(fast == slow);
    CHECK_FALSE(has(fast, 9));
    const std::size_t before = m.position();
    REQUIRE(m.feed(std::string_view{step}));
    CHECK(m.position() == before + step.size()); // the walk left the matcher where it was
  }
  fill_mask(m, sut, fast);
  CHECK(has(fast, 9));
  for (std::uint32_t id = 0; id < sut.size(); ++id)
    if (id != 9) CHECK_FALSE(has(fast, id));
}

namespace {

const char* const cache_schema = R"({"type":"object","properties":{
    "s":{"type":"string"},
    "short":{"type":"string","maxLength":3},
    "n":{"type":"integer","minimum":-20,"maximum":20},
    "list":{"type":"array","items":{"type":"string"},"maxItems":4},
    "e":{"enum":["true","a\"b",false]}},
  "required":["s","n","list"],"additionalProperties":false})";

/// Random walks through `g` over `v`, comparing the cache's mask with the reference at every step.
/// Picks prefer (1 in 3) tokens holding a quote, so strings close and documents finish.
std::size_t compare_walks(const std::shared_ptr<const grammar>& g, const std::shared_ptr<const vocabulary>& v,
                          int walks, int steps, bool naive_reference) {
  mask_cache sut{g, v};
  std::vector<std::uint64_t> cached(v->words()), reference(v->words());
  std::vector<std::uint32_t> allowed, quoted;
  std::uint64_t rng = 7;
  std::size_t compared = 0;
  for (int walk = 0; walk < walks; ++walk) {
    matcher m{g};
    for (int step = 0; step < steps; ++step) {
      if (naive_reference) fill_mask_naive(m, *v, reference);
      else fill_mask(m, *v, reference);
      sut.fill(m, cached);
      REQUIRE(cached == reference);
      fill_mask_memo(m, *v, cached);
      REQUIRE(cached == reference);
      ++compared;
      allowed.clear();
      quoted.clear();
      for (std::uint32_t id = 0; id < v->size(); ++id)
        if (has(cached, id) && !v->bytes(id).empty()) {
          allowed.push_back(id);
          if (v->bytes(id).find('"') != std::string_view::npos) quoted.push_back(id);
        }
      if (allowed.empty()) break;
      const auto& pool = !quoted.empty() && kvlane::splitmix64(rng) % 3 == 0 ? quoted : allowed;
      REQUIRE(m.feed(v->bytes(pool[kvlane::splitmix64(rng) % pool.size()])));
    }
  }
  return compared;
}

} // namespace

TEST_CASE("grammar mask_cache and fill_mask_memo: masks equal the token-by-token masks along random walks on a small vocabulary") {
  // Every string of one or two characters from a JSON-ish alphabet, and some of three.
  const std::string alphabet = "\"{}[],:ab1-\\nturflsohie";
  std::vector<std::string> tokens{""}; // id 0: an end token without bytes
  for (char a : alphabet) {
    tokens.emplace_back(1, a);
    for (char b : alphabet) tokens.push_back(std::string{a} + b);
  }
  std::uint64_t rng = 3;
  for (int k = 0; k < 300; ++k) {
    std::string t;
    for (int j = 0; j < 3; ++j) t += alphabet[kvlane::splitmix64(rng) % alphabet.size()];
    tokens.push_back(t);
  }
  const std::vector<std::uint32_t> end{0};
  auto v = std::make_shared<const vocabulary>(tokens, end);
  const std::size_t compared = compare_walks(schema(cache_schema), v, 60, 60, true);
  CHECK(compared > 600);
}

#ifdef KVLANE_GRAMMAR_VOCAB_DIR

namespace {

const kvlane::tools::gguf_vocab& qwen() {
  static const kvlane::tools::gguf_vocab v = [] {
    auto r = kvlane::tools::load_gguf_vocab(std::string(KVLANE_GRAMMAR_VOCAB_DIR) + "/ggml-vocab-qwen2.gguf");
    REQUIRE_MESSAGE(r.has_value(), (r ? std::string{} : r.error()));
    return std::move(*r);
  }();
  return v;
}

} // namespace

TEST_CASE("grammar vocabulary: on the Qwen2 vocabulary the trie mask equals the naive mask along a document") {
  const auto& v = qwen();
  REQUIRE(v.tokens.size() > 150000);
  const vocabulary sut{v.tokens, v.end_tokens};
  matcher m{schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
    "n":{"type":"integer","minimum":0,"maximum":300},"tags":{"type":"array","items":{"enum":["x","yy"]}}},
    "required":["name","n","tags"],"additionalProperties":false})")};
  std::vector<std::uint64_t> fast(sut.words()), slow(sut.words());
  const std::string doc = R"({"name":"héllo","n":250,"tags":["yy","x"]})";
  std::size_t checked = 0;
  for (std::size_t i = 0; i <= doc.size(); i += 3) {
    m.rollback_to(0);
    REQUIRE(m.feed(std::string_view{doc}.substr(0, i)));
    fill_mask(m, sut, fast);
    fill_mask_naive(m, sut, slow);
    CHECK(fast == slow);
    ++checked;
  }
  CHECK(checked > 10);
  // Special tokens (no bytes) are never allowed, the end tokens only at the end.
  m.rollback_to(0);
  REQUIRE(m.feed(std::string_view{doc}));
  fill_mask(m, sut, fast);
  for (std::uint32_t e : v.end_tokens) CHECK(has(fast, e));
  for (std::uint32_t id = 0; id < sut.size(); ++id)
    if (v.tokens[id].empty() && !has(fast, id)) continue;
    else if (v.tokens[id].empty()) CHECK(std::find(v.end_tokens.begin(), v.end_tokens.end(), id) != v.end_tokens.end());
}

TEST_CASE("grammar vocabulary: random walks of tokens from the mask stay accepted and end in JSON valid for the schema") {
  const auto& v = qwen();
  const vocabulary sut{v.tokens, v.end_tokens};
  // A schema whose every property the checks below re-validate with nlohmann::json.
  auto g = schema(R"({"type":"object","properties":{
      "id":{"type":"integer","minimum":-50,"maximum":50},
      "kind":{"enum":["a","b","c"]},
      "name":{"type":"string","minLength":1,"maxLength":6},
      "ok":{"type":"boolean"},
      "code":{"type":"string","pattern":"^[A-Z]{2}[0-9]{1,3}$"},
      "list":{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3},
      "opt":{"type":"null"}},
    "required":["id","kind","name","ok","code","list"],"additionalProperties":false})");
  std::uint64_t rng = 42;
  std::vector<std::uint64_t> bits(sut.words());
  std::vector<std::uint32_t> allowed;
  for (int walk = 0; walk < 12; ++walk) {
    matcher m{g};
    std::string text;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      fill_mask(m, sut, bits);
      allowed.clear();
      for (std::uint32_t id = 0; id < sut.size(); ++id)
        if (has(bits, id)) allowed.push_back(id);
      REQUIRE_FALSE(allowed.empty());
      // Prefer the longest of a few random draws so strings close within the step budget.
      std::uint32_t pick = allowed[kvlane::splitmix64(rng) % allowed.size()];
      for (int d = 0; d < 8; ++d) {
        std::uint32_t c = allowed[kvlane::splitmix64(rng) % allowed.size()];
        if (v.tokens[c].size() > v.tokens[pick].size()) pick = c;
      }
      if (v.tokens[pick].empty()) { ended = true; break; }
      REQUIRE(m.feed(std::string_view{v.tokens[pick]}));
      text += v.tokens[pick];
      if (m.can_end() && !m.can_continue()) ended = true;
    }
    REQUIRE_MESSAGE(ended, "walk " << walk << " did not finish: " << text);
    CHECK(m.can_end());
    auto doc = nlohmann::ordered_json::parse(text, nullptr, false);
    REQUIRE_MESSAGE(!doc.is_discarded(), "not JSON: " << text);
    INFO(text);
    REQUIRE(doc.is_object());
    CHECK(doc["id"].is_number_integer());
    CHECK(doc["id"].get<int>() >= -50);
    CHECK(doc["id"].get<int>() <= 50);
    CHECK((doc["kind"] == "a" || doc["kind"] == "b" || doc["kind"] == "c"));
    REQUIRE(doc["name"].is_string());
    // Characters, not bytes: count UTF-8 lead bytes of the decoded value.
    std::size_t chars = 0;
    for (unsigned char c : doc["name"].get<std::string>()) chars += (c & 0xC0) != 0x80;
    CHECK(chars >= 1);
    CHECK(chars <= 6);
    CHECK(doc["ok"].is_boolean());
    const std::string code = doc["code"].get<std::string>();
    CHECK(code.size() >= 3);
    CHECK(code.size() <= 5);
    CHECK((code[0] >= 'A' && code[0] <= 'Z' && code[1] >= 'A' && code[1] <= 'Z'));
    for (std::size_t k = 2; k < code.size(); ++k) CHECK((code[k] >= '0' && code[k] <= '9'));
    REQUIRE(doc["list"].is_array());
    CHECK(doc["list"].size() >= 1);
    CHECK(doc["list"].size() <= 3);
    for (const auto& x : doc["list"]) CHECK((x.is_number_integer() && x.get<int>() >= 0 && x.get<int>() <= 9));
    if (doc.contains("opt")) CHECK(doc["opt"].is_null());
    for (auto it = doc.begin(); it != doc.end(); ++it)
      CHECK(std::string{"id kind name ok code list opt"}.find(it.key()) != std::string::npos);
  }
}

#endif

#ifdef KVLANE_GRAMMAR_VOCAB_DIR
TEST_CASE("grammar mask_cache and fill_mask_memo: on the Qwen2 vocabulary the masks equal the trie walk's along random walks") {
  const auto& q = qwen();
  auto v = std::make_shared<const vocabulary>(q.tokens, q.end_tokens);
  CHECK(compare_walks(schema(cache_schema), v, 2, 40, false) > 40);
}
#endif
