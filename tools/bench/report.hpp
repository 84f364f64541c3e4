#pragma once

// kvlane::tools::bench — report: the figures of a benchmark, and the table that prints them.
//
// Problem it solves: every mode's run must be read the same way (which
// requests count, which clock, which percentile), compared against the
// `free-transfer` bound and the `fcfs`/`sync` baselines measured in the same
// invocation, and checked against the project's targets — in one place, so
// the printed table, the JSON file (report_json) and the plot (report_plot)
// never disagree.
//
// All latencies are simulated milliseconds (wall ms * time_scale); rates are
// per simulated second. JSON field names are part of the interface
// (docs/benchmarks.md): throughput_tok_s, ttft_p50_ms, ttft_p99_ms,
// ttft_p99_interactive_ms, tpot_p50_ms, tpot_p99_ms, e2e_p99_ms, npu_busy,
// transfer_hidden, preemptions, swaps, recomputes, completed, failed, ...
//
// Threading: plain functions over values.

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/reuse_report.hpp"
#include "tools/bench/slo.hpp"
#include "tools/bench/split_report.hpp"
#include "tools/bench/transfer_host_time.hpp"

#include <map>
#include <utility>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// The figures of one mode's run.
struct mode_summary {
  std::string mode;
  std::size_t requests = 0, completed = 0, failed = 0;
  std::size_t interactive = 0;
  std::uint64_t output_tokens = 0;
  double makespan_s = 0; ///< run start to the last end
  double throughput_tok_s = 0, request_s = 0;
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double ttft_p99_interactive_ms = 0, ttft_p99_batch_ms = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0;
  double e2e_p50_ms = 0, e2e_p99_ms = 0;
  double goodput_req_s = 0;   ///< requests that met their class's SLO per simulated second
  double slo_attainment = 0;  ///< share of all requests that met their class's SLO
  std::size_t slo_met_interactive = 0, slo_met_batch = 0;
  double saturation_tok_s = 0; ///< output tokens/s while requests waited (NaN: never)
  double saturated_s = 0;      ///< simulated seconds that figure counts
  double npu_busy = 0;        ///< step_busy / wall of the run
  double transfer_s = 0;      ///< simulated seconds of dump + load
  /// Share of transfer time that did not lengthen a step or delay an
  /// admission (tools/bench/hidden_cost; NaN: no transfer or no model of the
  /// step time); 0 when transfers ran on the compute lane (serialized).
  double transfer_hidden = 0;
  /// The scheduler's own figure: the share of transfer time a step ran
  /// alongside (co-occurrence, not cost; see docs/benchmarks.md).
  double transfer_hidden_reported = 0;
  bool serialized = false;      ///< transfers ran on the compute lane
  double covered_ms = 0;        ///< simulated transfer ms a step ran alongside
  double step_busy_ms = 0;      ///< simulated ms of steps, as measured
  double modeled_step_ms = 0;   ///< sim: the same steps' modeled ms (0 elsewhere)
  std::uint64_t preemptions = 0, swaps = 0, recomputes = 0, dumps = 0, loads = 0;
  std::uint64_t steps = 0;
  double preemptions_per_s = 0;      ///< per simulated second
  double preemptions_per_slot_s = 0; ///< per slot per simulated second
  std::uint64_t peak_store_bytes = 0, peak_snapshots = 0;
  bool store_peaks_known = true; ///< false: unavailable on this path (ipc): "-" and null
  double mean_slots_busy = 0;
  std::uint32_t peak_without_slot = 0;
  std::uint32_t slots = 0;
  double max_submit_lag_ms = 0; ///< simulated ms the driver was late at worst
  /// Causal turns: requests sent after their trace time because the previous
  /// turn of their conversation had not ended, and their mean wait (simulated ms).
  std::size_t held_turns = 0;
  double held_ms_mean = 0;
  double step_stretch = 0;      ///< sim: measured step time / modeled (1 = faithful; NaN elsewhere)
  bool timed_out = false;
  /// --path both: this mode's output tokens/s via ipc / in process (on both summaries).
  std::optional<double> ipc_vs_inproc_throughput;
  std::vector<double> ttft_samples_ms; ///< completed requests, for CDF plots (not in JSON)
  std::vector<timeline_sample> timeline; ///< in JSON only with bench_report::include_timeline
};

