#pragma once

// kvlane::tools::probe — measures what a backend's device really does.
//
// For one backend it measures step time against rows and tokens (and fits
// base + per-token cost), dump and load time and bandwidth of one snapshot,
// and whether a transfer on one slot overlaps steps on the others: the same
// work is run serially, then concurrently from two threads (compute lane,
// transfer lane), and overlap = (serial - concurrent) / min(step work,
// transfer work), clamped to 0..1 — 1 means fully hidden, 0 means serialized.
//
// With verify it also checks correctness (run_verify): greedy decoding of a fixed prompt is
// repeatable; a dump -> overwrite -> load round trip continues identically; work on other
// slots leaves a slot untouched; and, when the backend claims that transfers overlap
// compute, a sequence decoded while another slot is dumped and loaded equals a serial run.
// That last check is what decides whether qbruntime's `concurrency = "allow"` is safe.
//
// The probe owns the backend while it runs: it overwrites every slot. Run it
// with the daemon stopped. Times are reported in device milliseconds: wall
// time multiplied by `clock_scale` (the sim's time_scale; 1 on hardware).

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools {

struct probe_options {
  std::uint32_t iterations = 5;     ///< repetitions per measurement (>= 1)
  std::uint32_t snapshot_tokens = 0; ///< tokens in the probed slot; 0 = max_context / 2
  double clock_scale = 1.0;         ///< device ms per wall ms
  bool verify = false;              ///< also run run_verify (first, on a fresh device)
  std::uint32_t verify_tokens = 32; ///< greedy tokens each verify check compares
};

struct step_sample {
  std::uint32_t rows = 0;
  std::uint32_t tokens_per_row = 0;
  double ms = 0; ///< mean device ms per step
};

/// One correctness check of run_verify.
struct verify_check {
  enum class outcome : std::uint8_t { passed, failed, skipped };
  std::string name;   ///< "repeatable", "round_trip", "isolation", "concurrent"
  outcome result = outcome::skipped;
  std::string detail; ///< why it failed or was skipped, or what it compared
};

std::string_view to_string(verify_check::outcome o) noexcept;

struct verify_report {
  std::vector<backends::token_id> prompt;
  std::vector<backends::token_id> greedy; ///< the reference continuation
  std::vector<verify_check> checks;
  bool passed() const noexcept; ///< no check failed
};

/// Runs the correctness checks on `b` (all slots are overwritten). `tokens` is the length
/// of the greedy continuation compared by each check. Errors of the backend are errors.
expected<verify_report, backends::backend_error> run_verify(backends::backend& b,
                                                            std::uint32_t tokens = 32);

struct probe_report {
  backends::backend_info info;
  double clock_scale = 1.0;
  std::vector<step_sample> steps;
  double step_base_ms = 0;      ///< least-squares fit: ms = base + per_token * tokens
  double step_per_token_ms = 0;
  std::uint32_t snapshot_tokens = 0;
  std::uint64_t snapshot_bytes = 0;
  double dump_ms = 0, load_ms = 0;           ///< mean device ms per call
  double dump_gib_s = 0, load_gib_s = 0;     ///< bandwidth in device time
  bool overlap_measured = false;             ///< false with a single slot
  double step_work_ms = 0, transfer_work_ms = 0; ///< serial parts
  double serial_ms = 0, concurrent_ms = 0;
  double overlap = 0;                        ///< 0..1
  std::optional<verify_report> verify;       ///< with --verify
};

using probe_progress = std::function<void(std::string_view)>;

expected<probe_report, backends::backend_error> run_probe(backends::backend& b,
                                                          const probe_options& opts,
                                                          const probe_progress& progress = {});

/// Human-readable report (several lines).
std::string format_text(const probe_report& r);

/// The same figures as one JSON object on one line; a figure that is not
/// finite is null (tools/json_figure).
std::string format_json(const probe_report& r);

} // namespace kvlane::tools
