#include "actors/prefix_index.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

using namespace kvlane::actors;
using kvlane::backends::token_id;

namespace {

constexpr prefix_scope alice{0xA11CEull, 1000};
constexpr prefix_scope bob{0xA11CEull, 1001};

// Tokens first, first + 1, ... (n of them).
std::vector<token_id> run(std::size_t n, token_id first = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

TEST_CASE("prefix_index: a next turn matches its whole previous turn to the token") {
  prefix_index sut(16);
  const auto turn1 = run(37);
  REQUIRE(sut.insert(7, alice, turn1));
  const auto turn2 = concat(turn1, run(20, 500));
  const auto m = sut.longest_match(alice, turn2, static_cast<std::uint32_t>(turn2.size() - 1));
  REQUIRE(m.has_value());
  CHECK(m->entry == 7);
  CHECK(m->length == 37);
}

TEST_CASE("prefix_index: the longest of several entries wins and a divergence mid-block is exact") {
  prefix_index sut(8);
  const auto system = run(20);
  REQUIRE(sut.insert(1, alice, system));
  auto branch = concat(system, run(30, 100));
  REQUIRE(sut.insert(2, alice, branch));
  // Shares system + 13 tokens of the branch, then differs.
  auto prompt = concat(system, run(13, 100));
  prompt.push_back(9999);
  prompt.push_back(9998);
  const auto m = sut.longest_match(alice, prompt, 1000);
  REQUIRE(m.has_value());
  CHECK(m->entry == 2);
  CHECK(m->length == 33);
  // Another prompt that only shares the system prompt finds one of both at 20.
  auto other = concat(system, run(10, 7000));
  const auto s = sut.longest_match(alice, other, 1000);
  REQUIRE(s.has_value());
  CHECK(s->length == 20);
}

TEST_CASE("prefix_index: max_length caps the match so the last prompt token is still prefilled") {
  prefix_index sut(4);
  const auto tokens = run(12);
  REQUIRE(sut.insert(3, alice, tokens));
  const auto m = sut.longest_match(alice, tokens, 11);
  REQUIRE(m.has_value());
  CHECK(m->length == 11);
  CHECK_FALSE(sut.longest_match(alice, tokens, 3).has_value());
}

TEST_CASE("prefix_index: another user or another model never matches") {
  prefix_index sut(4);
  const auto tokens = run(40);
  REQUIRE(sut.insert(1, alice, tokens));
  CHECK_FALSE(sut.longest_match(bob, tokens, 40).has_value());
  CHECK_FALSE(sut.longest_match(prefix_scope{0xB0Bull, alice.owner}, tokens, 40).has_value());
  CHECK(sut.longest_match(alice, tokens, 40).has_value());
}

TEST_CASE("prefix_index: shorter than a block is not indexed and a first-block miss finds nothing") {
  prefix_index sut(16);
  CHECK_FALSE(sut.insert(1, alice, run(15)));
  CHECK(sut.size() == 0);
  REQUIRE(sut.insert(2, alice, run(64)));
  auto prompt = run(64);
  prompt[3] = 4242; // differs inside the first block
  CHECK_FALSE(sut.longest_match(alice, prompt, 64).has_value());
}

TEST_CASE("prefix_index: erase removes an entry and its keys, insert replaces an entry") {
  prefix_index sut(8);
  const auto a = run(32);
  const auto b = run(24, 300);
  REQUIRE(sut.insert(1, alice, a));
  REQUIRE(sut.insert(2, alice, b));
  CHECK(sut.keys() == 4 + 3);
  CHECK(sut.erase(1));
  CHECK_FALSE(sut.erase(1));
  CHECK(sut.keys() == 3);
  CHECK_FALSE(sut.longest_match(alice, a, 32).has_value());
  // Replacing entry 2 with other tokens: the old tokens no longer match.
  REQUIRE(sut.insert(2, alice, a));
  CHECK(sut.size() == 1);
  CHECK_FALSE(sut.longest_match(alice, b, 24).has_value());
  const auto m = sut.longest_match(alice, a, 32);
  REQUIRE(m.has_value());
  CHECK(m->entry == 2);
  CHECK(sut.tokens(2).size() == 32);
  CHECK(sut.erase(2));
  CHECK(sut.keys() == 0);
}

TEST_CASE("prefix_index: equal matches go to the newest entry") {
  prefix_index sut(4);
  const auto tokens = run(16);
  REQUIRE(sut.insert(10, alice, tokens));
  REQUIRE(sut.insert(11, alice, tokens));
  const auto m = sut.longest_match(alice, concat(tokens, run(3, 90)), 100);
  REQUIRE(m.has_value());
  CHECK(m->entry == 11);
  CHECK(m->length == 16);
}
