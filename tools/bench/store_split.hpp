#pragma once

// kvlane::tools::bench — store_split: two models on one snapshot store (--store-split).
//
// Problem it solves: the claim that one elastic store shared by the models
// of a box beats a fixed partition needs the same requests run both ways on
// the same engine shape. This unit holds the pure parts of that comparison:
// which variant names what ([[model]] store_floor_bytes/store_cap_bytes),
// the engine configuration with the profile's model doubled (same backend
// table, so the same device: the two take turns on one simulated NPU as two
// models on one real NPU would; names `<model>-a`, `<model>-b`), and the
// deterministic assignment of
// whole conversations to the models in alternating bursts, so that one model
// is busy while the other is quiet.
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "daemon/config.hpp"
#include "tools/bench/trace.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// How the models share the store.
enum class store_split : std::uint8_t {
  shared,       ///< the elastic pool: no floor, no cap beyond the configuration's
  static_halves ///< each of n models has floor = cap = 1/n of the store
};

/// "shared" or "static".
std::string_view to_string(store_split s) noexcept;

/// Parses a comma list of shared and static; duplicates are dropped. Errors
/// name the unknown item.
expected<std::vector<store_split>, std::string> parse_store_split_list(std::string_view list);

/// The models of a split run.
inline constexpr std::uint32_t split_models = 2;

/// Name of model `index` (0, 1, ...) derived from `base`: base-a, base-b, ...
std::string split_model_name(std::string_view base, std::uint32_t index);

/// Each model's share of a store of `max_bytes` split statically among
/// `models`: max_bytes / models rounded down to `granularity` (the store's
/// allocation unit, a power of two), so that the floors always fit the limit.
std::uint64_t static_share_bytes(std::uint64_t max_bytes, std::uint32_t models,
                                 std::uint64_t granularity) noexcept;

/// `cfg` (whose first model is the one to double) with `split_models` copies
/// of that model (same backend table; names from split_model_name) sharing
/// the store: with `shared` each keeps the model's own store_floor_bytes and
/// store_cap_bytes; with `static_halves` each gets floor = cap =
/// static_share_bytes. Fails when the configuration has no model or the
/// derived names would not be valid model names.
expected<daemon::config, std::string> split_config(const daemon::config& cfg, store_split split);

/// The device both models of a split run on (backends::device_of of the
/// configuration's first model; "sim" for the profile), or "" without a model.
std::string split_device(const daemon::config& cfg);

/// The model of each request: a conversation goes, whole, to model
/// floor(t / burst_s) mod `models`, where t is the arrival (simulated
/// seconds) of its first request; the rest of its requests follow it whatever
/// their time. So the models take turns, burst_s at a time, to receive new
/// conversations. Deterministic: no draw. `burst_s` > 0, `models` >= 1.
std::vector<std::uint32_t> assign_in_bursts(std::span<const trace_request> requests,
                                            double burst_s, std::uint32_t models);

} // namespace kvlane::tools::bench
