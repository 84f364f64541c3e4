#pragma once

// kvlane::actors::constrained_decoding — a sequence's grammar state: which tokens it may sample
// next, what a sampled token does to it, and how it goes back.
//
// Problem it solves: a request with an output_constraint must only produce text of its grammar
// (from the first token, or from a trigger on), whatever the scheduler does to the sequence in
// between: a swap parks its KV and loads it back, a recompute replays its generated tokens as a
// prompt, engine::stop trims its last tokens. All of that is true here because the matcher is a
// value of the sequence (sequence_table's `sequence`), not of its KV: a park or a recompute
// leaves it as it was after the last sampled token (the replayed tokens are not fed again), a
// trim rolls it back to the byte position of the kept tokens.
//
// The mask of the next token depends only on the state after the last sampled token, so the
// scheduler computes it (prepare_mask) right after it hands a step to the compute lane, while
// the device runs that step; the sampler applies it when the step's logits come back. A mask
// whose state changed since (stale) is recomputed at sampling time.
//
// Lazy constraints (triggers): the text is free until it contains a trigger. The token that
// completes one (it may start before the trigger, or run past it) activates a fresh matcher fed
// from the trigger's first byte to the token's last. So that such a token can never leave the
// grammar, free text is masked too, but only where it matters: when the text so far ends with
// the beginning of a trigger (or a token holds a whole trigger), the tokens that would complete
// it are checked against the grammar and those it rejects are masked out; otherwise no mask.
//
// Tokens are their bytes (grammar::vocabulary): a token ending inside a UTF-8 sequence is fed
// as the bytes it is; the matcher is byte-level.
//
// Threading: a constrained_output is owned by one sequence and used on its scheduler's thread;
// the trigger_table, vocabulary and mask cache it points to are shared and thread-safe.

#include "actors/output_constraint.hpp"
#include "backends/backend.hpp"
#include "common/grammar/mask_cache.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

/// For one trigger set and vocabulary: which tokens can complete a trigger. Built once per
/// (model, trigger set) by model_grammar; immutable.
class trigger_table {
public:
  trigger_table(std::vector<std::string> triggers, const grammar::vocabulary& v);

  const std::vector<std::string>& triggers() const noexcept { return triggers_; }
  /// The longest trigger's length.
  std::size_t longest() const noexcept { return longest_; }
  /// Tokens holding a whole trigger: they complete one after any text.
  std::span<const std::uint32_t> whole() const noexcept { return whole_; }
  /// Tokens starting with triggers()[t] minus its first `j` bytes (0 < j < its length): they
  /// complete it after text ending with its first j bytes.
  std::span<const std::uint32_t> completing(std::size_t t, std::size_t j) const noexcept {
    return partial_[t][j];
  }
  /// Where the first trigger occurrence in `text` starts, searching occurrences that start at
  /// or after `from`.
  std::optional<std::size_t> first_in(std::string_view text, std::size_t from) const;

private:
  std::vector<std::string> triggers_;
  std::size_t longest_ = 0;
  std::vector<std::uint32_t> whole_;
  std::vector<std::vector<std::vector<std::uint32_t>>> partial_; ///< [trigger][j]: token ids
};

/// What a constrained sequence starts from (built by the engine for each request).
struct constraint_setup {
  std::shared_ptr<const output_constraint> constraint;
  std::shared_ptr<const grammar::vocabulary> vocabulary;
  std::shared_ptr<grammar::mask_cache> masks;       ///< of the constraint's grammar
  std::shared_ptr<const trigger_table> triggers;    ///< null: the grammar holds from the start
};

/// The cost of the masks of one model (scheduler_stats::masks): how long they took and whether
/// the step they were computed during hid them.
struct mask_figures {
  static constexpr std::size_t buckets = 48; ///< bucket k: [2^(k/2), 2^((k+1)/2)) µs
  std::uint64_t during_step = 0; ///< computed while the device ran the step
  std::uint64_t at_sampling = 0; ///< computed when the logits were back (stale or missing)
  std::uint64_t hidden = 0;      ///< of during_step: done before the step's result was back
  double total_ms = 0;
  double max_ms = 0;
  std::array<std::uint32_t, buckets> histogram{};

  void observe(double us, bool during_a_step) noexcept;
  std::uint64_t count() const noexcept { return during_step + at_sampling; }
  /// The upper bound of the bucket holding quantile `q` (0..1), in µs; 0 when none observed.
  double quantile_us(double q) const noexcept;
};

class constrained_output {
public:
  explicit constrained_output(constraint_setup setup);

  /// The grammar holds for the next token (from the start, or since a trigger).
  bool active() const noexcept { return matcher_.has_value(); }

  /// Computes the next token's mask from the state after the last token.
  void prepare_mask();
  /// The mask is up to date with the state.
  bool mask_ready() const noexcept { return mask_version_ == version_; }
  /// The next token's mask (prepared now if stale): one bit per token id, empty when any
  /// token may follow.
  std::span<const std::uint64_t> mask();
  /// The mask allows no token: the grammar is stuck, or complete on a vocabulary without end
  /// tokens. Prepares a stale mask.
  bool stuck();

  /// The grammar holds and the text so far is a complete sentence of it.
  bool complete() const noexcept { return matcher_ && matcher_->can_end(); }

  /// `t` ends the sequence: an end token while the grammar holds (allowed only when complete).
  bool is_end(backends::token_id t) const noexcept;

  enum class outcome : std::uint8_t {
    more,     ///< go on
    complete, ///< the constrained text is complete and end_when_complete: end the sequence
    broken,   ///< the grammar rejects the token (it was sampled without its mask)
  };
  /// Appends the sampled token `t` (not an end token).
  outcome advance(backends::token_id t);

  /// Back to the state after the first `generated` generated tokens (engine::stop's trim).
  void rollback(std::size_t generated);

  std::size_t generated() const noexcept { return ends_.size(); }
  /// The generated text as bytes.
  std::string_view text() const noexcept { return text_; }
  /// Where the constrained text starts in text() (0 without triggers); meaningful when active.
  std::size_t constrained_from() const noexcept { return trigger_at_; }

private:
  void fill_free_mask();
  std::size_t scan_from(std::size_t before) const noexcept;

  constraint_setup setup_;
  std::optional<grammar::matcher> matcher_;
  std::optional<grammar::matcher> scratch_; ///< lazy: checks tokens that complete a trigger
  /// Lazy: the tokens holding a whole trigger that the grammar rejects (taken once).
  std::optional<std::vector<std::uint32_t>> whole_rejected_;
  std::string text_;                 ///< every generated byte
  std::vector<std::uint32_t> ends_;  ///< text_ length after each generated token
  std::size_t trigger_at_ = 0;       ///< text_ offset of the matcher's first byte
  std::size_t activated_after_ = 0;  ///< generated tokens when the trigger completed
  std::vector<std::uint64_t> bits_;
  bool masked_ = false;              ///< bits_ holds a mask (else: any token)
  bool stuck_ = false;
  std::uint64_t version_ = 1;        ///< bumped by every change of state
  std::uint64_t mask_version_ = 0;
};

} // namespace kvlane::actors
