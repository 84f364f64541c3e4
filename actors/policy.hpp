#pragma once

// kvlane::actors::scheduler_policy — the knobs of one model's scheduler.
//
// Problem it solves: the scheduling policy is the scheduler's concept, not the
// daemon's. The daemon's config ([scheduler] in kvlane.toml) maps onto this
// type; tools and tests build it directly. docs/scheduling.md explains each
// knob, docs/config.md their ranges.

#include "actors/cost_model.hpp"
#include "actors/fault_policy.hpp"
#include "actors/slo.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvlane::actors {

/// How a scheduler shares its model's slots.
/// Each is a mode of the same engine on the same requests (docs/scheduling.md).
enum class scheduler_mode : std::uint8_t {
  fcfs,          ///< arrival order, no preemption (llama.cpp server, Ollama)
  prio_fcfs,     ///< priority class, then arrival; no preemption
  recompute,     ///< priority class, then arrival; a waiting request preempts the
                 ///< lowest-ranked running one by dropping its KV (vLLM); no quanta
  sync,          ///< MLFQ preemption with transfers on the compute lane, between steps
  overlap,       ///< MLFQ preemption with transfers on the transfer lane, while steps run
  free_transfer, ///< as overlap, with transfers that cost no device time (a reference)
};
/// The mode's name in config and on the command line ("prio-fcfs", "free-transfer").
std::string_view to_string(scheduler_mode m) noexcept;
/// Parses a mode's name; "ideal" is accepted as the former name of
/// "free-transfer".
std::optional<scheduler_mode> parse_scheduler_mode(std::string_view name) noexcept;
/// Every mode, in the order above.
inline constexpr scheduler_mode all_scheduler_modes[] = {
  scheduler_mode::fcfs,    scheduler_mode::prio_fcfs, scheduler_mode::recompute,
  scheduler_mode::sync,    scheduler_mode::overlap,   scheduler_mode::free_transfer,
};

/// The order in which a mode ranks sequences for slots.
enum class rank_order : std::uint8_t {
  arrival,  ///< earliest arrival first
  priority, ///< priority class, then arrival
  mlfq,     ///< priority class, MLFQ level, turn (docs/scheduling.md)
};

/// What a mode decides, apart from where its transfers run.
struct mode_rules {
  rank_order order = rank_order::mlfq;
  bool preempts = true;        ///< a waiting higher-ranked sequence may take a resident's slot
  bool swaps = true;           ///< an evicted sequence may be swapped (else always recomputed)
  bool keeps_spare = true;     ///< keeps `spare_slots` free for new interactive requests
  bool free_transfers = false; ///< transfers cost no device time (sim only)

  friend bool operator==(const mode_rules&, const mode_rules&) = default;
};
mode_rules rules_of(scheduler_mode mode) noexcept;

/// Where a scheduler runs its transfers, from its mode and what its backend
/// can do.
struct transfer_placement {
  /// Transfers run on the compute lane, between steps: `sync`, or `overlap` on
  /// a backend whose transfers cannot overlap compute.
  bool on_compute_lane = false;
  /// `overlap` on such a backend: serialized as above.
  bool fallback = false;
  /// 4x longer quanta below level 0 (fewer, larger switches): whenever an
  /// MLFQ mode serializes its transfers, so `sync` and overlap's fallback
  /// follow the same quantum rule and differ from `overlap` only in where
  /// transfers run.
  bool long_quanta = false;

  friend bool operator==(const transfer_placement&, const transfer_placement&) = default;
};
transfer_placement place_transfers(scheduler_mode mode, bool backend_overlaps) noexcept;

struct scheduler_policy {
  scheduler_mode mode = scheduler_mode::overlap;
  /// Steps a sequence runs at level 0 before it drops a level. A step counts
  /// once whatever it carried for the sequence (a 128-token prefill chunk or
  /// one decode token).
  std::uint32_t quantum_steps = 64;
  std::uint32_t levels = 4;            ///< MLFQ levels; level i's quantum is quantum_steps * 2^i
  std::uint32_t spare_slots = 0;       ///< slots kept free for new interactive requests
  std::uint32_t max_step_tokens = 512; ///< tokens per step (decodes always run; prefill fills up)
  /// Batch prefill chunks stay out of a step that carries an interactive
  /// prefill chunk (shorter steps until the interactive first token).
  bool batch_prefill_yields = true;
  std::uint32_t aging_steps = 2048;    ///< steps waited before a sequence returns to level 0; 0 = never
  double ewma_alpha = 0.2;             ///< weight of a new sample in the cost model
  /// Cost figures to decide swap vs recompute with instead of measured ones
  /// (not a config key: for tests and benchmarks that need decisions free of
  /// host timing noise). nullopt = measure.
  std::optional<cost_figures> fixed_costs;
  fault_knobs faults;                  ///< what a failed step leads to (actors/fault_policy)
  /// The latency objectives per class ([scheduler.slo]): a preemption must save one
  /// (actors/preemption_rule).
  slo_targets slo;
  /// [scheduler.slo] refuse_over: a request predicted to get a slot later than this many
  /// times its class's TTFT objective is refused at the door (actors/door_forecast); 0: never.
  double refuse_over = 0;
  /// Not a config key: false leaves preemption to cost alone, as if no objective were known
  /// (tests that need every eviction that pays its cost, whatever the timing).
  bool slo_gates_preemption = true;

  friend bool operator==(const scheduler_policy&, const scheduler_policy&) = default;
};

} // namespace kvlane::actors