mode_summary summarize(const run_result& r, const slo_set& slo = {});

/// Recomputes every mode's transfer_hidden with the host overhead measured in
/// the `free-transfer` run among `modes` (its step_stretch) taken out of step
/// lengthening; without a free-transfer run, none is taken out.
void apply_hidden_cost(std::vector<mode_summary>& modes);

/// `mode` against `baseline`: value / baseline value for each figure.
struct ratio_set {
  std::string name; ///< e.g. "overlap_vs_free_transfer"
  double throughput = 0;
  double ttft_p99 = 0;
  double ttft_p99_interactive = 0;
  double e2e_p99 = 0;
  double tpot_p99 = 0;
};

ratio_set ratio(const mode_summary& mode, const mode_summary& baseline);

/// Every mode against `free-transfer`, and `overlap` against `fcfs` and `sync`
/// (those whose modes ran).
std::vector<ratio_set> standard_ratios(const std::vector<mode_summary>& modes);

/// One target of the project, checked on a run.
struct target_check {
  std::string id;          ///< stable name, e.g. "overlap_throughput_vs_free_transfer"
  std::string description; ///< what it means, in words
  double value = 0;
  double threshold = 0;
  bool at_least = true;    ///< pass when value >= threshold (else value <= threshold)
  std::optional<bool> pass; ///< nullopt: not evaluated (a mode it needs did not run)
};

/// The comparison's targets (docs/benchmarks.md): no request failed or timed
/// out; overlap's interactive TTFT p99 <= 0.5x prio-fcfs's (what preemption
/// adds over ordering); with `transfers_overlap` (device overlap `full` or
/// `shared`) overlap's goodput >= every other mode's except free-transfer;
/// without, overlap's goodput >= 0.98x sync's (it must fall back). A failed or
/// timed-out request in any mode fails every target.
std::vector<target_check> comparison_targets(const std::vector<mode_summary>& modes,
                                             bool transfers_overlap);

/// --reuse (docs/benchmarks.md, "Conversations"): no request failed or timed
/// out; `store` reuses >= 0.8 x the achievable tokens and >= 2 x what `slot`
/// reuses; its reusable TTFT p50 <= 1/3 x `off`'s; its output tokens/s >=
/// `off`'s. A target whose policies did not run is not evaluated; a failed
/// request fails every target.
std::vector<target_check> reuse_targets(const std::vector<reuse_summary>& runs);

/// --store-split (docs/benchmarks.md, "Two models on one store"): no request
/// failed or timed out; with both splits run, the shared store reuses >= the
/// tokens static halves reuse (both models together) and its TTFT p50 of
/// requests with a reusable prefix is <= static's. A failed request fails
/// every target.
std::vector<target_check> split_targets(const std::vector<split_summary>& runs);

/// --path both: sets ipc_vs_inproc_throughput on every mode of `inproc` and
/// `ipc` that ran both ways, and returns one target per such mode: the IPC
/// path's output tokens/s within 3% of the in-process engine's.
std::vector<target_check> compare_paths(std::vector<mode_summary>& inproc,
                                        std::vector<mode_summary>& ipc);

/// --path both: per mode, tokens/s and TTFT p99 on each path and their ratios.
std::string format_path_comparison(const std::vector<mode_summary>& inproc,
                                   const std::vector<mode_summary>& ipc);

/// One point of the quantum sweep: a quantum and each mode's figures there.
struct quantum_point {
  std::uint32_t quantum_tokens = 0;
  std::vector<mode_summary> modes;
};

/// overlap >= 0.95 x free-transfer at every point; sync's ratio at the last point.
std::vector<target_check> sweep_targets(const std::vector<quantum_point>& points);

/// One point of the load sweep.
struct load_point {
  double load = 0;         ///< requested
  double offered_load = 0; ///< as measured on the scaled arrivals
  std::vector<mode_summary> modes;
};

/// The comparison under one device overlap assumption (--devices).
struct device_run {
  backends::transfer_overlap overlap = backends::transfer_overlap::full;
  /// Not measured on hardware: `full` until `kvlane probe` on a real box says otherwise.
  bool assumption = false;
  std::vector<mode_summary> modes;
  std::vector<target_check> targets;
};

