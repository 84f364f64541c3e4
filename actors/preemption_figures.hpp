#pragma once

// kvlane::actors::preemption_figures — what the preemption rule is fed for one
// resident sequence: what evicting it costs and when it ends if left alone,
// from the cost model's step, dump and load figures and the model's finished
// output lengths (actors/output_lengths).
//
// A resident still prefilling has its remaining chunks ahead of it, then the
// output its peers' lengths predict; each of those is one step, and a step is
// costed with every slot holder in it, a prefill step also with its chunk's
// tokens (so a waiting prompt's start is its chunks, not one pass over its
// tokens). Until the cost model knows the step's
// figures (or the eviction's), the figures stay unknown and the rule leaves
// the choice to the rank order.
//
// Slack (goodput): how long a sequence may still wait for a slot, or stall in
// one, and meet its class's objective ([scheduler.slo]). Before its first
// token that is its TTFT less the time it has waited and its start (a
// resident's remaining prefill steps; a waiting one's prefill or load); after
// it, its TPOT times its expected token gaps, less the time since its first
// token and its expected remaining run. The same objective paces the steps:
// step_allowance_ms is how long each of a decoding sequence's next steps may
// take (actors/step_composer keeps batch prefill under it).
//
// Pure: no clock. Threading: a value built per plan.

#include "actors/cost_model.hpp"
#include "actors/output_lengths.hpp"
#include "actors/slo.hpp"
#include "actors/slot_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace kvlane::actors {

/// One live sequence as the figures need it.
struct resident_progress {
  std::uint32_t kv_len = 0;       ///< positions in its slot or snapshot
  std::size_t tokens = 0;         ///< prompt plus generated tokens so far
  std::uint32_t generated = 0;
  std::uint32_t max_tokens = 0;
  std::uint64_t snapshot_bytes = 0; ///< its snapshot's size if it were dumped now (or is)
  priority_class cls = priority_class::interactive;
  /// Since its first token; since it arrived while it has none.
  double elapsed_ms = 0;
  /// Its time to first token, once it has one.
  double ttft_ms = 0;
};

class preemption_figures {
public:
  /// `slo`: the objectives (null: none, slack stays unknown); `slot_holders`:
  /// the sequences one step would carry; `prefill_chunk`: the backend's
  /// largest prefill row; `dump_exposed`: a dump stalls compute.
  preemption_figures(const cost_model& costs, const output_lengths& outputs,
                     const slo_targets* slo, std::size_t slot_holders,
                     std::uint32_t prefill_chunk, bool dump_exposed);

  /// A resident: fills `c`'s eviction_ms (the way c.recompute_cheaper says it
  /// would go) and others_delay_ms (the eviction times the other slot holders
  /// where it stalls the steps: a recompute, or a swap whose dump is exposed),
  /// expected_end_ms / end_at_most_ms and slack_ms, where known.
  void fill(const resident_progress& s, slot_candidate& c) const;
  /// A waiting sequence (queued or parked, `parked` when its KV is in the
  /// store): fills `c`'s service_ms and slack_ms, where known.
  void fill_waiting(const resident_progress& s, bool parked, slot_candidate& c) const;

  /// A resident past its first token: the mean time each of its remaining
  /// steps may take for its mean TPOT over its whole output to meet its
  /// objective (its TPOT times its expected gaps, less the time since its
  /// first token, shared over the expected tokens left). Unknown without
  /// objectives, measured steps or a token left to come, and where its first
  /// token came after its TTFT objective (its objective is lost already).
  std::optional<double> step_allowance_ms(const resident_progress& s) const;

  /// One step with every slot holder, if the cost model has measured it.
  std::optional<double> step_ms() const noexcept { return step_ms_; }

private:
  /// Slack for a sequence whose first token (or next run) is `ahead_ms` away
  /// and that then has `left` tokens to go.
  double slack(const resident_progress& s, double ahead_ms, double left) const;
  /// Prefilling `tokens` in chunks: a step each, plus each chunk's tokens.
  double prefill_ms(std::size_t tokens) const;

  const cost_model& costs_;
  const output_lengths& outputs_;
  const slo_targets* slo_; ///< null: no objectives, every slack unknown
  std::optional<double> step_ms_;
  double per_token_ms_ = 0;
  std::uint32_t chunk_;
  std::size_t others_; ///< slot holders besides one victim
  bool dump_exposed_;
};

} // namespace kvlane::actors
