// Counted repetition: x{m,n}, x*, x+ as one grammar element whose stack frame counts the items.
// The matcher must accept exactly m..n items, survive save/restore and rollback with the count,
// and every mask method must agree with the token-by-token mask at each count — in particular
// the mask cache, which shares one entry between repetitions of the same item and checks only
// the tokens' lengths against the real count.

#include "common/grammar/gbnf.hpp"
#include "common/grammar/mask_cache.hpp"
#include "common/grammar/matcher.hpp"
#include "common/grammar/memo_walk.hpp"
#include "common/grammar/vocabulary.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

using namespace kvlane::grammar;

using kvlane::test::accepts;
using kvlane::test::gbnf;

namespace {

bool has(const std::vector<std::uint64_t>& bits, std::uint32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; }

/// The tokens of `v` set in `bits`, as their text.
std::vector<std::string> allowed(const vocabulary& v, const std::vector<std::uint64_t>& bits) {
  std::vector<std::string> out;
  for (std::uint32_t id = 0; id < v.size(); ++id)
    if (has(bits, id)) out.emplace_back(v.bytes(id).empty() ? "<end>" : std::string{v.bytes(id)});
  return out;
}

} // namespace

TEST_CASE("grammar repetition: x{m,n} accepts exactly m to n items, at the bounds and past them") {
  auto sut = gbnf("root ::= \"<\" [a-z]{2,4} \">\"\n");
  CHECK(sut->repetition_count() == 1); // one element, not n expanded copies
  CHECK_FALSE(accepts(sut, "<a>"));
  CHECK(accepts(sut, "<ab>"));
  CHECK(accepts(sut, "<abc>"));
  CHECK(accepts(sut, "<abcd>"));
  CHECK_FALSE(accepts(sut, "<abcde>"));
  matcher m{sut};
  REQUIRE(m.feed("<abcd"));
  CHECK_FALSE(m.feed('e')); // the fifth item is refused at the byte, not only at the end
  CHECK(m.next_bytes().has('>'));
  CHECK_FALSE(m.next_bytes().has('e'));

  auto exact = gbnf("root ::= \"ab\"{3}\n");
  CHECK_FALSE(accepts(exact, "abab"));
  CHECK(accepts(exact, "ababab"));
  CHECK_FALSE(accepts(exact, "abababab"));
  CHECK_FALSE(accepts(exact, "ababa"));

  auto upto = gbnf("root ::= x{0,2} \"!\"\nx ::= \"a\" | \"bc\"\n");
  CHECK(accepts(upto, "!"));
  CHECK(accepts(upto, "bca!"));
  CHECK_FALSE(accepts(upto, "aaa!"));
  CHECK_FALSE(accepts(upto, "b!"));
}

TEST_CASE("grammar repetition: x*, x+ and x{m,} count up to m only and accept any number past it") {
  auto plus = gbnf("root ::= [0-9]+ \";\" [a]{3,} \".\"\n");
  CHECK_FALSE(accepts(plus, ";aaa."));
  CHECK(accepts(plus, "7;aaa."));
  CHECK(accepts(plus, "0123456789;aaaaaaaaaaaaaaaaaaaaaaaa."));
  CHECK_FALSE(accepts(plus, "7;aa."));
  // The count stops at the lower bound: no length is too long for it.
  CHECK(accepts(plus, std::string(100'000, '9') + ";" + std::string(100'000, 'a') + "."));
}

TEST_CASE("grammar repetition: nested counted repetitions, and one of a nullable item") {
  auto nested = gbnf("root ::= (\"a\"{1,2} \",\"){2,3}\n");
  CHECK(accepts(nested, "a,aa,"));
  CHECK(accepts(nested, "aa,a,aa,"));
  CHECK_FALSE(accepts(nested, "a,"));
  CHECK_FALSE(accepts(nested, "aaa,a,"));
  CHECK_FALSE(accepts(nested, "a,a,a,a,"));
  // A bounded repetition of something that may match nothing: the empty items count too.
  auto nullable = gbnf("root ::= (\"a\"?){0,3} \"!\"\n");
  CHECK(accepts(nullable, "!"));
  CHECK(accepts(nullable, "aaa!"));
  CHECK_FALSE(accepts(nullable, "aaaa!"));
}

TEST_CASE("grammar repetition: the count survives save, restore and rollback") {
  auto g = gbnf("root ::= \"\\\"\" [a-z]{1,3} \"\\\"\"\n");
  matcher m{g};
  REQUIRE(m.feed("\"ab"));
  auto restored = matcher::restore(g, m.save());
  REQUIRE_MESSAGE(restored.has_value(), (restored ? std::string{} : restored.error().message()));
  CHECK(restored->feed('c'));
  CHECK_FALSE(restored->feed('d')); // the fourth letter: the count came along
  restored->rollback_to(2);          // back to "\"a": two more letters allowed again
  CHECK(restored->feed("bc\""));
  CHECK(restored->can_end());
}

