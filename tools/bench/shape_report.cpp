#include "tools/bench/shape_report.hpp"

#include "tools/bench/report_json.hpp"
#include "tools/json_figure.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::ordered_json;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

constexpr std::string_view goodput_id = "shape_overlap_goodput_vs_best_other";
constexpr std::string_view ttft_id = "shape_overlap_interactive_ttft_p99_vs_prio_fcfs";
constexpr std::string_view failed_id = "no_failed_requests";

/// Each target's meaning over the grid (a cell's description adds its figures).
std::string generic_description(std::string_view id) {
  if (id == goodput_id)
    return fmt::format("overlap goodput >= {} x the best other mode's but free-transfer",
                       shape_goodput_min_ratio);
  if (id == ttft_id)
    return fmt::format("overlap interactive TTFT p99 <= {} x prio-fcfs's where prio-fcfs's is "
                       "> {} x the interactive TTFT bound",
                       shape_ttft_max_ratio, shape_prio_miss_factor);
  return "failed or timed-out requests over all modes == 0";
}

const mode_summary* find_mode(const std::vector<mode_summary>& modes, std::string_view name) {
  for (auto& m : modes)
    if (m.mode == name)
      return &m;
  return nullptr;
}

std::string num(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : std::string{"-"};
}

const target_check* find_target(const shape_cell& c, std::string_view id) {
  for (auto& t : c.targets)
    if (t.id == id)
      return &t;
  return nullptr;
}

std::string verdict(const target_check* t) {
  return !t || !t->pass ? "n/a" : *t->pass ? "PASS" : "FAIL";
}

/// The best other mode's goodput (free-transfer and overlap excepted), or null.
const mode_summary* best_other(const std::vector<mode_summary>& modes) {
  const mode_summary* best = nullptr;
  for (auto& m : modes)
    if (m.mode != "overlap" && m.mode != "free-transfer"
        && (!best || m.goodput_req_s > best->goodput_req_s))
      best = &m;
  return best;
}

/// overlap / prio-fcfs interactive TTFT p99, or NaN.
double ttft_ratio(const std::vector<mode_summary>& modes) {
  const auto* o = find_mode(modes, "overlap");
  const auto* p = find_mode(modes, "prio-fcfs");
  if (!o || !p || !(p->ttft_p99_interactive_ms > 0))
    return nan;
  return o->ttft_p99_interactive_ms / p->ttft_p99_interactive_ms;
}

/// overlap / best other goodput; 1 when neither met any SLO (no worse), NaN
/// when a mode is missing.
double goodput_ratio(const std::vector<mode_summary>& modes) {
  const auto* o = find_mode(modes, "overlap");
  const auto* b = best_other(modes);
  if (!o || !b || !std::isfinite(o->goodput_req_s) || !std::isfinite(b->goodput_req_s))
    return nan;
  if (b->goodput_req_s == 0)
    return o->goodput_req_s == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return o->goodput_req_s / b->goodput_req_s;
}

/// The cell's modes and targets in the comparison report's JSON form.
json cell_figures(const shape_cell& c) {
  bench_report r;
  r.modes = c.modes;
  r.targets = c.targets;
  auto all = report_json(r);
  return json{{"modes", std::move(all["modes"])}, {"targets", std::move(all["targets"])}};
}

/// A load as the command line gives it, with at least one decimal: 0.5, 1.0, 1.25.
std::string load_text(double x) {
  return std::fabs(x * 10 - std::round(x * 10)) < 1e-9 ? fmt::format("{:.1f}", x)
                                                       : fmt::format("{}", x);
}

} // namespace

