#include "tools/bench/plot.hpp"

#include "common/child_process.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace kvlane::tools::bench {

namespace {

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string script_path_for(const std::string& png) {
  if (png.size() > 4 && png.compare(png.size() - 4, 4, ".png") == 0)
    return png.substr(0, png.size() - 4) + ".gp";
  return png + ".gp";
}

} // namespace

std::string gnuplot_script(const plot_page& page, const std::string& png_path) {
  std::string s = "# Written by kvlane-bench; run `gnuplot THIS_FILE` to redraw the PNG.\n";
  // Data first, as datablocks.
  for (std::size_t p = 0; p < page.panels.size(); ++p)
    for (std::size_t k = 0; k < page.panels[p].series.size(); ++k) {
      s += fmt::format("$d{}_{} << EOD\n", p, k);
      for (auto& [x, y] : page.panels[p].series[k].points)
        if (std::isfinite(x) && std::isfinite(y))
          s += fmt::format("{:.6g} {:.6g}\n", x, y);
      s += "EOD\n";
    }
  const int cols = std::max(1, page.columns);
  const int rows = static_cast<int>((page.panels.size() + static_cast<std::size_t>(cols) - 1)
                                    / static_cast<std::size_t>(cols));
  s += fmt::format("set terminal pngcairo noenhanced size {},{} font \"sans,10\"\n", page.width,
                   page.height);
  s += fmt::format("set output {}\n", quoted(png_path));
  s += fmt::format("set multiplot layout {},{} title {}\n", std::max(1, rows), cols,
                   quoted(page.title));
  s += "set grid\nset key top left\n";
  for (std::size_t p = 0; p < page.panels.size(); ++p) {
    const auto& panel = page.panels[p];
    s += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n", quoted(panel.title),
                     quoted(panel.xlabel), quoted(panel.ylabel));
    s += panel.logx ? "set logscale x\n" : "unset logscale x\n";
    if (panel.style == plot_style::bars) {
      s += "set style fill solid 0.6 border -1\nset boxwidth 0.6\nset yrange [0:*]\n"
           "set xrange [-0.7:*]\nset offsets 0, 0, graph 0.08, 0\nset key off\n";
      std::string tics;
      for (std::size_t i = 0; i < panel.bar_labels.size(); ++i)
        tics += fmt::format("{}{} {}", i ? ", " : "", quoted(panel.bar_labels[i]), i);
      s += fmt::format("set xtics ({})\n", tics);
    } else {
      s += fmt::format("set autoscale\nset xtics autofreq\nset key {}\n", panel.key);
    }
    if (panel.series.empty()) {
      s += "set label 1 \"no data\" at graph 0.5,0.5 center\nplot NaN notitle\nunset label 1\n";
      continue;
    }
    s += "plot ";
    for (std::size_t k = 0; k < panel.series.size(); ++k) {
      const char* with = panel.style == plot_style::bars          ? "boxes"
                         : panel.style == plot_style::linespoints ? "linespoints"
                                                                  : "lines";
      s += fmt::format("{}$d{}_{} using 1:2 with {} lw 2 title {}", k ? ", " : "", p, k, with,
                       quoted(panel.series[k].title));
      if (panel.style == plot_style::bars)
        s += fmt::format(", $d{}_{} using 1:2:(sprintf($2 >= 100 ? \"%.0f\" : \"%.1f\", $2)) with labels offset 0,0.8 "
                         "notitle",
                         p, k);
    }
    s += "\n";
    if (panel.style == plot_style::bars)
      s += "set key top left\nset xrange [*:*]\nset offsets 0, 0, 0, 0\n";
  }
  s += "unset multiplot\nset output\n";
  return s;
}

std::optional<std::string> find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    auto dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    if (dir.empty())
      continue;
    auto candidate = std::string{dir} + "/gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

expected<void, std::string> render(const plot_page& page, const std::string& png_path) {
  const auto script_path = script_path_for(png_path);
  {
    std::ofstream out{script_path, std::ios::binary | std::ios::trunc};
    out << gnuplot_script(page, png_path);
    if (!out)
      return unexpected(fmt::format("cannot write '{}': {}", script_path, std::strerror(errno)));
  }
  auto gnuplot = find_gnuplot();
  if (!gnuplot)
    return unexpected(fmt::format("gnuplot is not installed (scripts/bootstrap --bench installs "
                                  "gnuplot-nox); no PNG written. The plot script is {}",
                                  script_path));
  child_options o;
  o.args = {script_path};
  // gnuplot's own messages (warnings, errors) reach the user as before.
  o.on_line = [](std::string_view l) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(l.size()), l.data());
  };
  auto child = child_process::start(*gnuplot, std::move(o));
  if (!child)
    return unexpected(fmt::format("cannot start gnuplot: {}", child.error()));
  const auto status = child->wait_exit(std::chrono::minutes{2});
  if (!status) {
    child->signal(SIGKILL);
    return unexpected(fmt::format("gnuplot did not finish {} within 2 minutes", script_path));
  }
  if (*status != 0)
    return unexpected(fmt::format("gnuplot failed on {} (status {})", script_path, *status));
  return {};
}

} // namespace kvlane::tools::bench
