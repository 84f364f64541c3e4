#pragma once

// kvlane::tools::bench — admin_status: the figures of the daemon's `status`
// admin reply (docs/admin.md) in the bench's own types.
//
// Problem it solves: the IPC driver measures a kvlaned child from outside;
// the scheduler's counters and gauges and the store's peaks come from its
// admin socket and must read exactly like the in-process engine's figures.
// JSON type errors stop here and become error values.
//
// Threading: plain functions.

#include "actors/scheduler.hpp"
#include "common/expected.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace kvlane::tools::bench {

/// The models[] entry named `model` of a `status` reply as scheduler statistics.
expected<actors::scheduler_stats, std::string> stats_from_status(const nlohmann::json& reply,
                                                                 const std::string& model);

struct store_peaks {
  std::uint64_t bytes = 0;
  std::uint64_t snapshots = 0;
};

/// The store's peaks (`store.peak_used_bytes`, `store.peak_snapshots`) if the reply has them.
std::optional<store_peaks> store_peaks_from_status(const nlohmann::json& reply);

} // namespace kvlane::tools::bench
