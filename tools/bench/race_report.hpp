#pragma once

// kvlane::tools::bench — race_report: a race's figures side by side, as text and JSON.
//
// Problem it solves: the race's reader wants, per workload, kvlane's figure
// next to llama-server's (throughput, first-token latencies of all requests,
// of later conversation turns and of interactive requests, prompt tokens
// prefilled and reused, completed and failed requests with the failure
// messages grouped), then each target with its ratio and PASS or MISS; a
// program wants the same in a stable JSON shape (bench-results/llama.json):
// {"command", "machine", "model", "settings", "workloads": {"<name>":
// {"kvlane": {...}, "llama-server": {...}}}, "targets": [...]}, every side
// with exactly output_tok_s, ttft_p50_ms, ttft_p99_ms, ttft_p50_reusable_ms,
// ttft_p99_interactive_ms, prefill_tokens, reused_tokens, completed, failed
// and failures. A figure without samples prints "-" and is null in JSON.
//
// Threading: plain functions over values.

#include "tools/bench/race_server_config.hpp"
#include "tools/bench/race_summary.hpp"
#include "tools/bench/race_workloads.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

struct race_machine {
  unsigned cores = 0;
  std::string cpu;               ///< /proc/cpuinfo's model name
  std::uint64_t memory_bytes = 0; ///< /proc/meminfo's MemTotal
};

/// The machine this runs on.
race_machine this_machine();

struct race_model_info {
  std::string gguf;
  std::string name;                   ///< as both servers were asked for it
  std::optional<std::uint64_t> params; ///< llama-server's /v1/models meta.n_params
  std::optional<std::uint64_t> size_bytes; ///< the file's size
};

struct race_workload_result {
  std::string name;
  std::string description;
  std::size_t requests = 0;
  double offered_load = 0;   ///< against the calibrated capacity (0: not scaled to one)
  double arrival_scale = 1;  ///< trace seconds x this = wall seconds
  std::optional<side_summary> kvlane, llama;
};

struct race_report {
  std::string command;
  race_machine machine;
  race_model_info model;
  race_settings settings;
  bool race = true;           ///< false: --path http (one server, `single`)
  server_kind single = server_kind::kvlane;
  std::string url;            ///< --path http
  std::optional<double> load, rate_scale;
  std::optional<race_calibration> calibration;
  std::vector<race_workload_result> workloads;
  std::vector<race_target> targets;
  std::vector<std::string> notes; ///< printed after the tables
};

/// The printed report: one table per workload, then the targets.
std::string format_race_report(const race_report& r);

/// The JSON document (see above), indented.
std::string race_report_json(const race_report& r);

} // namespace kvlane::tools::bench
