#pragma once

// kvlane::tools::bench — report_json: a benchmark report as a JSON document.
//
// Problem it solves: the report is read by other tools and by people
// comparing runs, so its field names and their order are an interface
// (docs/benchmarks.md). Written through nlohmann::ordered_json (keys in the
// order documented there); figures go through tools/json_figure (rounded for
// reading; a non-finite one, such as a ratio without a baseline, is null).
//
// Threading: plain functions over values.

#include "tools/bench/report.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace kvlane::tools::bench {

/// The report as a JSON value (see docs/benchmarks.md for its fields).
nlohmann::ordered_json report_json(const bench_report& r);

/// report_json(r) indented by two spaces, with a final newline.
std::string to_json(const bench_report& r);

} // namespace kvlane::tools::bench
