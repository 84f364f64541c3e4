#pragma once

// A small token vocabulary and grammars for tests of per-sequence grammar state
// (actors/constrained_decoding) and of what uses it.

#include "actors/constrained_decoding.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::test {

/// A small vocabulary: token i is tokens[i]; "" is a special token; `end` the end token.
struct vocab_fixture {
  std::vector<std::string> tokens;
  std::uint32_t end = 0;
  std::shared_ptr<const grammar::vocabulary> vocab;

  explicit vocab_fixture(std::vector<std::string> t) : tokens(std::move(t)) {
    tokens.push_back(""); // the end token: no bytes
    end = static_cast<std::uint32_t>(tokens.size() - 1);
    const std::vector<std::uint32_t> ends{end};
    vocab = std::make_shared<const grammar::vocabulary>(tokens, ends);
  }
  std::uint32_t id(std::string_view text) const {
    for (std::uint32_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == text)
        return i;
    FAIL("no token " << text);
    return 0;
  }
  std::shared_ptr<const actors::constraint_setup> setup(std::shared_ptr<const grammar::grammar> g,
                                                        std::vector<std::string> triggers = {},
                                                        bool end_when_complete = true) const {
    auto c = std::make_shared<actors::output_constraint>();
    c->grammar = g;
    c->triggers = std::move(triggers);
    c->end_when_complete = end_when_complete;
    auto s = std::make_shared<actors::constraint_setup>();
    s->constraint = c;
    s->vocabulary = vocab;
    s->masks = std::make_shared<grammar::mask_cache>(g, vocab);
    if (!c->triggers.empty())
      s->triggers = std::make_shared<const actors::trigger_table>(c->triggers, *vocab);
    return s;
  }
  actors::constrained_output make(std::shared_ptr<const grammar::grammar> g,
                                  std::vector<std::string> triggers = {},
                                  bool end_when_complete = true) const {
    return actors::constrained_output{*setup(std::move(g), std::move(triggers), end_when_complete)};
  }
};

} // namespace kvlane::test
