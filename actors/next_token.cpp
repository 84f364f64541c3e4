#include "actors/next_token.hpp"

#include "actors/sequence_table.hpp"

#include <chrono>

namespace kvlane::actors {

next_token_outcome next_token(sequence& s, std::span<const float> logits) {
  using kind = next_token_outcome::kind;
  next_token_outcome out;
  auto* grammar = s.constrained.get();
  if (grammar && !grammar->mask_ready()) {
    const auto t0 = std::chrono::steady_clock::now();
    grammar->prepare_mask();
    out.mask_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  if (grammar && grammar->stuck()) {
    // Complete on a vocabulary without end tokens: a stop; else no token can go on.
    out.k = kind::end;
    if (grammar->complete())
      return out;
    out.end = end_reason::error;
    out.error = "the output grammar allows no token of the model's vocabulary here";
    return out;
  }
  const auto tok = grammar ? s.smp.sample(logits, grammar->mask()) : s.smp.sample(logits);
  if (s.smp.is_stop(tok) || (grammar && grammar->is_end(tok))) {
    out.k = kind::end;
    return out;
  }
  const auto grammar_says = grammar ? grammar->advance(tok) : constrained_output::outcome::more;
  if (grammar_says == constrained_output::outcome::broken) {
    out.k = kind::end;
    out.end = end_reason::error;
    out.error = "a sampled token left the output grammar";
    return out;
  }
  out.token = tok;
  if (grammar_says == constrained_output::outcome::complete) {
    out.k = kind::last_token;
  } else if (s.generated + 1 >= s.smp.params().max_tokens) {
    out.k = kind::last_token;
    out.end = end_reason::length;
  }
  return out;
}

} // namespace kvlane::actors
