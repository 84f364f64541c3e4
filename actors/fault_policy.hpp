#pragma once

// kvlane::actors::fault_policy — what a scheduler does when a step fails.
//
// Problem it solves: a failed step says only that something in it failed. One
// bad row (a sequence whose input the device rejects) must not end the other
// rows of its step, and a device that keeps failing must be given time to
// recover rather than be hammered. So a failed step is first retried whole
// (`step_retries` times); if it keeps failing, its rows run one at a time
// (isolation), each retried alone as often. A row that fails alone while
// another row succeeds alone is the culprit: its sequence recomputes (`row_recomputes` times), then fails. If
// every row fails alone, the device is at fault: the policy backs off
// (exponential, `backoff_initial_ms` doubling up to `backoff_max_ms`), during
// which nothing runs and nothing is admitted, then probes with one step; a
// success ends the episode. A sequence in `give_up_steps` failed probes in a
// row ends (0: never). docs/scheduling.md, "Failures".
//
// Pure: no actor, no clock (the caller passes `now`). Memory: one entry per
// sequence that has failed, dropped by forget(). Threading: one thread.

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvlane::actors {

using seq_id = std::uint64_t;

/// The knobs of the fault policy ([scheduler.faults]; reloadable live).
struct fault_knobs {
  std::uint32_t step_retries = 1;        ///< whole-step retries before rows are isolated
  std::uint32_t row_recomputes = 1;      ///< recomputes of a failing row before its sequence fails
  std::uint32_t backoff_initial_ms = 50; ///< first wait once the device is failing
  std::uint32_t backoff_max_ms = 5000;   ///< the wait doubles up to this
  std::uint32_t give_up_steps = 12;      ///< failed probes in a row that end a sequence; 0 = never

  friend bool operator==(const fault_knobs&, const fault_knobs&) = default;
};

/// How the device behaves, as the scheduler sees it.
enum class device_health : std::uint8_t {
  healthy,  ///< the last step succeeded: admission is open
  degraded, ///< a step failed: retrying it or running its rows one at a time; admission paused
  failing,  ///< every row failed alone: backing off between probe steps; admission paused
};
std::string_view to_string(device_health h) noexcept;

/// A sequence to end, with how many times it failed.
struct failed_sequence {
  seq_id id = 0;
  std::uint32_t failures = 0;

  friend bool operator==(const failed_sequence&, const failed_sequence&) = default;
};

/// What the scheduler must do to sequences after a step's outcome.
struct fault_actions {
  /// Sequences whose row failed alone: drop their KV and prefill again.
  std::vector<seq_id> recompute;
  /// Sequences whose row failed alone more than `row_recomputes` times.
  std::vector<failed_sequence> fail_row;
  /// Sequences that were in `give_up_steps` failed steps in a row while the
  /// device was failing.
  std::vector<failed_sequence> fail_device;

  bool empty() const noexcept { return recompute.empty() && fail_row.empty() && fail_device.empty(); }
};

/// What the next step must be.
struct next_step {
  enum class kind : std::uint8_t {
    compose, ///< compose from every resident sequence, as usual
    retry,   ///< run exactly `rows` again (a retry of a failed step)
    isolate, ///< run `rows` (one sequence) alone
    wait,    ///< run nothing before `until` (backing off)
  };
  kind what = kind::compose;
  std::vector<seq_id> rows;
  std::chrono::steady_clock::time_point until{};
};

/// Counters for status and metrics.
struct fault_counters {
  std::uint64_t step_retries = 0;  ///< retries run (of a whole step or of a row alone)
  std::uint64_t isolated_rows = 0; ///< rows run alone to find a culprit
  std::uint64_t row_faults = 0;    ///< rows found failing alone (recomputed or failed)
  std::uint64_t backoffs = 0;      ///< waits started because the device was failing
};

class fault_policy {
public:
  using clock = std::chrono::steady_clock;

  explicit fault_policy(fault_knobs knobs = {}) : knobs_(knobs) {}

  /// New knobs apply from the next decision; an episode in progress goes on.
  void set_knobs(const fault_knobs& knobs) noexcept { knobs_ = knobs; }
  const fault_knobs& knobs() const noexcept { return knobs_; }

  device_health health() const noexcept { return health_; }
  /// New sequences may take slots (the device is healthy).
  bool admits() const noexcept { return health_ == device_health::healthy; }
  /// The current wait (0 unless failing).
  std::chrono::milliseconds backoff() const noexcept { return backoff_; }
  const fault_counters& counters() const noexcept { return counters_; }

  /// The step to run next, at `now`.
  next_step next(clock::time_point now) const;

  /// A step of `rows` (the sequences of its rows) failed at `now`.
  fault_actions step_failed(std::span<const seq_id> rows, clock::time_point now);
  /// A step of `rows` succeeded at `now`.
  fault_actions step_succeeded(std::span<const seq_id> rows, clock::time_point now);
  /// `id` ended or left its slot: it is retried, isolated and counted no more.
  /// May conclude an isolation round whose remaining rows are all gone.
  fault_actions forget(seq_id id, clock::time_point now);

private:
  enum class phase : std::uint8_t { normal, retrying, isolating, backing_off };

  struct row_record {
    std::uint32_t alone_failures = 0;  ///< times its row failed alone
    std::uint32_t probe_failures = 0;  ///< failed probe steps in a row it was in
  };

  void start_isolation_or_backoff(std::span<const seq_id> rows, clock::time_point now,
                                  fault_actions& out);
  /// Starts (first) or doubles the wait.
  void start_backoff(clock::time_point now, bool first);
  void count_probe_failure(std::span<const seq_id> rows, fault_actions& out);
  void conclude_isolation(clock::time_point now, fault_actions& out);
  void recover();

  fault_knobs knobs_;
  device_health health_ = device_health::healthy;
  phase phase_ = phase::normal;
  std::vector<seq_id> retry_rows_; ///< retrying: the failed step's rows
  std::uint32_t retries_ = 0;      ///< retrying: retries run so far
  std::vector<seq_id> pending_;    ///< isolating: rows still to run alone, next first
  std::uint32_t alone_retries_ = 0; ///< isolating: retries of the next row alone so far
  std::vector<seq_id> passed_;     ///< isolating: rows that succeeded alone
  std::vector<seq_id> failed_;     ///< isolating: rows that failed alone
  std::chrono::milliseconds backoff_{0};
  clock::time_point until_{};
  std::unordered_map<seq_id, row_record> records_;
  fault_counters counters_;
};

} // namespace kvlane::actors
