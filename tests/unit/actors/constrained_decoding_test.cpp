// The per-sequence grammar state: masks from the start and after a trigger, triggers that span
// tokens or share a token with free text, completion, rollback, partial UTF-8 tokens.
#include "actors/constrained_decoding.hpp"
#include "common/grammar/json_schema.hpp"
#include "tests/unit/actors/vocab_fixture.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

using namespace kvlane;
using actors::constrained_output;
using outcome = actors::constrained_output::outcome;
using test::gbnf;
using test::vocab_fixture;

namespace {

bool allows(std::span<const std::uint64_t> bits, std::uint32_t id) {
  return (bits[id >> 6] >> (id & 63)) & 1u;
}

std::vector<std::string> allowed(const vocab_fixture& v, std::span<const std::uint64_t> bits) {
  std::vector<std::string> out;
  for (std::uint32_t i = 0; i < v.tokens.size(); ++i)
    if (allows(bits, i))
      out.push_back(i == v.end ? "<end>" : v.tokens[i]);
  return out;
}

} // namespace

TEST_CASE("constrained decoding: from the first token the mask allows exactly the grammar's "
          "tokens, the end token once complete, and completion ends the sequence") {
  vocab_fixture v{{"a", "b", "ab", "c", "x"}};
  auto sut = v.make(gbnf(R"(root ::= "a" "b"+ "c")"), {}, false);
  CHECK(sut.active());
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"a", "ab"});
  CHECK(sut.advance(v.id("ab")) == outcome::more);
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"b", "c"});
  CHECK(sut.advance(v.id("c")) == outcome::more); // end_when_complete off: the model ends it
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"<end>"});
  CHECK(sut.is_end(v.end));
  CHECK_FALSE(sut.stuck());

  auto ends = v.make(gbnf(R"(root ::= "a" "b"+ "c")"));
  CHECK(ends.advance(v.id("a")) == outcome::more);
  CHECK(ends.advance(v.id("b")) == outcome::more);
  CHECK(ends.advance(v.id("c")) == outcome::complete);
  // A grammar that may go on is not complete while it can continue.
  auto more = v.make(gbnf(R"(root ::= "a"+)"));
  CHECK(more.advance(v.id("a")) == outcome::more);
  CHECK(allowed(v, more.mask()) == std::vector<std::string>{"a", "<end>"});
}

TEST_CASE("constrained decoding: a token the grammar rejects breaks it, a grammar with no next "
          "token is stuck") {
  vocab_fixture v{{"a", "b"}};
  auto sut = v.make(gbnf(R"(root ::= "a" "b")"));
  CHECK(sut.advance(v.id("b")) == outcome::broken);
  auto stuck = v.make(gbnf(R"(root ::= "a" "z")"));
  REQUIRE(stuck.advance(v.id("a")) == outcome::more);
  CHECK(stuck.stuck()); // no token holds "z"
}

TEST_CASE("constrained decoding: with a trigger the text is free until the trigger, which may "
          "span tokens and share a token with free text") {
  vocab_fixture v{{"hi ", "x<", "to", "ol>", "<tool>", "{", "}", "a", "ol>{", "ol>z"}};
  auto g = gbnf(R"(root ::= "<tool>" "{" "a"* "}")");
  auto sut = v.make(g, {"<tool>"});
  CHECK_FALSE(sut.active());
  CHECK(sut.mask().empty()); // nothing before it can break the grammar
  CHECK(sut.advance(v.id("hi ")) == outcome::more);
  CHECK(sut.mask().empty());
  CHECK(sut.advance(v.id("x<")) == outcome::more); // "x" is free text, "<" begins the trigger
  CHECK_FALSE(sut.active());
  CHECK(sut.advance(v.id("to")) == outcome::more);
  // After "...<to", the tokens completing the trigger are checked: "ol>z" would leave the
  // grammar, "ol>" and "ol>{" are fine; everything else stays allowed (free text).
  const auto m = sut.mask();
  REQUIRE_FALSE(m.empty());
  CHECK_FALSE(allows(m, v.id("ol>z")));
  CHECK(allows(m, v.id("ol>")));
  CHECK(allows(m, v.id("ol>{")));
  CHECK(allows(m, v.id("hi ")));
  CHECK(sut.advance(v.id("ol>{")) == outcome::more);
  REQUIRE(sut.active());
  CHECK(sut.constrained_from() == 4); // "hi x" precedes the trigger
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"}", "a"});
  CHECK(sut.advance(v.id("}")) == outcome::complete);
}

TEST_CASE("constrained decoding: a token holding a whole trigger and a rejected tail is masked "
          "out of free text") {
  vocab_fixture v{{"a", "<tool>{", "<tool>}", "b"}};
  auto sut = v.make(gbnf(R"(root ::= "<tool>{" "b"* "}")"), {"<tool>"});
  const auto m = sut.mask();
  REQUIRE_FALSE(m.empty());
  CHECK(allows(m, v.id("<tool>{")));
  CHECK_FALSE(allows(m, v.id("<tool>}")));
  CHECK(allows(m, v.id("a")));
  CHECK(allows(m, v.end)); // free text may end
}

