#pragma once

// kvlane::actors::transfer_tracker — the dumps and loads of one model that are
// queued or running, by lane.
//
// Problem it solves: the slot planner and the warm-slot reclaim both need to
// know whether the lane that would run a dump has anything pending (a victim
// is taken only once it is idle), how much (a warm entry is dumped behind a
// backlog only when the wait costs less than the prefill the dump saves), and
// how many slots a dump under way will free soon (promised to the next
// sequence that finds none free). Transfers
// run on the transfer lane, or on the compute lane between steps when the
// mode serializes them (sync, or a backend that cannot overlap): the lane is
// fixed for the scheduler's life, so all of one model's transfers count on
// the same lane.
//
// Pure: counts in, counts out; no clock, no actor. Threading: one scheduler.

#include "actors/messages.hpp"

#include <cstdint>

namespace kvlane::actors {

/// Where a model's transfers run.
enum class transfer_lane : std::uint8_t { transfer, compute };

/// What is queued or running on the lane a dump would take: how many
/// transfers, and the snapshot bytes its dumps and its loads move (the cost
/// model turns them into the time a new dump waits behind them).
struct lane_backlog {
  std::uint32_t transfers = 0;
  std::uint64_t dump_bytes = 0;
  std::uint64_t load_bytes = 0;
};

class transfer_tracker {
public:
  /// `serialized`: transfers share the compute lane.
  explicit transfer_tracker(bool serialized = false) noexcept
    : lane_(serialized ? transfer_lane::compute : transfer_lane::transfer) {}

  /// The lane every transfer of this model goes to.
  transfer_lane lane() const noexcept { return lane_; }

  /// `job` was sent to lane().
  void started(const transfer_job& job) noexcept;
  /// The lane replied for `job`.
  void finished(const transfer_job& job) noexcept;

  /// Transfers queued or running on `lane`.
  std::uint32_t pending_on(transfer_lane lane) const noexcept {
    return lane == transfer_lane::compute ? on_compute_ : on_transfer_;
  }
  /// Transfers queued or running on the lane that would run a dump now.
  std::uint32_t pending() const noexcept { return pending_on(lane_); }
  /// What those transfers are (every transfer of this model is on lane()).
  lane_backlog backlog() const noexcept { return {pending(), dump_bytes_, load_bytes_}; }

  /// Slots whose dump is under way (a sequence's or a retained entry's): each
  /// frees when its dump ends.
  std::uint32_t promised_slots() const noexcept { return sequence_dumps_ + retained_dumps_; }
  std::uint32_t sequence_dumps() const noexcept { return sequence_dumps_; }
  std::uint32_t retained_dumps() const noexcept { return retained_dumps_; }
  std::uint32_t loads() const noexcept { return loads_; }

private:
  std::uint32_t& dumps_of(const transfer_job& job) noexcept {
    return job.retained != 0 ? retained_dumps_ : sequence_dumps_;
  }

  transfer_lane lane_;
  std::uint32_t on_transfer_ = 0, on_compute_ = 0;
  std::uint32_t sequence_dumps_ = 0, retained_dumps_ = 0, loads_ = 0;
  std::uint64_t dump_bytes_ = 0, load_bytes_ = 0;
};

} // namespace kvlane::actors
