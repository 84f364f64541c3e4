// A model's grammar vocabulary from its tokenizer: byte-level BPE tokens as their raw bytes,
// special tokens without bytes (never allowed), the stop tokens as end tokens; the per-model
// mask caches and trigger tables are shared.
#include "actors/grammar_vocabulary.hpp"
#include "backends/byte_tokenizer.hpp"
#include "backends/factory.hpp"
#include "backends/hf_tokenizer.hpp"
#include "common/grammar/gbnf.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane;

TEST_CASE("grammar vocabulary: a byte-level BPE tokenizer gives raw bytes, special tokens "
          "nothing, stop tokens are the end tokens") {
  auto tok = backends::hf_tokenizer::load(std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/fixtures/tiny");
  REQUIRE(tok.has_value());
  const auto& t = **tok;
  const auto sut = actors::make_grammar_vocabulary(t, t.size());
  REQUIRE(sut->size() == t.size());
  // Ids of the tiny fixture (tests/unit/backends/hf_tokenizer_test.cpp).
  CHECK(sut->bytes(259) == "hello");
  CHECK(sut->bytes(263) == " world");
  CHECK(sut->bytes(0xc3) == "\xc3"); // a byte token, half a character
  CHECK(sut->bytes(302).empty());     // <|im_end|>: special
  CHECK(sut->bytes(304) == "<think>"); // an added token that is text
  const auto stops = t.stop_tokens();
  REQUIRE_FALSE(stops.empty());
  CHECK(std::vector<std::uint32_t>(sut->end_tokens().begin(), sut->end_tokens().end())
        == std::vector<std::uint32_t>(stops.begin(), stops.end()));
  // A narrower logits row bounds the vocabulary.
  CHECK(actors::make_grammar_vocabulary(t, 100)->size() == 100);
}

TEST_CASE("grammar vocabulary: the sim's byte tokenizer gives the 256 bytes and <|im_end|> as "
          "the end token") {
  const backends::byte_tokenizer tok;
  const auto sut = actors::make_grammar_vocabulary(tok, tok.size());
  CHECK(sut->size() == 258);
  CHECK(sut->bytes('{') == "{");
  CHECK(sut->bytes(0xff) == "\xff");
  CHECK(sut->bytes(backends::byte_tokenizer::im_start_token).empty());
  REQUIRE(sut->end_tokens().size() == 1);
  CHECK(sut->end_tokens()[0] == backends::byte_tokenizer::im_end_token);
}

TEST_CASE("grammar vocabulary: a model builds its vocabulary once and shares a grammar's mask "
          "cache and a trigger set's table while they are in use") {
  backends::backend_config cfg;
  cfg.kind = "sim";
  auto b = backends::make_backend("m", cfg);
  REQUIRE(b.has_value());
  std::shared_ptr<backends::backend> backend{std::move(*b)};
  actors::model_grammar sut{backend, backend->info().vocab_size};
  const auto v = sut.vocabulary();
  CHECK(sut.vocabulary() == v);
  auto g = grammar::compile_gbnf(R"(root ::= "<t>" [a-z]+)").value();
  auto other = grammar::compile_gbnf(R"(root ::= "<t>" [a-z]+)").value();
  auto c1 = sut.cache_for(g);
  CHECK(sut.cache_for(g) == c1);
  CHECK(sut.cache_for(other) != c1); // equal text, another grammar object: its own cache
  const std::vector<std::string> triggers{"<t>"};
  auto t1 = sut.triggers_for(triggers);
  CHECK(sut.triggers_for(triggers) == t1);
  CHECK(t1->whole().size() == 0);        // no sim token holds "<t>"
  CHECK(t1->completing(0, 2).size() == 1); // ">" completes it after "<t"
}
