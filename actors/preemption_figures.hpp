#pragma once

// kvlane::actors::preemption_figures — what the preemption rule is fed for one
// resident sequence: what evicting it costs and when it ends if left alone,
// from the cost model's step, dump and load figures and the model's finished
// output lengths (actors/output_lengths).
//
// A resident still prefilling has its remaining chunks ahead of it, then the
// output its peers' lengths predict; each of those is one step, and a step is
// costed with every slot holder in it. Until the cost model knows the step's
// figures (or the eviction's), the figures stay unknown and the rule leaves
// the choice to the rank order.
//
// Pure: no clock. Threading: a value built per plan.

#include "actors/cost_model.hpp"
#include "actors/output_lengths.hpp"
#include "actors/slot_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace kvlane::actors {

/// One resident sequence as the figures need it.
struct resident_progress {
  std::uint32_t kv_len = 0;       ///< positions in its slot
  std::size_t tokens = 0;         ///< prompt plus generated tokens so far
  std::uint32_t generated = 0;
  std::uint32_t max_tokens = 0;
  std::uint64_t snapshot_bytes = 0; ///< its snapshot's size if it were dumped now
};

class preemption_figures {
public:
  /// `slot_holders`: the sequences one step would carry; `prefill_chunk`: the
  /// backend's largest prefill row; `dump_exposed`: a dump stalls compute.
  preemption_figures(const cost_model& costs, const output_lengths& outputs,
                     std::size_t slot_holders, std::uint32_t prefill_chunk, bool dump_exposed);

  /// Fills `c`'s eviction_ms (the way c.recompute_cheaper says it would go)
  /// and expected_end_ms / end_at_most_ms, where known.
  void fill(const resident_progress& s, slot_candidate& c) const;

private:
  const cost_model& costs_;
  const output_lengths& outputs_;
  std::optional<double> step_ms_;
  std::uint32_t chunk_;
  bool dump_exposed_;
};

} // namespace kvlane::actors
