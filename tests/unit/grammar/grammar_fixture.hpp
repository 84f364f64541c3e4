#pragma once

// Grammars for tests: compile GBNF (the test fails with the compiler's message if it does not
// compile) and ask whether a grammar, or a request's output constraint, accepts a whole text.

#include "actors/output_constraint.hpp"
#include "common/grammar/gbnf.hpp"
#include "common/grammar/matcher.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::test {

inline std::shared_ptr<const grammar::grammar> gbnf(std::string_view text) {
  auto g = grammar::compile_gbnf(text);
  REQUIRE_MESSAGE(g.has_value(), (g ? std::string{} : g.error().message()));
  return *g;
}

/// Whether `g` accepts `text` as a whole sentence.
inline bool accepts(const std::shared_ptr<const grammar::grammar>& g, std::string_view text) {
  grammar::matcher m{g};
  return m.feed(text) && m.can_end();
}

/// Whether the constraint's grammar accepts `text` as a whole sentence.
inline bool accepts(const std::shared_ptr<const actors::output_constraint>& c, std::string_view text) {
  REQUIRE(c != nullptr);
  return accepts(c->grammar, text);
}

} // namespace kvlane::test
