#pragma once

// kvlane::tools::bench — transfer_host_time: what a dump or a load cost the host.
//
// Problem it solves: the sim models a transfer's device time and performs
// the host work for real — the copy of the slot's bytes (inside the modeled
// window: the call sleeps only the remainder), and around it on the transfer
// lane the store's commit of cold pages and seal (checksum) for a dump, its
// verify for a load. The lane's measured time per transfer against the
// modeled one says how much host work did not fit in the device's time; the
// store's own phase counters say where it went. With real-size snapshots
// (64 MiB) this is the retained-KV path measured with real bytes.
//
// Every time here is wall milliseconds (not scaled by time_scale): host work
// does not shrink with the sim's clock. The modeled time is the sim's
// expected draw, (min + max) / 2 / time_scale, so it is exact only on
// average, and known only for full-slot snapshots (with `snapshot = "used"`
// the modeled time depends on each sequence's length: NaN).
//
// Threading: plain functions over values.

#include "actors/scheduler.hpp"
#include "backends/sim_options.hpp"
#include "ipc/snapshot_store.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace kvlane::tools::bench {

struct transfer_host_time {
  std::uint64_t snapshot_bytes = 0;
  std::uint64_t dumps = 0, loads = 0;
  double dump_ms = 0, load_ms = 0;                 ///< measured per dump / load, lane time
  double dump_modeled_ms = 0, load_modeled_ms = 0; ///< the sim's expected time per dump / load
  double transfer_ms = 0, transfer_modeled_ms = 0; ///< per transfer, both kinds together
  double beyond_model_ms = 0; ///< transfer_ms - transfer_modeled_ms: host work outside the window
  /// The store's phases, per dump (commit: cold page faults; seal: checksum),
  /// per load (verify: checksum) and per transfer (punch: returning pages).
  double commit_ms = 0, seal_ms = 0, verify_ms = 0, punch_ms = 0;
  std::uint64_t committed_on_demand_bytes = 0; ///< cold bytes commit() faulted in
  std::uint64_t punched_bytes = 0;             ///< bytes returned to the OS
  std::uint64_t pool_target_bytes = 0;         ///< [store] warm_pool_bytes as applied
  std::uint64_t peak_used_bytes = 0;           ///< store bytes reserved at the highest
  std::uint64_t peak_committed_bytes = 0;      ///< store RAM at the highest (sampled)
};

/// Reads the summed scheduler statistics of the run's models (`st`: dumps,
/// loads, dump_ms_total and load_ms_total, which are wall ms), the sim's
/// options and the store's statistics at the end of the run.
transfer_host_time measure_transfer_host_time(const actors::scheduler_stats& st,
                                              const backends::sim_options& sim,
                                              const ipc::store_stats& store,
                                              std::uint64_t peak_committed_bytes);

/// The table: one column per named run.
std::string format_transfer_host_time(
  std::span<const std::pair<std::string, transfer_host_time>> runs);

} // namespace kvlane::tools::bench