std::vector<target_check> shape_targets(const std::vector<mode_summary>& modes,
                                        const slo_set& slo) {
  std::vector<target_check> out;
  double failed = 0;
  for (auto& m : modes)
    failed += static_cast<double>(m.failed) + (m.timed_out ? 1.0 : 0.0);
  out.push_back({std::string{failed_id}, generic_description(failed_id), failed, 0, false,
                 modes.empty() ? std::nullopt : std::optional<bool>{failed == 0}});

  const auto* overlap = find_mode(modes, "overlap");
  const auto* best = best_other(modes);
  {
    target_check t{std::string{goodput_id}, generic_description(goodput_id), goodput_ratio(modes),
                   shape_goodput_min_ratio, true, std::nullopt};
    if (overlap && best) {
      t.description += fmt::format(" (overlap {}, {} best: {})", num(overlap->goodput_req_s, 3),
                                   best->mode, num(best->goodput_req_s, 3));
      t.pass = !std::isnan(t.value) && t.value >= t.threshold;
    }
    out.push_back(std::move(t));
  }
  {
    const auto* prio = find_mode(modes, "prio-fcfs");
    target_check t{std::string{ttft_id}, generic_description(ttft_id), ttft_ratio(modes),
                   shape_ttft_max_ratio, false, std::nullopt};
    const double bound = shape_prio_miss_factor * slo.interactive.ttft_ms;
    if (overlap && prio) {
      const double p99 = prio->ttft_p99_interactive_ms;
      if (!std::isfinite(p99)) {
        t.description += " (no interactive request completed in prio-fcfs: not evaluated)";
      } else if (p99 <= bound) {
        t.description += fmt::format(" (prio-fcfs {} ms <= {} ms: not evaluated)", num(p99, 0),
                                     num(bound, 0));
      } else {
        t.description += fmt::format(" (overlap {} ms, prio-fcfs {} ms)",
                                     num(overlap->ttft_p99_interactive_ms, 0), num(p99, 0));
        t.pass = std::isfinite(t.value) && t.value <= t.threshold;
      }
    }
    out.push_back(std::move(t));
  }
  // A cell that lost requests proves nothing: it fails every target it evaluates.
  if (failed > 0)
    for (auto& t : out)
      if (t.pass)
        t.pass = false;
  return out;
}

std::vector<target_tally> tally_targets(const std::vector<shape_cell>& cells) {
  std::vector<target_tally> out;
  for (std::size_t i = 0; i < cells.size(); ++i)
    for (auto& t : cells[i].targets) {
      auto it = std::find_if(out.begin(), out.end(), [&](auto& x) { return x.id == t.id; });
      if (it == out.end()) {
        out.push_back({t.id, generic_description(t.id)});
        it = std::prev(out.end());
      }
      ++it->cells;
      if (!t.pass) {
        ++it->not_evaluated;
        continue;
      }
      ++(*t.pass ? it->passed : it->failed);
      auto worse = [&](double a, double b) { return t.at_least ? a < b : a > b; };
      const target_check* w = nullptr;
      if (it->worst_cell >= 0)
        for (auto& x : cells[static_cast<std::size_t>(it->worst_cell)].targets)
          if (x.id == t.id)
            w = &x;
      // A NaN value (a figure missing) counts as the worst there is.
      if (!w || std::isnan(t.value) || (!std::isnan(w->value) && worse(t.value, w->value)))
        it->worst_cell = static_cast<std::ptrdiff_t>(i);
    }
  return out;
}

std::string cell_name(const shape_cell& c) {
  return fmt::format("{}, load {}, {}", to_string(c.shape), load_text(c.load),
                     backends::to_string(c.device));
}

std::string format_cell(const shape_cell& c) {
  std::string out = fmt::format("cell {} (offered load {:.3f}):\n", cell_name(c), c.offered_load);
  out += fmt::format("{:<14}{:>9}{:>9}{:>10}{:>11}{:>10}{:>10}{:>11}{:>9}{:>8}\n", "mode",
                     "goodput", "SLO att", "tokens/s", "TTFT p99i", "TTFT p99", "TPOT p99",
                     "E2E p99", "preempt", "failed");
  for (auto& m : c.modes)
    out += fmt::format("{:<14}{:>9}{:>9}{:>10}{:>11}{:>10}{:>10}{:>11}{:>9}{:>8}\n", m.mode,
                       num(m.goodput_req_s, 3), num(m.slo_attainment, 3),
                       num(m.throughput_tok_s, 1), num(m.ttft_p99_interactive_ms, 0),
                       num(m.ttft_p99_ms, 0), num(m.tpot_p99_ms, 1), num(m.e2e_p99_ms, 0),
                       m.preemptions, m.failed + (m.timed_out ? 1 : 0));
  return out + format_targets(c.targets);
}

