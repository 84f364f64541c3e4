// What a sequence does with its row of a step's logits (actors/next_token): the token it takes
// and whether it ends there, for free text and under a grammar.
#include "actors/next_token.hpp"
#include "actors/sequence_table.hpp"
#include "tests/unit/actors/vocab_fixture.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane;
using actors::next_token;
using kind = actors::next_token_outcome::kind;
using test::gbnf;
using test::vocab_fixture;

namespace {

actors::submission request(std::uint32_t max_tokens, std::vector<backends::token_id> stops = {}) {
  actors::submission s;
  s.id = 1;
  s.prompt = {0};
  s.sampling.max_tokens = max_tokens;
  s.sampling.stop_tokens = std::move(stops);
  return s;
}

/// Logits over `n` tokens that make `best` the greedy choice.
std::vector<float> favouring(std::size_t n, backends::token_id best) {
  std::vector<float> row(n, 0.0f);
  row[best] = 5.0f;
  return row;
}

} // namespace

TEST_CASE("next token: free text takes the greedy token, ends without it on a stop token and "
          "with it at max_tokens") {
  auto sub = request(3, {2});
  actors::sequence s{sub};
  auto a = next_token(s, favouring(4, 1));
  CHECK(a.k == kind::token);
  CHECK(a.token == 1);
  CHECK_FALSE(a.mask_us.has_value());

  auto stop = next_token(s, favouring(4, 2));
  CHECK(stop.k == kind::end);
  CHECK(stop.end == actors::end_reason::stop);

  s.generated = 2; // the third token is the last one max_tokens allows
  auto last = next_token(s, favouring(4, 3));
  CHECK(last.k == kind::last_token);
  CHECK(last.token == 3);
  CHECK(last.end == actors::end_reason::length);
}

TEST_CASE("next token: a grammar overrides the logits and ends the sequence with the token that "
          "completes it") {
  vocab_fixture v{{"a", "b", "c"}};
  auto sub = request(10);
  sub.constraint = v.setup(gbnf(R"(root ::= "a" "b")"));
  actors::sequence s{sub};
  const auto n = v.tokens.size();
  auto first = next_token(s, favouring(n, v.id("c"))); // "c" is what the model wants
  CHECK(first.k == kind::token);
  CHECK(first.token == v.id("a"));
  REQUIRE(first.mask_us.has_value()); // nothing prepared it while the step ran

  s.constrained->prepare_mask(); // as the scheduler does while the device steps
  auto second = next_token(s, favouring(n, v.id("c")));
  CHECK_FALSE(second.mask_us.has_value());
  CHECK(second.k == kind::last_token);
  CHECK(second.token == v.id("b"));
  CHECK(second.end == actors::end_reason::stop);
}

TEST_CASE("next token: a grammar that allows no token of the vocabulary ends the sequence with an "
          "error; one that is complete there ends it with a stop") {
  vocab_fixture v{{"a", "b"}};
  auto sub = request(10);
  sub.constraint = v.setup(gbnf(R"(root ::= "a" "z")"));
  actors::sequence s{sub};
  REQUIRE(next_token(s, favouring(v.tokens.size(), v.id("a"))).token == v.id("a"));
  auto stuck = next_token(s, favouring(v.tokens.size(), v.id("a")));
  CHECK(stuck.k == kind::end);
  CHECK(stuck.end == actors::end_reason::error);
  CHECK(stuck.error.find("allows no token") != std::string_view::npos);

  // Complete, and not ended by the grammar itself: the end token is what the mask leaves.
  auto open = request(10);
  open.constraint = v.setup(gbnf(R"(root ::= "a" "b"?)"), {}, false);
  actors::sequence t{open};
  REQUIRE(next_token(t, favouring(v.tokens.size(), v.id("a"))).k == kind::token);
  auto end = next_token(t, favouring(v.tokens.size(), v.end));
  CHECK(end.k == kind::end);
  CHECK(end.end == actors::end_reason::stop);
}
