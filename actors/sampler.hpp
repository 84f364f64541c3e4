#pragma once

// kvlane::actors::sampler — turns one logits row into one token, on the host.
//
// Problem it solves: a backend's step() returns raw logits (vocab_size floats
// per row); each session needs its own temperature / top-k / top-p policy and
// its own reproducible random stream. The sampler is that per-session policy
// plus RNG, with scratch buffers kept inside so the per-token path does not
// allocate once it has seen the vocabulary size.
//
// Ownership and threading: a sampler is a plain value owned by one session and
// used by one thread at a time. It is copyable; a copy continues the same
// random sequence. state()/restore() expose the RNG position as a trivially
// copyable struct so a preempted session can be resumed (or replayed) exactly.
//
// Determinism: the RNG is xoshiro256** seeded through splitmix64
// (common/random.hpp, no standard-library distributions), candidate ordering
// uses a strict total order (logit descending, index ascending) and sums run in
// a fixed order, so a given seed yields the same tokens with any standard
// library. std::exp is the
// only platform-dependent step: a different libm may differ in the last ulp.
//
// Non-finite logits: NaN counts as -inf (the token can never be chosen); +inf
// counts as the largest finite float, so +inf tokens share all probability
// mass equally. If every logit is -inf or NaN (or the row is empty), sample()
// returns token 0: the caller gets an in-range token and no error path on the
// hot loop; a backend producing such rows is broken and is diagnosed upstream.

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace kvlane::actors {

inline constexpr float max_temperature = 100.0f;
inline constexpr std::size_t max_stop_tokens = 16;
inline constexpr std::size_t max_banned_tokens = 16;
/// The most alternatives a request may ask for per token (OpenAI's bound).
inline constexpr std::uint32_t max_top_logprobs = 20;
/// The log probability reported for a token that can never be drawn
/// (OpenAI's convention; -inf has no JSON spelling).
inline constexpr float min_logprob = -9999.0f;

struct sampling_params {
  float temperature = 0.0f;  ///< 0 = greedy (argmax)
  std::uint32_t top_k = 0;   ///< 0 = off
  float top_p = 1.0f;        ///< 1 = off
  std::uint64_t seed = 0;
  std::uint32_t max_tokens = 256;
  std::vector<backends::token_id> stop_tokens;
  /// Ids at or above this are never sampled (0: the whole row). The engine
  /// sets it to the tokenizer's size: a model's logits row may be wider than
  /// its vocabulary, and the padding ids have no text.
  std::uint32_t token_limit = 0;
  /// OpenAI's penalties, in [-2, 2]: before sampling, each token already
  /// generated c > 0 times loses presence_penalty + c * frequency_penalty.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  /// Report the log probability of every sampled token (sampler::last_logprobs()),
  /// with the top_logprobs most likely alternatives (<= max_top_logprobs).
  /// Off costs nothing: no extra pass over the logits.
  bool logprobs = false;
  std::uint32_t top_logprobs = 0;
  /// Tokens never drawn, whatever their logits or a token mask say (e.g. the single token
  /// that opens a tool call, for a request whose tool_choice is "none"). They get -inf
  /// before everything else, as tokens outside a mask do; logprobs report them as
  /// min_logprob. Should not hold a stop token (a stop would then never be sampled).
  std::vector<backends::token_id> banned_tokens;
};
inline constexpr float max_penalty = 2.0f;

struct token_logprob {
  backends::token_id token = 0;
  float logprob = min_logprob; ///< natural log, in [min_logprob, 0]
};

/// The log probabilities of one sampled token and its most likely alternatives.
/// Fixed size (no allocation) so it travels with the token by value.
struct token_logprobs {
  token_logprob chosen;
  std::uint32_t top_count = 0;
  std::array<token_logprob, max_top_logprobs> top{}; ///< most likely first, ties by lower id

  std::span<const token_logprob> alternatives() const noexcept { return {top.data(), top_count}; }
};
static_assert(std::is_trivially_copyable_v<token_logprobs>);

/// Checks `p` against the model's geometry. The error names the offending
/// field and the value it had, e.g. "top_p must be in (0, 1], got 1.5".
expected<void, std::string> validate(const sampling_params& p, std::uint32_t vocab_size,
                                     std::uint32_t max_context);

/// The resumable part of a sampler: where its random stream stands.
struct sampler_state {
  std::array<std::uint64_t, 4> rng{};
  std::uint64_t draws = 0;
};
static_assert(std::is_trivially_copyable_v<sampler_state>);

class sampler {
public:
  /// `params` should have passed validate(); out-of-range values do not crash
  /// (non-positive or non-finite temperature samples greedily, top_p outside
  /// (0, 1) is treated as off or as "top token only", top_k beyond the row is off).
  explicit sampler(sampling_params params);

  /// Picks one token from `logits` (its first params().token_limit entries
  /// when that is set and smaller than the row). Greedy when temperature is 0 (lowest index
  /// wins ties; consumes no randomness). Otherwise: top-k on the logits,
  /// softmax at the temperature, nucleus (top-p) cut, renormalize, and exactly
  /// one random draw per call (an empty row draws nothing). The result is
  /// always < logits.size(), or 0 for an empty row. Allocates only when the
  /// row is longer than any seen before.
  backends::token_id sample(std::span<const float> logits);
  /// The same with a token mask (constrained decoding): token t may be drawn only if bit t of
  /// `allowed` (bit t % 64 of word t / 64) is set; the others get -inf before penalties,
  /// temperature, top-k, top-p and logprobs, so the draw is from the allowed tokens alone. When
  /// every allowed token's logit is -inf or NaN (e.g. a grammar that is complete allows only
  /// the end token, which the model scores -inf), the lowest allowed id is returned (with the
  /// one random draw a non-greedy call makes). An empty `allowed` is no mask; a mask that
  /// allows nothing is read as every logit -inf (token 0): the caller ends such a sequence.
  backends::token_id sample(std::span<const float> logits, std::span<const std::uint64_t> allowed);
  // With a penalty set, the logits are first copied and penalised by the
  // counts of the tokens this sampler returned before (a sparse count table).

  // With logprobs set, the same row (penalised, at the temperature) is also
  // log-softmaxed for last_logprobs(); see log_probabilities().

  /// The log probabilities of the token the last sample() returned; meaningful
  /// only when params().logprobs is set.
  const token_logprobs& last_logprobs() const noexcept { return logprobs_; }

  bool is_stop(backends::token_id t) const noexcept;

  /// Random numbers consumed so far (one per non-greedy sample() call);
  /// part of state(), so it survives restore().
  std::uint64_t draws() const noexcept { return state_.draws; }

  const sampling_params& params() const noexcept { return params_; }

  sampler_state state() const noexcept { return state_; }
  void restore(const sampler_state& s) noexcept { state_ = s; }

private:
  std::uint64_t next_u64() noexcept;
  double next_unit() noexcept;
  backends::token_id sample_few(std::size_t k, float max_v, float inv_t, double u) noexcept;
  backends::token_id sample_all(std::size_t k, double u) noexcept;
  backends::token_id pick(std::span<const float> logits);
  std::span<const float> penalised(std::span<const float> logits);
  /// `logits` with the tokens `allowed` does not have, and the banned ones, at -inf (into
  /// masked_; an empty `allowed` allows every token); sets `forced` to the lowest allowed id
  /// that is not banned when no such token has a finite logit.
  std::span<const float> masked(std::span<const float> logits, std::span<const std::uint64_t> allowed,
                                std::optional<backends::token_id>& forced);

  sampling_params params_;
  sampler_state state_;
  // Scratch, sized to the vocabulary on first use and reused afterwards.
  std::vector<float> scaled_;         // cleaned logits, then (logit - max) / temperature
  std::vector<float> probs_;          // unnormalized probabilities
  std::vector<std::uint32_t> order_;  // candidate token ids
  std::vector<double> buckets_;       // probability mass per log-probability band (top-p)
  std::vector<float> penalised_;      // penalised copy of the row (penalties only)
  std::vector<float> masked_;         // masked copy of the row (token masks, banned tokens)
  std::vector<backends::token_id> banned_; // params_.banned_tokens, sorted, unique
  std::vector<std::pair<backends::token_id, std::uint32_t>> counts_; // returned tokens, sorted
  token_logprobs logprobs_;           // of the last sampled token (logprobs only)
};

/// The log-softmax of `logits` at `temperature` (the distribution a token is
/// drawn from before top-k and top-p truncate it; a temperature that is not
/// positive and finite, i.e. greedy, counts as 1): the entry of `chosen` and
/// the `top_n` (<= max_top_logprobs) most likely tokens. Non-finite logits are
/// read as sample() reads them; impossible tokens report min_logprob and are
/// never listed as alternatives. One pass over the row, no allocation.
token_logprobs log_probabilities(std::span<const float> logits, float temperature,
                                 backends::token_id chosen, std::uint32_t top_n) noexcept;

} // namespace kvlane::actors
