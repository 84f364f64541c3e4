#include "common/grammar/gbnf.hpp"
#include "common/grammar/matcher.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

using namespace kvlane::grammar;

using kvlane::test::gbnf;

namespace {

const char* const list_grammar = R"(root ::= "[" (item ("," item)*)? "]"
item ::= [0-9]+ | "\"" [a-z]* "\""
)";

/// Every byte's verdict and can_end after it, for `text` fed one byte at a time.
std::string trace(matcher& m, std::string_view text) {
  std::string out;
  for (char c : text) {
    bool ok = m.feed(static_cast<std::uint8_t>(c));
    out += ok ? (m.can_end() ? 'E' : 'a') : 'r';
  }
  return out;
}

} // namespace

TEST_CASE("grammar matcher: a rejected byte leaves the state unchanged and can_end tracks completeness") {
  matcher sut{gbnf(list_grammar)};
  CHECK_FALSE(sut.can_end());
  CHECK(sut.feed('['));
  CHECK_FALSE(sut.feed('x'));
  CHECK(sut.position() == 1);
  CHECK(sut.feed(std::string_view{"12,\"ab\""}));
  CHECK_FALSE(sut.can_end());
  CHECK_FALSE(sut.feed(std::string_view{",3x"})); // all or nothing
  CHECK(sut.position() == 8);
  CHECK(sut.feed(']'));
  CHECK(sut.can_end());
  CHECK_FALSE(sut.can_continue());
}

TEST_CASE("grammar matcher: rollback_to returns to the earlier state exactly") {
  const auto g = gbnf(list_grammar);
  matcher sut{g};
  REQUIRE(sut.feed(std::string_view{"[1,\"abc\""}));
  const std::size_t mark = sut.position();
  matcher reference = sut;
  REQUIRE(sut.feed(std::string_view{",22,\"x\"]"}));
  CHECK(sut.can_end());
  sut.rollback_to(mark);
  CHECK(sut.position() == mark);
  CHECK_FALSE(sut.can_end());
  // Same verdicts as the copy taken at the mark, byte by byte, on accepted and rejected input.
  matcher copy = reference;
  CHECK(trace(sut, ",7,\"q\"]x") == trace(copy, ",7,\"q\"]x"));
  sut.rollback_to(0);
  CHECK(sut.position() == 0);
  CHECK(trace(sut, "[]") == "aE");
}

TEST_CASE("grammar matcher: a saved state restores into a matcher that behaves identically, rollback included") {
  const auto g = gbnf(list_grammar);
  matcher sut{g};
  REQUIRE(sut.feed(std::string_view{"[10,\"ab"}));
  const std::string saved = sut.save();
  auto restored = matcher::restore(g, saved);
  REQUIRE_MESSAGE(restored.has_value(), (restored ? std::string{} : restored.error().message()));
  CHECK(restored->position() == sut.position());
  CHECK(restored->save() == saved);
  const std::string rest = "c\",5]]";
  matcher original = sut;
  CHECK(trace(*restored, rest) == trace(original, rest));
  restored->rollback_to(3); // "[10": the history came along
  CHECK(trace(*restored, ",\"z\"]") == "aaaaE");
}

TEST_CASE("grammar matcher: restore rejects a state of another grammar and corrupt bytes without crashing") {
  const auto g = gbnf(list_grammar);
  matcher sut{g};
  REQUIRE(sut.feed(std::string_view{"[1,2"}));
  const std::string saved = sut.save();
  CHECK(matcher::restore(gbnf("root ::= \"x\"\n"), saved).error().what == "saved for a different grammar");
  CHECK(matcher::restore(g, "nonsense").error().what == "not a saved matcher state (bad magic)");
  CHECK(matcher::restore(g, saved.substr(0, saved.size() - 1)).error().what ==
        "size does not match the counts in the header");
  // Every single-byte corruption either restores to a matcher that stays within bounds or is an
  // error; feeding the restored one must not crash (run under the sanitizers in CI).
  for (std::size_t i = 4; i < saved.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xFF}) {
      std::string bad = saved;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ flip);
      auto r = matcher::restore(g, bad);
      if (r) {
        (void)r->feed(std::string_view{",3]"});
        r->rollback_to(0);
        (void)r->feed('[');
      }
    }
  }
}

TEST_CASE("grammar matcher: an ambiguous grammar merges equal stacks instead of multiplying them") {
  // Each "a" can be matched two ways; without merging, 64 bytes would make 2^64 stacks.
  matcher sut{gbnf("root ::= (\"a\" | \"a\" | [a-b])*\n")};
  CHECK(sut.feed(std::string(64, 'a')));
  CHECK(sut.can_end());
  CHECK_FALSE(sut.exhausted());
}

TEST_CASE("grammar matcher: the node bound rejects input past it and says so") {
  matcher_limits lim;
  lim.max_nodes = 64;
  matcher sut{gbnf("root ::= \"(\" root \")\" | \"x\"\n"), lim};
  std::size_t fed = 0;
  while (fed < 1000 && sut.feed('(')) ++fed;
  CHECK(fed < 64);
  CHECK(sut.exhausted());
}

TEST_CASE("grammar matcher: a grammar whose start passes the bounds gives an exhausted matcher that accepts nothing") {
  // r0 ::= r1 r1, r1 ::= r2 r2, ...: 2^30 ways to derive the empty prefix.
  std::string text = "root ::= r0 \"x\"\n";
  for (int k = 0; k < 30; ++k) text += "r" + std::to_string(k) + " ::= r" + std::to_string(k + 1) + " \"a\"? r" + std::to_string(k + 1) + "\n";
  text += "r30 ::= \"y\" | \"\"\n";
  matcher sut{gbnf(text)};
  CHECK(sut.exhausted());
  CHECK_FALSE(sut.can_end());
  CHECK_FALSE(sut.feed('x'));
  CHECK(sut.exhausted());
}
