#pragma once

// kvlane::tools::bench — race_workloads: the requests of a race, and their arrival rate.
//
// Problem it solves: a race must give both servers identical work that says
// something about each side of serving: how fast one stream decodes (a short
// prompt, many output tokens) and prefills (a prompt near the slot's context,
// one output token) — each a few requests sent one after another — and how a
// server copes with real traffic: the Azure conversation trace (independent
// prompts) and a Mooncake sample (conversations whose turns resend their
// history, more of them live than there are slots, each turn sent only once
// the previous one ended). Trace prompts are scaled to the context per slot
// (Azure by ctx/4096, Mooncake by ctx/32768: its 512-token blocks become
// ctx/64-token ones) unless --input-scale says otherwise, outputs by
// --output-scale, and clamped so that prompt + output fit a slot.
//
// Arrival times are trace seconds; a trace's arrivals are then scaled to an
// offered load measured against a capacity the first server's own speeds
// imply (race_calibration: its decode and prefill tokens per second give the
// per-step and per-token costs of workload.hpp's work model), or by
// --rate-scale. Both servers get the same arrivals.
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "tools/bench/bench_options.hpp"
#include "tools/bench/trace.hpp"
#include "tools/bench/workload.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

struct race_workload {
  std::string name;         ///< decode, prefill, azure, mooncake (or "workload" for --path http)
  std::string description;  ///< one line: what is sent
  std::vector<trace_request> requests; ///< in arrival order, arrivals in trace seconds
  bool trace = false;       ///< arrivals come from a trace: scaled to the load
  std::size_t clamped = 0;
  std::size_t interactive = 0;
  std::size_t conversations = 0; ///< Mooncake: kept conversations
  double arrival_scale = 1.0;    ///< the factor applied to the arrivals (set by scale_race_arrivals)
  double offered_load = 0;       ///< against the calibrated capacity; 0 when not scaled to one
};

/// Tokens kept free in a slot beyond prompt + output (a BOS token, and the
/// few tokens a tokenizer may disagree on).
inline constexpr std::uint32_t race_context_margin = 16;

/// The input scale of a trace for `ctx_per_seq` tokens per slot when none is given.
double auto_input_scale(bool mooncake, std::uint32_t ctx_per_seq) noexcept;

/// Builds the workload called `name` (race_workload_names) from the race
/// options of `o` (traces, counts, scales, interactive share, seed, turns).
expected<race_workload, bench_failure> build_race_workload(const bench_options& o,
                                                           std::string_view name);

/// The workload of the usual flags (--trace or --synthetic) for --path http:
/// prompts scaled by --input-scale, clamped to --ctx-per-seq, arrivals
/// multiplied by 1 / --rate-scale.
expected<race_workload, bench_failure> build_flag_workload(const bench_options& o);

/// The capacity figures of a server from its single-stream speeds.
struct race_calibration {
  double decode_tok_s = 0;  ///< one stream's decode rate
  double prefill_tok_s = 0; ///< one stream's prefill rate
  std::string server;       ///< which server they were measured on
};

/// The work model of a server with these speeds: a step costs
/// 1000/decode - 1000/prefill ms plus 1000/prefill ms per token, `slots`
/// sequences decode per step, at most `batch` tokens per step.
work_model calibrated_work_model(const race_calibration& c, std::uint32_t slots,
                                 std::uint32_t batch);

/// Scales a trace workload's arrivals: to `load` against the calibrated
/// capacity, or by 1 / `rate_scale`. Sets arrival_scale and offered_load.
void scale_race_arrivals(race_workload& w, const std::optional<race_calibration>& c,
                         std::optional<double> load, std::optional<double> rate_scale,
                         std::uint32_t slots, std::uint32_t batch);

} // namespace kvlane::tools::bench