TEST_CASE("grammar repetition: masks at every count of a bounded string equal the token-by-token mask") {
  // Two strings of the same characters with different bounds: the mask cache's entry for their
  // inside is shared (the count and the bounds are not part of its key).
  auto g = gbnf("root ::= short \"=\" long\n"
                "short ::= \"\\\"\" [a-z]{0,3} \"\\\"\"\n"
                "long ::= \"\\\"\" [a-z]{2,5} \"\\\"\"\n");
  const std::vector<std::string> tokens{"\"", "a", "ab", "abc", "abcd", "abcdef", "a\"", "ab\"", "abc\"", "\"=",
                                        "\"=\"", "\"=\"ab", "b\"=\"", "", "=", "z"};
  const std::vector<std::uint32_t> end{13};
  auto v = std::make_shared<const vocabulary>(tokens, end);
  mask_cache cache{g, v};
  std::vector<std::uint64_t> naive(v->words()), cached(v->words()), memo(v->words());
  matcher m{g};
  auto masks_agree = [&] {
    fill_mask_naive(m, *v, naive);
    cache.fill(m, cached);
    fill_mask_memo(m, *v, memo);
    CHECK(cached == naive);
    CHECK(memo == naive);
    return allowed(*v, naive);
  };
  using list = std::vector<std::string>;
  REQUIRE(m.feed('"'));
  // Count 0 of {0,3}: up to three letters, or close now.
  CHECK(masks_agree() == list{"\"", "a", "ab", "abc", "a\"", "ab\"", "abc\"", "\"=", "\"=\"", "\"=\"ab", "b\"=\"", "z"});
  REQUIRE(m.feed('a'));
  CHECK(masks_agree() == list{"\"", "a", "ab", "a\"", "ab\"", "\"=", "\"=\"", "\"=\"ab", "b\"=\"", "z"});
  REQUIRE(m.feed('b'));
  CHECK(masks_agree() == list{"\"", "a", "a\"", "\"=", "\"=\"", "\"=\"ab", "b\"=\"", "z"});
  REQUIRE(m.feed('c'));
  CHECK(masks_agree() == list{"\"", "\"=", "\"=\"", "\"=\"ab"});
  const auto entries = cache.counters().entries;
  REQUIRE(m.feed("\"=\""));
  // Count 0 of {2,5}: closing needs two letters first.
  CHECK(masks_agree() == list{"a", "ab", "abc", "abcd", "ab\"", "abc\"", "z"});
  CHECK(cache.counters().entries == entries); // the inside of the second string reused the first's entry
  REQUIRE(m.feed('a'));
  CHECK(masks_agree() == list{"a", "ab", "abc", "abcd", "a\"", "ab\"", "abc\"", "z"});
  REQUIRE(m.feed("bcd"));
  CHECK(masks_agree() == list{"\"", "a", "a\"", "z"});
  REQUIRE(m.feed("a\""));
  CHECK(masks_agree() == list{"<end>"});
}

TEST_CASE("grammar repetition: along a long bounded string the cache reuses verdicts and stays exact to the bound") {
  // Tokens that close the string and go on ("a\"=", "\"=\"") are checked against the real
  // state; their verdicts are kept per state with the count clipped past the longest of them,
  // which must not change a mask near the bound (room 3, 2, 1, 0).
  auto g = gbnf("root ::= str \"=\" str\nstr ::= \"\\\"\" [a-z]{1,40} \"\\\"\"\n");
  const std::vector<std::string> tokens{"\"", "a", "aa", "aaaa", "a\"", "a\"=", "aa\"=\"a", "\"=", "\"=\"", "\"=\"a", ""};
  const std::vector<std::uint32_t> end{10};
  auto v = std::make_shared<const vocabulary>(tokens, end);
  mask_cache cache{g, v};
  std::vector<std::uint64_t> naive(v->words()), cached(v->words());
  matcher m{g};
  REQUIRE(m.feed('"'));
  for (int count = 0; count <= 40; ++count) {
    fill_mask_naive(m, *v, naive);
    cache.fill(m, cached);
    REQUIRE_MESSAGE(cached == naive, "after ", count, " letters");
    if (count < 40) REQUIRE(m.feed('a'));
  }
  CHECK(cache.counters().verdict_hits > 20); // the counts far from the bound share their verdicts
  fill_mask_naive(m, *v, naive);
  CHECK(allowed(*v, naive) == std::vector<std::string>{"\"", "\"=", "\"=\"", "\"=\"a"});
}