std::string format_grid(const shapes_report& r) {
  std::string out = fmt::format(
    "workload shapes grid: {} shapes x {} loads x {} devices = {} cells; SLO interactive TTFT "
    "<= {} ms (prio-fcfs misses it above {} ms)\n",
    r.shapes.size(), r.loads.size(), r.devices.size(), r.cells.size(),
    num(r.ctx.slo.interactive.ttft_ms, 0),
    num(shape_prio_miss_factor * r.ctx.slo.interactive.ttft_ms, 0));
  for (auto& s : r.shapes)
    out += fmt::format("  {:<14} {} requests ({} interactive, {} clamped), mean prompt {:.0f}, "
                       "mean output {:.0f}: {}\n",
                       to_string(s.shape), s.ctx.requests, s.ctx.interactive, s.ctx.clamped,
                       s.ctx.prompt_tokens_mean, s.ctx.output_tokens_mean, describe(s.shape));
  out += fmt::format("\n{:<14}{:>5}{:>8}{:>9}{:>20}{:>8}{:>6}{:>11}{:>11}{:>8}{:>6}{:>8}{:>6}\n",
                     "shape", "load", "device", "overlap", "best other", "ratio", "", "p99i ov",
                     "p99i prio", "ratio", "", "failed", "");
  for (auto& c : r.cells) {
    const auto* o = find_mode(c.modes, "overlap");
    const auto* b = best_other(c.modes);
    const auto* p = find_mode(c.modes, "prio-fcfs");
    std::size_t failed = 0;
    for (auto& m : c.modes)
      failed += m.failed + (m.timed_out ? 1 : 0);
    out += fmt::format(
      "{:<14}{:>5}{:>8}{:>9}{:>20}{:>8}{:>6}{:>11}{:>11}{:>8}{:>6}{:>8}{:>6}\n",
      to_string(c.shape), load_text(c.load), backends::to_string(c.device),
      o ? num(o->goodput_req_s, 3) : "-",
      b ? fmt::format("{} {}", b->mode, num(b->goodput_req_s, 3)) : "-",
      num(goodput_ratio(c.modes), 3), verdict(find_target(c, goodput_id)),
      o ? num(o->ttft_p99_interactive_ms, 0) : "-", p ? num(p->ttft_p99_interactive_ms, 0) : "-",
      num(ttft_ratio(c.modes), 3), verdict(find_target(c, ttft_id)), failed,
      verdict(find_target(c, failed_id)));
  }
  out += fmt::format("\nsummary over {} cells:\n", r.cells.size());
  for (auto& t : tally_targets(r.cells)) {
    std::string worst = "-";
    if (t.worst_cell >= 0) {
      const auto& c = r.cells[static_cast<std::size_t>(t.worst_cell)];
      worst = fmt::format("{} ({})", num(find_target(c, t.id)->value, 3), cell_name(c));
    }
    out += fmt::format("  {:<48} PASS {:>2}  FAIL {:>2}  n/a {:>2}  worst {}\n    ({})\n", t.id,
                       t.passed, t.failed, t.not_evaluated, worst, t.description);
  }
  return out;
}