/// A conversation trace's figures (Mooncake): what was kept and how it was scaled.
struct conversation_context {
  std::size_t conversations = 0;      ///< in the rows read
  std::size_t kept_conversations = 0;
  std::uint32_t block_tokens = 0;     ///< after --input-scale
  std::string users;                  ///< conversation or one
  double sample = 1.0;                ///< --sample-conversations
  std::size_t rows = 0;               ///< lines read
  std::string turns = "causal";       ///< --turns: causal or open
};

/// Everything a report holds besides the figures: where they came from.
struct report_context {
  std::string command_line;
  std::string path = "inproc"; ///< inproc, ipc or both
  std::string profile_source;   ///< "built-in bench profile" or the config path
  std::string profile_toml;     ///< the built-in profile's text (empty for a file)
  daemon::config cfg;           ///< as run (mode aside)
  std::string model;
  std::string scheduler_mode;   ///< --reuse: the one mode every policy ran in
  double burst_s = 0;           ///< --store-split: simulated seconds per model's turn
  std::string split_policy;     ///< --store-split: the reuse policy of every run
  double time_scale = 1.0;
  // workload
  std::string workload_source;  ///< "trace" or "synthetic"
  std::string trace_path;
  std::string trace_format;     ///< azure-csv or mooncake (empty when synthetic)
  double input_scale = 1.0;
  std::optional<conversation_context> conversations; ///< a Mooncake trace
  std::size_t requests = 0, clamped = 0, interactive = 0;
  /// Prompt tokens sent, and of those what an unlimited prefix cache in the
  /// same order could reuse (within each user's requests), and by how many requests.
  std::uint64_t prompt_tokens_total = 0, achievable_reused_tokens = 0;
  std::size_t reusable_requests = 0;
  double interactive_share = 0;
  std::uint64_t seed = 1;
  std::optional<double> load;   ///< requested load, when arrivals were scaled to one
  double rate_scale = 1.0;      ///< arrival rate multiplier applied to the source
  double offered_load = 0;
  double capacity_req_s = 0;
  double capacity_tok_s = 0;    ///< analytic bound: output tokens / work_s with every slot decoding
  slo_set slo;                  ///< the SLOs goodput is measured against
  bool slo_defaults = true;     ///< the defaults (docs/benchmarks.md), not --slo-* flags
  double work_s = 0;            ///< simulated NPU seconds the requests need at saturation
  double arrival_span_s = 0;
  double prompt_tokens_mean = 0, output_tokens_mean = 0;
  std::string synthetic_desc;   ///< synthetic workload parameters, if any
};

struct bench_report {
  report_context ctx;
  std::vector<mode_summary> modes;      ///< the path run; inproc with --path both
  std::vector<mode_summary> ipc_modes;  ///< --path both: the same modes via ipc
  std::vector<ratio_set> ratios;
  std::vector<target_check> targets;
  std::vector<device_run> devices;      ///< --devices: side by side, in the order given
  std::vector<load_point> load_sweep;
  std::vector<quantum_point> quantum_sweep;
  std::vector<reuse_summary> reuse;     ///< --reuse: one per policy, in the order given
  std::vector<split_summary> splits; ///< --store-split: one per split, in the order given
  /// --reuse and --store-split: host time per transfer of each run, by run name.
  std::vector<std::pair<std::string, transfer_host_time>> host_times;
  bool include_timeline = false; ///< write each mode's gauge timeline into the JSON
};

/// The human-readable report: one column per mode, ratios, targets.
std::string format_table(const std::vector<mode_summary>& modes,
                         const std::vector<ratio_set>& ratios,
                         const std::vector<target_check>& targets);

std::string format_targets(const std::vector<target_check>& targets);

/// The modes as the table and the chart show them: `modes`, and with --path
/// both each mode's ipc figures right after it (mode name + " ipc").
std::vector<mode_summary> report_columns(const bench_report& r);

/// What kvlane-bench prints on stdout: a header (requests, load, time scale,
/// path), then the table, ratios and targets, or the quantum sweep; the path
/// comparison and the load sweep when they ran.
std::string format_report(const bench_report& r);
std::string format_quantum_sweep(const std::vector<quantum_point>& points);
std::string format_load_sweep(const std::vector<load_point>& points);
/// --devices: per device, each mode's goodput, attainment, throughput and
/// latency tails, then that device's targets.
std::string format_devices(const std::vector<device_run>& devices);

} // namespace kvlane::tools::bench