TEST_CASE("constrained decoding: rollback returns to the state of the kept tokens, before the "
          "trigger the text is free again") {
  vocab_fixture v{{"pre", "<t>", "[", "1", ",", "]"}};
  auto g = gbnf(R"(root ::= "<t>[" "1" ("," "1")* "]")");
  auto sut = v.make(g, {"<t>"});
  for (auto t : {"pre", "<t>", "[", "1", ","})
    REQUIRE(sut.advance(v.id(t)) == outcome::more);
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"1"});
  sut.rollback(4); // pre <t> [ 1
  CHECK_FALSE(sut.mask_ready());
  CHECK(sut.text() == "pre<t>[1");
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{",", "]"});
  // The state equals one that never went past the kept tokens.
  auto fresh = v.make(g, {"<t>"});
  for (auto t : {"pre", "<t>", "[", "1"})
    REQUIRE(fresh.advance(v.id(t)) == outcome::more);
  CHECK(allowed(v, fresh.mask()) == allowed(v, sut.mask()));
  sut.rollback(1); // before the trigger
  CHECK_FALSE(sut.active());
  CHECK(sut.mask().empty());
  CHECK(sut.advance(v.id("<t>")) == outcome::more);
  CHECK(sut.active());
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"["});
  sut.rollback(0);
  CHECK(sut.text().empty());
  CHECK_FALSE(sut.active());
}

TEST_CASE("constrained decoding: tokens ending inside a UTF-8 sequence are fed as bytes") {
  // "é" is C3 A9; the tokens split it.
  vocab_fixture v{{"\xC3", "\xA9", "\xC3\xA9", "e", "\""}};
  auto sut = v.make(grammar::compile_json_schema(R"({"type":"string","maxLength":2})").value());
  REQUIRE(sut.advance(v.id("\"")) == outcome::more);
  CHECK(allows(sut.mask(), v.id("\xC3")));
  CHECK_FALSE(allows(sut.mask(), v.id("\xA9"))); // not a character's first byte
  REQUIRE(sut.advance(v.id("\xC3")) == outcome::more);
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"\xA9"});
  REQUIRE(sut.advance(v.id("\xA9")) == outcome::more);
  REQUIRE(sut.advance(v.id("\xC3\xA9")) == outcome::more);
  CHECK(allowed(v, sut.mask()) == std::vector<std::string>{"\""}); // maxLength 2
  CHECK(sut.advance(v.id("\"")) == outcome::complete);
}

TEST_CASE("constrained decoding: mask figures count where each mask was computed and bound the "
          "quantiles by their bucket") {
  actors::mask_figures sut;
  CHECK(sut.quantile_us(0.5) == 0);
  for (int i = 0; i < 98; ++i)
    sut.observe(3.0, true);
  sut.observe(900.0, false);
  sut.observe(1500.0, true);
  CHECK(sut.count() == 100);
  CHECK(sut.during_step == 99);
  CHECK(sut.at_sampling == 1);
  CHECK(sut.quantile_us(0.5) >= 3.0);
  CHECK(sut.quantile_us(0.5) < 3.0 * 1.5);
  CHECK(sut.quantile_us(0.99) >= 900.0);
  CHECK(sut.quantile_us(0.99) < 1500.0);
  CHECK(sut.quantile_us(1.0) >= 1500.0);
  CHECK(sut.max_ms == doctest::Approx(1.5));
}

TEST_CASE("constrained decoding: a token holding a whole trigger is judged with the text when it "
          "also completes a trigger the text began") {
  // "t><t>}" alone starts a trigger at its third byte: "<t>}" is rejected. After the text "<"
  // it completes the trigger the text began: "<t><t>}" is accepted, and that verdict stands.
  vocab_fixture v{{"<", "t><t>}", "x", "<t>}"}};
  auto sut = v.make(gbnf(R"(root ::= "<t>" ("<t>}" | "{}"))"), {"<t>"});
  auto m = sut.mask();
  REQUIRE_FALSE(m.empty());
  CHECK_FALSE(allows(m, v.id("t><t>}")));
  CHECK_FALSE(allows(m, v.id("<t>}")));
  CHECK(allows(m, v.id("x")));
  REQUIRE(sut.advance(v.id("<")) == outcome::more);
  m = sut.mask();
  CHECK(allows(m, v.id("t><t>}")));
  CHECK_FALSE(allows(m, v.id("<t>}"))); // its own trigger, after "<": still "<t>}"
  CHECK(sut.advance(v.id("t><t>}")) == outcome::complete);
  CHECK(sut.constrained_from() == 0);
}