json shapes_json(const shapes_report& r) {
  bench_report top;
  top.ctx = r.ctx;
  const auto top_json = report_json(top);
  json j;
  j["tool"] = "kvlane-bench";
  j["version"] = KVLANE_VERSION;
  j["command_line"] = r.ctx.command_line;
  j["path"] = r.ctx.path;
  j["time_unit"] = "simulated ms (wall ms x time_scale); rates per simulated second";
  j["profile"] = top_json["profile"];
  j["slo"] = top_json["workload"]["slo"];
  auto& loads = j["loads"] = json::array();
  for (double l : r.loads)
    loads.push_back(json_figure(l));
  auto& devices = j["devices"] = json::array();
  for (auto d : r.devices)
    devices.push_back(backends::to_string(d));
  auto& shapes = j["shapes"] = json::object();
  for (auto& s : r.shapes) {
    bench_report w;
    w.ctx = s.ctx;
    auto workload = report_json(w)["workload"];
    // Per cell, not per shape: the load and what follows from it.
    for (auto key : {"load", "rate_scale", "offered_load", "arrival_span_s", "slo"})
      workload.erase(key);
    shapes[std::string{to_string(s.shape)}] =
      json{{"description", describe(s.shape)}, {"workload", std::move(workload)}};
  }
  auto& cells = j["cells"] = json::array();
  for (auto& c : r.cells) {
    auto figures = cell_figures(c);
    cells.push_back(json{{"shape", to_string(c.shape)},
                         {"load", json_figure(c.load)},
                         {"offered_load", json_figure(c.offered_load)},
                         {"device", backends::to_string(c.device)},
                         {"overlap_goodput_vs_best_other", json_figure(goodput_ratio(c.modes))},
                         {"overlap_interactive_ttft_p99_vs_prio_fcfs",
                          json_figure(ttft_ratio(c.modes))},
                         {"modes", std::move(figures["modes"])},
                         {"targets", std::move(figures["targets"])}});
  }
  auto& summary = j["summary"] = json::array();
  for (auto& t : tally_targets(r.cells)) {
    json worst = nullptr;
    if (t.worst_cell >= 0) {
      const auto& c = r.cells[static_cast<std::size_t>(t.worst_cell)];
      worst = json{{"shape", to_string(c.shape)},
                   {"load", json_figure(c.load)},
                   {"device", backends::to_string(c.device)},
                   {"value", json_figure(find_target(c, t.id)->value)}};
    }
    summary.push_back(json{{"id", t.id},
                           {"description", t.description},
                           {"cells", t.cells},
                           {"passed", t.passed},
                           {"failed", t.failed},
                           {"not_evaluated", t.not_evaluated},
                           {"worst", std::move(worst)}});
  }
  return j;
}

plot_page shapes_plot(const shapes_report& r) {
  plot_page page;
  page.title = fmt::format("kvlane-bench workload shapes: overlap against the other modes, "
                           "per cell (device models: lines)");
  page.columns = static_cast<int>(std::max<std::size_t>(1, r.shapes.size()));
  page.width = 450 * page.columns;
  page.height = 800;
  auto panel = [&](workload_shape s, bool goodput) {
    plot_panel p;
    p.title = goodput ? fmt::format("{}: goodput, overlap / best other", to_string(s))
                      : fmt::format("{}: interactive TTFT p99, overlap / prio-fcfs", to_string(s));
    p.xlabel = "load (x capacity)";
    p.ylabel = goodput ? "ratio"
                       : fmt::format("ratio (target where prio-fcfs > {} ms)",
                                     num(shape_prio_miss_factor * r.ctx.slo.interactive.ttft_ms, 0));
    p.style = plot_style::linespoints;
    p.key = goodput ? "bottom left" : "top left";
    for (auto d : r.devices) {
      plot_series series{std::string{backends::to_string(d)}, {}};
      for (auto& c : r.cells)
        if (c.shape == s && c.device == d)
          series.points.emplace_back(c.load, goodput ? goodput_ratio(c.modes)
                                                     : ttft_ratio(c.modes));
      p.series.push_back(std::move(series));
    }
    plot_series target{goodput ? fmt::format("target >= {}", shape_goodput_min_ratio)
                               : fmt::format("target <= {}", shape_ttft_max_ratio),
                       {}};
    for (double l : r.loads)
      target.points.emplace_back(l, goodput ? shape_goodput_min_ratio : shape_ttft_max_ratio);
    p.series.push_back(std::move(target));
    return p;
  };
  for (auto& s : r.shapes)
    page.panels.push_back(panel(s.shape, true));
  for (auto& s : r.shapes)
    page.panels.push_back(panel(s.shape, false));
  return page;
}

} // namespace kvlane::tools::bench
