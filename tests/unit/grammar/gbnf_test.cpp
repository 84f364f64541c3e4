#include "common/grammar/gbnf.hpp"
#include "common/grammar/matcher.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

using namespace kvlane::grammar;

using kvlane::test::accepts;
using kvlane::test::gbnf;

namespace {

std::string error_of(std::string_view text, const limits& lim = {}) {
  auto g = compile_gbnf(text, lim);
  REQUIRE_FALSE(g.has_value());
  return g.error().message();
}

} // namespace

TEST_CASE("grammar gbnf: literals, classes, groups, alternation and repetition accept exactly their language") {
  auto sut = gbnf(R"(root ::= "a" [b-d]+ ("x" | "yz")? tail{2,3}
tail ::= [0-9]   # a digit
)");
  CHECK(accepts(sut, "ab12"));
  CHECK(accepts(sut, "abcdx123"));
  CHECK(accepts(sut, "adyz12"));
  CHECK_FALSE(accepts(sut, "a12"));      // + needs one
  CHECK_FALSE(accepts(sut, "abx1"));     // {2,3} needs two
  CHECK_FALSE(accepts(sut, "abx1234"));  // at most three
  CHECK_FALSE(accepts(sut, "abxy12"));   // "yz" is one literal
}

TEST_CASE("grammar gbnf: escapes in literals and classes, negated classes and dot match UTF-8 characters") {
  auto sut = gbnf(R"(root ::= "\"" [^"\\]* "\"" "\n" "\x41\u00e9" . [α-ω]
)");
  CHECK(accepts(sut, "\"h\xC3\xA9llo\"\nA\xC3\xA9" "Z\xCE\xB2"));
  CHECK(accepts(sut, "\"\"\nA\xC3\xA9\xF0\x9F\x98\x80\xCF\x89")); // . takes a 4-byte emoji
  CHECK_FALSE(accepts(sut, "\"a\\\"\nA\xC3\xA9ZZ"));                 // no backslash inside, Z not Greek
  CHECK_FALSE(accepts(sut, "\"\xC3\"\nA\xC3\xA9Z\xCE\xB2"));        // a truncated UTF-8 sequence
  CHECK_FALSE(accepts(sut, "\"\xED\xA0\x80\"\nA\xC3\xA9Z\xCE\xB2")); // a surrogate is not UTF-8
}

TEST_CASE("grammar gbnf: a body continues after | and inside parentheses across lines") {
  auto sut = gbnf("root ::= (\n  \"a\"\n  | \"b\" ) |\n  \"c\"\n");
  CHECK(accepts(sut, "a"));
  CHECK(accepts(sut, "b"));
  CHECK(accepts(sut, "c"));
  CHECK_FALSE(accepts(sut, "ab"));
  // As llama.cpp: the body may start on the line after ::=.
  auto next_line = gbnf("root ::=\n  greeting \"!\"\ngreeting ::=\n  \"hello\" |\n  \"hi\"\n");
  CHECK(accepts(next_line, "hello!"));
  CHECK(accepts(next_line, "hi!"));
  CHECK_FALSE(accepts(next_line, "!"));
}

TEST_CASE("grammar gbnf: recursion that is not left recursion nests to any depth") {
  auto sut = gbnf("root ::= \"(\" root \")\" | \"x\"\n");
  CHECK(accepts(sut, "x"));
  CHECK(accepts(sut, "((((x))))"));
  CHECK_FALSE(accepts(sut, "((x)"));
}

TEST_CASE("grammar gbnf: errors name line, column and what is wrong") {
  CHECK(error_of("root ::= \"abc\n") == "1:10: unterminated string literal");
  CHECK(error_of("root ::= x\n") == "1:10: undefined rule 'x'");
  CHECK(error_of("root ::= \"a\"\n  \nroot ::= \"b\"\n") == "3:1: rule 'root' is defined twice");
  CHECK(error_of("root = \"a\"\n") == "1:6: expected '::=' after rule name 'root', found '='");
  CHECK(error_of("root ::= (\"a\"\n") == "1:10: unclosed '(': expected ')' before the end of the text");
  CHECK(error_of("root ::= \"a\" )\n") == "1:14: unbalanced ')'");
  CHECK(error_of("root ::= [b-a]\n") == "1:13: class range is reversed");
  CHECK(error_of("root ::= \"\\q\"\n") == "1:11: unknown escape '\\q'");
  CHECK(error_of("a ::= \"x\"\n") == "no rule named 'root'");
  CHECK(error_of("") == "1:1: the grammar is empty (expected at least `root ::= ...`)");
  CHECK(error_of("root ::= \"a\"{3,2}\n") == "1:13: repetition {m,n} with n < m");
}

TEST_CASE("grammar gbnf: left recursion is rejected with the cycle spelled out") {
  CHECK(error_of("root ::= list\nlist ::= list \",\" item | item\nitem ::= \"x\"\n") ==
        "left recursion is not supported: list -> list (rewrite it with repetition, e.g. x ::= y (\",\" y)*)");
  // Through a nullable prefix, and through another rule.
  CHECK(error_of("root ::= e? root \"x\" | \"y\"\ne ::= \"e\"\n").find("left recursion is not supported: root") == 0);
  CHECK(error_of("root ::= a\na ::= b \"1\"\nb ::= a \"2\" | \"3\"\n") ==
        "left recursion is not supported: a -> b -> a (rewrite it with repetition, e.g. x ::= y (\",\" y)*)");
  // A star of something nullable would repeat it forever without consuming.
  CHECK(error_of("root ::= (\"a\"?)*\n").find("an unbounded repetition of '") == 0);
  CHECK(error_of("root ::= x+\nx ::= \"a\" | \"\"\n") ==
        "an unbounded repetition of 'x', which may match nothing, is not supported (rewrite (x?)* as x*)");
}

TEST_CASE("grammar gbnf: limits bound repetition, nesting, rule count and expanded size") {
  CHECK(error_of("root ::= \"a\"{20000}\n") == "1:14: repetition bound exceeds the limit 10000");
  limits small;
  small.max_nesting = 3;
  CHECK(error_of("root ::= ((((\"a\"))))\n", small) == "1:14: groups nested deeper than 3");
  small = {};
  small.max_elements = 1000;
  CHECK(error_of("root ::= \"" + std::string(2000, 'a') + "\"\n", small).find("the grammar expands to more than 1000 elements") != std::string::npos);
  // A counted repetition is one element whatever its bound.
  CHECK(compile_gbnf("root ::= \"abcdefgh\"{2000}\n", small).has_value());
  small = {};
  small.max_rules = 3;
  CHECK(error_of("root ::= a b c\na ::= \"1\"\nb ::= \"2\"\nc ::= \"3\"\n", small).find("more than 3 rules") != std::string::npos);
}

TEST_CASE("grammar gbnf: a long chain of nullable rules declared in the worst order compiles") {
  // r0 ::= r1, r1 ::= r2, ... each nullable only once the next is known to be: a fixpoint pass
  // over all rules per rule would be quadratic in the rule count.
  std::string text = "root ::= r0 \"x\"\n";
  const int n = 20000;
  for (int k = 0; k < n; ++k) text += "r" + std::to_string(k) + " ::= r" + std::to_string(k + 1) + "\n";
  text += "r" + std::to_string(n) + " ::= \"y\" | \"\"\n";
  auto sut = gbnf(text);
  CHECK(accepts(sut, "x"));
  CHECK(accepts(sut, "yx"));
  CHECK_FALSE(accepts(sut, "yyx"));
}
