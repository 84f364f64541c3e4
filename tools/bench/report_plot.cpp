#include "tools/bench/report_plot.hpp"

#include "tools/bench/stats.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

namespace {

plot_page quantum_sweep_page(const bench_report& r, std::span<const actors::scheduler_mode> modes) {
  plot_page page;
  page.title = fmt::format("kvlane-bench quantum sweep ({} requests, load {:.2f})", r.ctx.requests,
                           r.ctx.offered_load);
  plot_panel a{"output tokens/s vs preemptions/s", "preemptions per simulated second",
               "output tokens/s", false, plot_style::linespoints, {}, {}};
  plot_panel b{"output tokens/s vs quantum", "scheduler.quantum_steps (log)", "output tokens/s",
               true, plot_style::linespoints, {}, {}};
  for (auto mode : modes) {
    plot_series sa{std::string{actors::to_string(mode)}, {}}, sb = sa;
    for (auto& p : r.quantum_sweep)
      for (auto& s : p.modes)
        if (s.mode == sa.title) {
          sa.points.emplace_back(s.preemptions_per_s, s.throughput_tok_s);
          sb.points.emplace_back(p.quantum_tokens, s.throughput_tok_s);
        }
    a.series.push_back(std::move(sa));
    b.series.push_back(std::move(sb));
  }
  a.key = b.key = "bottom left";
  page.panels = {std::move(a), std::move(b)};
  page.columns = 2;
  page.width = 1300;
  page.height = 550;
  return page;
}

plot_page comparison_page(const bench_report& r, std::span<const actors::scheduler_mode> modes) {
  plot_page page;
  page.title = fmt::format("kvlane-bench: {} requests, offered load {:.2f}, {}", r.ctx.requests,
                           r.ctx.offered_load,
                           r.ctx.workload_source == "trace" ? r.ctx.trace_path
                                                            : std::string{"synthetic"});
  plot_panel cdfp{"TTFT CDF", "TTFT, simulated ms (log)", "fraction of requests", true,
                  plot_style::lines, {}, {}};
  plot_panel thr{"output tokens/s", "mode", "tokens per simulated second", false,
                 plot_style::bars, {}, {}};
  plot_panel inter{"TTFT p99, interactive requests", "mode", "simulated ms", false,
                   plot_style::bars, {}, {}};
  plot_panel good{"goodput (requests within their SLO)", "mode", "requests per simulated second",
                  false, plot_style::bars, {}, {}};
  plot_series bars{"tokens/s", {}}, ibars{"interactive TTFT p99", {}}, gbars{"goodput", {}};
  const auto columns = report_columns(r);
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const auto& s = columns[i];
    cdfp.series.push_back({s.mode, cdf(s.ttft_samples_ms)});
    bars.points.emplace_back(static_cast<double>(i), s.throughput_tok_s);
    ibars.points.emplace_back(static_cast<double>(i), s.ttft_p99_interactive_ms);
    gbars.points.emplace_back(static_cast<double>(i), s.goodput_req_s);
    good.bar_labels.push_back(s.mode);
    thr.bar_labels.push_back(s.mode);
    inter.bar_labels.push_back(s.mode);
  }
  thr.series.push_back(std::move(bars));
  inter.series.push_back(std::move(ibars));
  good.series.push_back(std::move(gbars));
  page.panels = {std::move(cdfp), std::move(good), std::move(thr), std::move(inter)};
  page.columns = 2;
  page.width = 1400;
  page.height = 1000;
  if (!r.load_sweep.empty()) {
    plot_panel sw{"TTFT p99 vs offered load", "offered load (x capacity)",
                  "TTFT p99, simulated ms", false, plot_style::linespoints, {}, {}};
    sw.key = "top left";
    for (auto mode : modes) {
      plot_series s{std::string{actors::to_string(mode)}, {}};
      for (auto& p : r.load_sweep)
        for (auto& x : p.modes)
          if (x.mode == s.title)
            s.points.emplace_back(p.offered_load, x.ttft_p99_ms);
      sw.series.push_back(std::move(s));
    }
    plot_panel att{"SLO attainment vs offered load", "offered load (x capacity)",
                   "share of requests within their SLO", false, plot_style::linespoints, {}, {}};
    att.key = "bottom left";
    for (auto mode : modes) {
      plot_series s{std::string{actors::to_string(mode)}, {}};
      for (auto& p : r.load_sweep)
        for (auto& x : p.modes)
          if (x.mode == s.title)
            s.points.emplace_back(p.offered_load, x.slo_attainment);
      att.series.push_back(std::move(s));
    }
    page.panels.push_back(std::move(att));
    page.panels.push_back(std::move(sw));
    page.columns = 3;
    page.width = 1800;
    page.height = 1000;
  }
  return page;
}

} // namespace

plot_page report_plot(const bench_report& r, std::span<const actors::scheduler_mode> modes) {
  return r.quantum_sweep.empty() ? comparison_page(r, modes) : quantum_sweep_page(r, modes);
}

} // namespace kvlane::tools::bench
