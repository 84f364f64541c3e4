#pragma once

// kvlane::tools::bench — bench_runner: replays a workload against one mode.
//
// Problem it solves: comparing scheduling modes needs each mode to see the
// same requests at the same (scaled) times on a fresh serving core, and the
// figures to be read the same way for every mode. run_mode builds a fresh
// actor system and in-process engine for one mode, submits every request at
// its arrival time (simulated seconds / time_scale of wall time) from the
// calling thread, collects each stream's end and timings through a sink, and
// samples the snapshot store's occupancy (peak bytes and snapshots) and the
// scheduler's gauges on a helper thread. All times it returns are simulated
// milliseconds: wall milliseconds * time_scale.
//
// Threading: run_mode blocks the calling thread for the whole run; sinks run
// on actor threads and only record.

#include "tools/bench/trace.hpp"

#include "actors/messages.hpp"
#include "actors/scheduler.hpp"
#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "ipc/snapshot_store.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// What happened to one request. Times are simulated milliseconds.
struct request_outcome {
  std::uint32_t index = 0;
  bool interactive = false;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0; ///< requested
  double arrival_s = 0;            ///< planned, simulated seconds
  /// Simulated ms it was sent after its trace time because the previous turn
  /// of its conversation had not ended (causal turns, turn_gate); 0 if not held.
  double held_ms = 0;
  bool submitted = false;
  bool ended = false;
  actors::end_reason reason = actors::end_reason::error;
  std::string error; ///< submit error or end message
  std::uint32_t generated = 0;
  std::uint32_t preemptions = 0;
  double ttft_ms = std::numeric_limits<double>::quiet_NaN();
  double tpot_ms = std::numeric_limits<double>::quiet_NaN();
  double e2e_ms = std::numeric_limits<double>::quiet_NaN();
  double end_s = 0; ///< simulated seconds since the run started

  /// Ended normally (all its tokens, or a stop token).
  bool completed() const noexcept {
    return ended && (reason == actors::end_reason::length || reason == actors::end_reason::stop);
  }
};

/// The scheduler's gauges at one moment of a run (sampled every ~100 ms of wall time).
struct timeline_sample {
  double t_s = 0;              ///< simulated seconds since the run started
  std::uint32_t slots_busy = 0;
  std::uint32_t resident = 0;
  std::uint32_t queued = 0;    ///< no KV: new, or dropped to be recomputed
  std::uint32_t parked = 0;
  std::uint32_t without_slot_interactive = 0, without_slot_batch = 0; ///< queued or parked
  double npu_busy = 0;         ///< step busy fraction since the previous sample
  std::uint64_t tokens_generated = 0, preemptions = 0; ///< cumulative
};

/// Turns periodic scheduler statistics into timeline samples, the peak queue
/// and the mean of busy slots. Both the in-process and the IPC driver use it.
class gauge_recorder {
public:
  gauge_recorder(std::chrono::steady_clock::time_point start, double time_scale)
    : start_(start), last_(start), time_scale_(time_scale) {}

  /// Records the statistics read at `now` into `timeline` and `peak_without_slot`.
  void add(const actors::scheduler_stats& st, std::chrono::steady_clock::time_point now,
           std::vector<timeline_sample>& timeline, std::uint32_t& peak_without_slot);

  double mean_slots_busy() const noexcept {
    return samples_ ? slots_busy_sum_ / static_cast<double>(samples_) : 0;
  }

private:
  std::chrono::steady_clock::time_point start_, last_;
  double time_scale_;
  double last_busy_ms_ = 0;
  double slots_busy_sum_ = 0;
  std::uint64_t samples_ = 0;
};

struct run_options {
  daemon::config cfg;      ///< the mode is set by run_mode
  std::string model;       ///< empty = the first model
  /// The models requests go to, indexed by trace_request::model (the first
  /// one's gauges are sampled); empty = every request to `model`.
  std::vector<std::string> models;
  double time_scale = 1.0; ///< simulated ms per wall ms (the sim's time_scale; 1 on hardware)
  std::chrono::milliseconds timeout{0}; ///< wall bound on one run; 0 = 60 s + 4x the arrival span
  std::chrono::milliseconds sample_interval{5}; ///< store occupancy sampling (wall)
  std::function<void(std::string_view)> progress; ///< optional, one line at a time
};

/// One model's figures at the end of a run.
struct model_run {
  std::string name;
  actors::scheduler_stats stats;
  /// The store bytes the model held at its highest, sampled every
  /// run_options::sample_interval (the store keeps no per-model peak).
  std::uint64_t peak_store_bytes = 0;
  /// Its retained snapshots the store evicted (the store's count: exact even
  /// when the model never learns of an eviction).
  std::uint64_t retained_evictions = 0;
};

struct run_result {
  actors::scheduler_mode mode = actors::scheduler_mode::overlap;
  double time_scale = 1.0;
  std::vector<request_outcome> requests;
  actors::scheduler_stats stats; ///< the (first) model's scheduler at the end of the run
  std::vector<model_run> models;  ///< every model requests went to, in run_options order
  ipc::store_stats store;         ///< the store at the end of the run (host times, evictions)
  std::uint64_t peak_committed_bytes = 0; ///< store RAM at its highest, sampled
  double wall_ms = 0;            ///< run start (first arrival due) to the last end
  std::uint64_t peak_store_bytes = 0;
  std::uint64_t peak_snapshots = 0;
  bool store_peaks_known = true; ///< false: the path cannot observe the store's peaks (ipc)
  std::uint64_t retained_evictions = 0; ///< retained snapshots the store evicted (in process)
  double mean_slots_busy = 0;       ///< sampled every ~100 ms of wall time
  std::uint32_t peak_without_slot = 0; ///< sequences without a slot (queued or parked)
  double max_submit_lag_ms = 0;     ///< wall ms the driver submitted late, at worst
  std::vector<timeline_sample> timeline;
  bool timed_out = false;
  double modeled_step_busy_ms = 0; ///< sim only: what the steps run should have taken (simulated ms)
  bool serialized = false; ///< no transfer could run alongside a step (sync, or a device that cannot overlap)

  double sim_ms() const noexcept { return wall_ms * time_scale; }
};

/// One outcome per request, in order, with what the plan says of it (index,
/// class, token counts, arrival) and nothing happened yet.
std::vector<request_outcome> planned_outcomes(std::span<const trace_request> requests);

/// Runs `requests` (in arrival order) against a fresh engine in `mode`.
/// Fails only if the engine cannot be built, a model is unknown or a request
/// names a model index the options do not list; request failures are outcomes.
expected<run_result, std::string> run_mode(const run_options& opts, actors::scheduler_mode mode,
                                           std::span<const trace_request> requests);

/// The synthetic prompt of request `index`: `length` letter tokens, the same
/// for the same index; different indices share no prefix worth reusing.
std::vector<backends::token_id> synthetic_prompt(std::uint32_t index, std::uint32_t length);

/// The tokens request `index` sends: the first prompt_tokens of its own
/// prompt, or synthetic_prompt when it has none.
std::vector<backends::token_id> prompt_of(const trace_request& r, std::uint32_t index);

/// The requests of a run that were held for their previous turn (held_ms >
/// 0), and their mean wait in simulated ms (0 when none was).
struct held_turns_figures {
  std::size_t count = 0;
  double mean_ms = 0;
};
held_turns_figures held_turns_of(std::span<const request_outcome> outcomes);

/// After the driver stops: every request it never sent (the run's bound
/// passed while its previous turn had not ended) gets an error saying so.
void note_unsent(std::vector<request_outcome>& outcomes);

} // namespace kvlane::tools::bench
