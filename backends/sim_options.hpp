#pragma once

// Options of the simulated NPU and their parser. Every number of its timing
// model is a config key ([model.sim] in kvlane.toml); defaults follow NPU.md
// (Llama-3.2-1B on ARIES, Batch16 build).

#include "backends/backend.hpp"
#include "common/config_reader.hpp"

#include <cstdint>

namespace kvlane::backends {

/// How a transfer (dump/load) and a step interact on the simulated device.
enum class transfer_overlap : std::uint8_t {
  full,   ///< independent: both run at full speed
  none,   ///< mutually exclusive: a transfer and a step never run at once
  shared, ///< both run, but each slows to half speed while the other is active
};

std::string_view to_string(transfer_overlap o) noexcept;

/// Makes some calls of one operation fail (for reliability tests).
struct fault_spec {
  std::uint64_t fail_nth = 0;  ///< fail exactly the Nth call (1-based); 0 = off
  double fail_rate = 0.0;      ///< fail this fraction of calls (seeded, deterministic)
  backend_errc code = backend_errc::device_failure;
  /// Throw std::runtime_error from exactly the Nth call (a driver bug rather
  /// than a reported error: the calling lane dies); 0 = off.
  std::uint64_t crash_nth = 0;
  /// Steps only: fail every step that carries this token in any of its rows
  /// (a request whose input the device rejects, wherever it runs); -1 = off.
  std::int64_t fail_token = -1;

  friend bool operator==(const fault_spec&, const fault_spec&) = default;
};

struct sim_options {
  std::uint32_t slots = 16;
  std::uint32_t max_context = 4096;
  std::uint32_t max_prefill_chunk = 128;
  std::uint64_t snapshot_bytes = 64ull << 20; ///< full-slot KV bytes (64 MiB)
  snapshot_extent extent = snapshot_extent::full_slot;
  bool snapshots = true;          ///< false models a device without per-slot dump/load

  double step_base_ms = 31.0;     ///< fixed cost of one step
  double step_per_token_ms = 1.7; ///< added per token carried by the step
  double dump_min_ms = 30.0;      ///< dump time is uniform in [min, max]
  double dump_max_ms = 60.0;
  double load_min_ms = 16.0;      ///< load time is uniform in [min, max]
  double load_max_ms = 18.0;
  double time_scale = 1.0;        ///< simulated ms per wall ms (100 = 100x faster)
  transfer_overlap overlap = transfer_overlap::full;

  std::uint64_t seed = 1;         ///< model weights stand-in and fault RNG
  double eos_rate = 0.0;          ///< probability-like bias for ending a sequence (0 = never)

  fault_spec step_faults;
  fault_spec dump_faults;
  fault_spec load_faults;

  friend bool operator==(const sim_options&, const sim_options&) = default;
};

/// Reads [model.sim] of one [[model]] table (`model`) into `out`, which holds
/// the defaults; absent keys keep them. Errors name the key and its line.
config_reader::status parse_sim_options(const config_reader::reporter& r,
                                        const config_reader::section& model, sim_options& out);

} // namespace kvlane::backends
