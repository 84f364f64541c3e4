#include "tools/bench/block_prompt.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

using namespace kvlane::tools::bench;
using kvlane::backends::token_id;

TEST_CASE("bench block prompt: the same block id always gives the same tokens") {
  std::vector<token_id> a, b;
  append_block_tokens(42, 64, a);
  append_block_tokens(42, 64, b);
  CHECK(a == b);
  CHECK(a.size() == 64);
  // Built into different prompts, at different positions, the block is the same.
  const std::vector<std::uint64_t> first{42, 7}, second{9, 42};
  auto p = block_prompt(first, 64, 128);
  auto q = block_prompt(second, 64, 128);
  CHECK(std::equal(p.begin(), p.begin() + 64, q.begin() + 64));
}

TEST_CASE("bench block prompt: different block ids give different tokens") {
  std::set<std::vector<token_id>> seen;
  for (std::uint64_t id = 0; id < 1000; ++id) {
    std::vector<token_id> t;
    append_block_tokens(id, 16, t);
    seen.insert(t);
  }
  CHECK(seen.size() == 1000);
  // Neighbouring ids do not share a leading run either.
  std::vector<token_id> a, b;
  append_block_tokens(1, 64, a);
  append_block_tokens(2, 64, b);
  CHECK(std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin() < 8);
}

TEST_CASE("bench block prompt: tokens are letters and spaces the byte tokenizer reads as text") {
  std::vector<token_id> t;
  append_block_tokens(5, 4096, t);
  CHECK(std::all_of(t.begin(), t.end(),
                    [](token_id x) { return x == ' ' || (x >= 'a' && x <= 'z'); }));
  CHECK(std::count(t.begin(), t.end(), token_id{' '}) > 0);
}

TEST_CASE("bench block prompt: the last block is cut to the length, a prefix of the whole block") {
  const std::vector<std::uint64_t> ids{3, 4};
  auto whole = block_prompt(ids, 64, 128);
  auto cut = block_prompt(ids, 64, 100);
  REQUIRE(whole.size() == 128);
  REQUIRE(cut.size() == 100);
  CHECK(std::equal(cut.begin(), cut.end(), whole.begin()));
  // A length beyond the blocks' tokens is cut to them.
  CHECK(block_prompt(ids, 64, 500).size() == 128);
  // The same block under a smaller block size is a prefix of the larger one's.
  auto small = block_prompt(std::vector<std::uint64_t>{3}, 32, 32);
  CHECK(std::equal(small.begin(), small.end(), whole.begin()));
}
