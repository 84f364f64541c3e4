#pragma once

// kvlane::tools::bench — restart_variant: what happens half way through a
// restart benchmark run (--restart).
//
// Problem it solves: `--restart fdstore,disk,swap` names the events a
// conversation replay survives half way, each compared with the same replay
// without one (the baseline, always run first): one parse, one meaning,
// shared by the command line, the runs and the report.
//
// Threading: plain functions over values.

#include "common/expected.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

enum class restart_kind : std::uint8_t {
  none,     ///< the baseline: the pause half way, no event
  fd_store, ///< kvlaned restarts; the store comes back through the fd store
  disk,     ///< kvlaned restarts with nothing handed over; the disk tier has the KV
  swap      ///< two models, max_loaded = 1: a request to the other model swaps the driven one out
};

/// "baseline", "fdstore", "disk" or "swap".
std::string_view to_string(restart_kind k) noexcept;

/// Parses a comma list of fdstore, disk and swap (the baseline always runs);
/// duplicates are dropped. Errors name the unknown item.
expected<std::vector<restart_kind>, std::string> parse_restart_list(std::string_view list);

} // namespace kvlane::tools::bench
