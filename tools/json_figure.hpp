#pragma once

// kvlane::tools — json_figure: a measured figure as a JSON number.
//
// Problem it solves: the reports of kvlane-bench and `kvlane probe` are read
// by people comparing runs as much as by programs. A figure is rounded to 4
// decimals (6 significant digits below 1e-4 or from 1e15 up), so files stay
// readable and diffable, and a figure that is not finite (a ratio without a
// baseline, a fraction of nothing) becomes null: JSON has no NaN.
//
// Threading: a plain function.

#include <nlohmann/json.hpp>

namespace kvlane::tools {

/// `x` rounded as above, or null when it is not finite.
nlohmann::ordered_json json_figure(double x);

} // namespace kvlane::tools
