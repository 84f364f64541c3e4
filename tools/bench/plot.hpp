#pragma once

// kvlane::tools::bench — plot: PNG charts through gnuplot.
//
// Problem it solves: a benchmark's figures read best as curves (latency CDFs,
// throughput against preemption rate), and Debian's gnuplot draws them without
// any library in the build. The chart is described as panels of series; the
// data travel inside the script as datablocks, so the script written next to
// the PNG (OUT.gp) re-renders it alone. gnuplot is optional: when it is
// missing, render() says so and writes only the script.
//
// Threading: plain functions; render() runs gnuplot as a child process.

#include "common/expected.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvlane::tools::bench {

struct plot_series {
  std::string title;
  std::vector<std::pair<double, double>> points;
};

enum class plot_style : std::uint8_t { lines, linespoints, bars };

struct plot_panel {
  std::string title;
  std::string xlabel, ylabel;
  bool logx = false;
  plot_style style = plot_style::lines;
  std::vector<plot_series> series;
  std::vector<std::string> bar_labels; ///< bars: one label per x = 0, 1, ...
  std::string key = "top left"; ///< gnuplot key position
};

struct plot_page {
  std::string title;
  std::vector<plot_panel> panels; ///< laid out left to right, top to bottom
  int columns = 2;
  int width = 1400, height = 600; ///< pixels
};

/// The gnuplot script that draws `page` into `png_path`.
std::string gnuplot_script(const plot_page& page, const std::string& png_path);

/// The gnuplot executable on PATH, if any.
std::optional<std::string> find_gnuplot();

/// Writes the script to `png_path` with ".gp" in place of ".png" (or added),
/// then runs gnuplot on it. Errors say what failed (no gnuplot, its exit code).
expected<void, std::string> render(const plot_page& page, const std::string& png_path);

} // namespace kvlane::tools::bench
