#pragma once

// kvlane::actors::next_token — what a sequence does with its row of a step's logits: the
// token it takes, and whether it ends there.
//
// Problem it solves: after every step, each sequence whose prompt is in its KV samples one
// token and may end: a stop token, an end token its grammar allows, a grammar that is
// complete or allows no token of the vocabulary, a token sampled outside the grammar, or
// max_tokens reached. The decision depends only on the sequence's sampler, grammar state and
// count of generated tokens, so it is made here, without an actor or a clock; the scheduler
// carries it out (appends the token, sends it to the session, ends the sequence).
//
// A grammar mask not computed while the step ran (actors/constrained_decoding) is computed
// here, at sampling time; its duration is reported so that the scheduler's mask figures count
// it as not overlapped.
//
// Threading: the scheduler's thread (it advances the sequence's sampler and grammar).

#include "actors/messages.hpp"

#include <optional>
#include <span>
#include <string_view>

namespace kvlane::actors {

struct sequence;

struct next_token_outcome {
  enum class kind : std::uint8_t {
    token,      ///< append `token`; the sequence goes on
    last_token, ///< append `token`, then the sequence ends with `end`
    end,        ///< no token: the sequence ends with `end` (`error` says why for an error)
  };
  kind k = kind::token;
  token_id token = 0;
  end_reason end = end_reason::stop;
  std::string_view error;        ///< the reason of an end_reason::error, static text
  std::optional<double> mask_us; ///< a mask computed here, at sampling, and its time
};

/// Samples `s`'s next token from `logits` (its row) and advances its sampler and grammar.
/// Leaves `s.tokens` and `s.generated` to the caller, which applies the outcome.
next_token_outcome next_token(sequence& s, std::span<const float> logits);

} // namespace kvlane::actors
