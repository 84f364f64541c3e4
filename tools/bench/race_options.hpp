#pragma once

// kvlane::tools::bench — race_options: the flags of the HTTP driver and of the llama-server race.
//
// Problem it solves: kvlane-bench drives servers over HTTP in two ways —
// `--path http` (one server already running at --url, the workload of the
// usual flags) and `--race-llama` (kvlaned and llama-server started in turn on
// one GGUF, raced on a fixed set of workloads) — and their flags (the server,
// the settings both servers share, the race's workloads and traces) must be
// parsed and checked with the same care as the rest, without crowding
// bench_options: parse_args hands them here, and the checks that involve other
// flags run once every flag is read.
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "tools/bench/completion_request.hpp"
#include "tools/bench/race_server_config.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

struct bench_options;

/// The race's workloads, in the order they run.
inline constexpr std::string_view race_workload_names[] = {"decode", "prefill", "azure", "mooncake"};

struct race_options {
  bool race_llama = false;          ///< --race-llama
  // --path http
  std::string url;                  ///< --url http://HOST:PORT
  server_kind server = server_kind::kvlane; ///< --server
  // both
  race_settings settings;           ///< --gguf, --threads, --parallel, --ctx-per-seq, ...
  bool threads_batch_given = false;
  std::string llama_server_path;    ///< --llama-server
  std::string kvlane_config;        ///< --kvlane-config: instead of the generated kvlane.toml
  /// --race-workloads: a subset of race_workload_names, run in that order.
  std::vector<std::string> workloads{std::begin(race_workload_names), std::end(race_workload_names)};
  /// --servers: which servers race, in the order each workload runs them;
  /// the first one's decode and prefill speeds set the arrival rate (--load).
  std::vector<server_kind> servers{server_kind::llama_server, server_kind::kvlane};
  std::string azure_trace = "../shared/traces/azure-llm-2023-conv.csv";
  std::string mooncake_trace = "../shared/traces/mooncake-conversation.jsonl";
  std::size_t azure_requests = 100;   ///< first rows of the Azure trace
  std::size_t mooncake_rows = 0;      ///< first rows of the Mooncake trace, before sampling; 0 = all
  double mooncake_sample = 0.01;      ///< share of its conversations kept
  std::uint32_t decode_tokens = 256;  ///< decode workload: output tokens per request
  std::uint32_t decode_prompt = 32;   ///< decode workload: prompt tokens
  std::uint32_t repeats = 8;          ///< decode and prefill workloads: requests, one at a time
  std::uint32_t trace_rounds = 2;     ///< trace workloads: whole runs per server, pooled
  double output_scale = 0.25;         ///< trace workloads: output lengths x this (at least 1)
  bool output_scale_given = false;
  double default_load = 1.0;          ///< --load of the race when none is given
};

/// What parse_race_flag did with args[i].
enum class race_flag : std::uint8_t { not_mine, taken };

/// Parses args[i] (and its value, advancing i) if it is a flag of this file.
expected<race_flag, std::string> parse_race_flag(std::span<const std::string_view> args,
                                                 std::size_t& i, race_options& o);

/// The checks once every flag is read, for --path http and --race-llama
/// (no-op otherwise, except refusing their flags without them).
expected<void, std::string> check_race_options(bench_options& o);

/// The usage text of these flags.
std::string_view race_usage() noexcept;

} // namespace kvlane::tools::bench
