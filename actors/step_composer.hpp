#pragma once

// kvlane::actors::compose_step — the rows of the next step: resident
// sequences in, rows out.
//
// Every resident sequence that is not already in a step contributes one row:
// its next decode token, or its next prefill chunk (at most
// `max_prefill_chunk` tokens). Decode rows always run, in sequence id order;
// prefill chunks follow in (class, level, turn) order and fill the step up to
// `max_step_tokens` tokens (0: no limit), the last one cut to what is left.
// Decode rows count against the budget too, so a step full of decodes takes
// no prefill. With `batch_prefill_yields`, batch prefill chunks stay out of a
// step that carries an interactive one: the step stays short, and the
// interactive request reaches its first token in fewer, shorter steps.
//
// Paced by the TPOT objectives: a decoding sequence may carry the mean time
// each of its remaining steps may take and still meet its TPOT objective
// (its step allowance, actors/preemption_figures). Given the step's cost
// figures, batch prefill fills a step only up to the tokens the smallest
// allowance pays for, a tenth under it, so a step full of batch prefill does
// not make an interactive request miss its TPOT. An allowance the step's
// decode rows alone exceed is not held to (that sequence misses whatever the
// prefill does), and interactive prefill chunks are not held to any: they
// carry their own first token's objective.
//
// Pure: no clock, no actor. Threading: call from one thread.

#include "actors/mlfq_policy.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace kvlane::actors {

/// A resident sequence that may run in the next step.
struct step_candidate {
  seq_id id = 0;
  const mlfq_position* position = nullptr; ///< orders the prefill chunks
  std::uint32_t kv_len = 0;  ///< positions already in its slot
  std::uint32_t length = 0;  ///< tokens known: prompt plus generated
  /// A decoding sequence's step allowance (ms); infinite: none.
  double step_allowance_ms = std::numeric_limits<double>::infinity();

  /// Its row would be a decode token (every known token but the last is in its slot).
  bool decodes() const noexcept { return kv_len + 1 == length; }
};

/// A step's modeled cost: base plus a cost per token (actors/cost_model).
struct step_cost {
  double base_ms = 0;
  double per_token_ms = 0;
};

/// One row of the step: `tokens` tokens of the sequence from its kv_len on.
struct step_row_plan {
  seq_id id = 0;
  std::uint32_t tokens = 0;
  bool prefill = false;

  bool operator==(const step_row_plan&) const = default;
};

struct step_limits {
  std::uint32_t max_step_tokens = 0;   ///< 0: no limit
  std::uint32_t max_prefill_chunk = 1; ///< the backend's largest prefill row
  bool batch_prefill_yields = false;   ///< no batch prefill beside an interactive one
  /// The step's cost figures; unknown: allowances do not limit the step.
  std::optional<step_cost> cost;
};

/// The rows of the next step, decode rows first; empty if nothing can run.
std::vector<step_row_plan> compose_step(std::span<const step_candidate> candidates,
                                        step_limits limits);

} // namespace kvlane::actors
