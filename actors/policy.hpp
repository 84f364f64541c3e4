#pragma once

// kvlane::actors::scheduler_policy — the knobs of one model's scheduler.
//
// Problem it solves: the scheduling policy is the scheduler's concept, not the
// daemon's. The daemon's config ([scheduler] in kvlane.toml) maps onto this
// type; tools and tests build it directly. docs/scheduling.md explains each
// knob, docs/config.md their ranges.

#include <cstdint>
#include <string_view>

namespace kvlane::actors {

/// How a scheduler shares its model's slots.
enum class scheduler_mode : std::uint8_t {
  fcfs,    ///< arrival order, no preemption
  sync,    ///< preemption with transfers on the compute lane, between steps
  overlap, ///< preemption with transfers on the transfer lane, while steps run
  ideal,   ///< as overlap, with transfers that cost no device time (a reference)
};
std::string_view to_string(scheduler_mode m) noexcept;

/// Where a scheduler runs its transfers, from its mode and what its backend
/// can do.
struct transfer_placement {
  /// Transfers run on the compute lane, between steps: `sync`, or `overlap` on
  /// a backend whose transfers cannot overlap compute.
  bool on_compute_lane = false;
  /// `overlap` on such a backend: serialized as above, with 4x longer quanta
  /// below level 0 (fewer, larger switches).
  bool fallback = false;

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
  std::uint32_t spare_slots = 1;       ///< slots kept free for new interactive requests
  std::uint32_t max_step_tokens = 512; ///< tokens per step (decodes always run; prefill fills up)
  std::uint32_t aging_steps = 2048;    ///< steps waited before a sequence returns to level 0; 0 = never
  double ewma_alpha = 0.2;             ///< weight of a new sample in the cost model

  friend bool operator==(const scheduler_policy&, const scheduler_policy&) = default;
};

} // namespace kvlane::actors
