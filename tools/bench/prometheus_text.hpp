#pragma once

// kvlane::tools::bench — prometheus_text: reads one sample out of a Prometheus
// text exposition (the daemon's `metrics` admin reply and /metrics page).
//
// Problem it solves: some of the scheduler's counters (dumps and loads) are
// only exported as metrics; the IPC driver reads them back by name and labels,
// whatever the order the labels are written in, with escaped label values
// unescaped. Comment lines and lines that do not parse are skipped.
//
// Threading: plain functions.

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::tools::bench {

using metric_label = std::pair<std::string_view, std::string_view>;

/// The value of the first sample named `name` whose labels include every one
/// of `labels` (name and value); nullopt if there is none.
std::optional<double> find_sample(std::string_view text, std::string_view name,
                                  const std::vector<metric_label>& labels);

} // namespace kvlane::tools::bench
