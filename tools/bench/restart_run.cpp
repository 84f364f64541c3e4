#include "tools/bench/restart_run.hpp"

#include "tools/bench/report_json.hpp"
#include "tools/bench/restart_driver.hpp"
#include "tools/bench/reuse_report.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

daemon::config restart_profile(const bench_setup& setup) {
  auto cfg = setup.cfg;
  cfg.reuse.mode = actors::reuse_mode::store;
  return cfg;
}

expected<restart_comparison, std::string> run_restarts(const bench_options& o,
                                                       const bench_setup& setup,
                                                       const bench_workload& w,
                                                       const bench_run_options& run) {
  auto progress = [&](std::string_view line) {
    if (run.progress)
      run.progress(line);
  };
  const auto mode = o.modes.front();
  restart_comparison c;
  const auto& sim = setup.model().backend.sim;
  c.device = {sim.snapshot_bytes, (sim.dump_min_ms + sim.dump_max_ms) / 2, setup.time_scale};
  std::vector<restart_kind> kinds{restart_kind::none};
  kinds.insert(kinds.end(), o.restarts.begin(), o.restarts.end());
  for (auto kind : kinds) {
    restart_run_options ro;
    ro.run.cfg = restart_profile(setup);
    ro.run.model = setup.model().name;
    ro.run.time_scale = setup.time_scale;
    ro.run.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
    ro.run.progress = progress;
    ro.kvlaned_path = run.kvlaned_path;
    ro.log_level = o.log_level;
    const auto name = std::string{to_string(kind)};
    progress(fmt::format("restart {} ({}): running {} requests through {}", name,
                         actors::to_string(mode), w.main.size(), run.kvlaned_path));
    auto r = run_restart(ro, mode, kind, w.main);
    if (!r)
      return unexpected(fmt::format("restart {}: {}", name, r.error()));
    auto s = summarize_restart(*r, w.main, c.runs.empty() ? nullptr : &c.runs.front());
    progress(fmt::format("restart {}: {}/{} completed in {:.1f} s wall (the shift aside); {} of "
                         "{} achievable prompt tokens reused, reusable TTFT p50 {:.0f} ms{}",
                         name, s.reuse.completed, w.main.size(), r->run.wall_ms / 1000.0,
                         s.reuse.reused_tokens, s.reuse.achievable_reused_tokens,
                         s.reuse.ttft_p50_reusable_ms, r->run.timed_out ? " (TIMED OUT)" : ""));
    auto m = summarize(r->run, o.slo);
    m.mode = name;
    c.report.modes.push_back(std::move(m));
    c.report.reuse.push_back(s.reuse);
    c.runs.push_back(std::move(s));
  }
  c.report.targets = restart_targets(c.runs);
  return c;
}

std::string format_restart_comparison(const restart_comparison& c) {
  const auto& x = c.report.ctx;
  std::string text = fmt::format(
    "\nkvlane-bench --restart: {} requests, time_scale {}, mode {}, reuse store; every run "
    "through kvlaned children (client library)\nall times in simulated ms (wall ms x {}) unless "
    "marked wall\n",
    x.requests, x.time_scale, x.scheduler_mode, x.time_scale);
  if (x.conversations) {
    const auto& cv = *x.conversations;
    text += fmt::format("conversations: {} of {} kept (--sample-conversations {}, seed {}), "
                        "{}-token blocks (input scale {}), turns: {}\n",
                        cv.kept_conversations, cv.conversations, cv.sample, x.seed,
                        cv.block_tokens, x.input_scale, cv.turns);
  }
  text += fmt::format("{} of {} prompt tokens reusable by an unlimited cache, in {} requests\n\n",
                      x.achievable_reused_tokens, x.prompt_tokens_total, x.reusable_requests);
  text += format_reuse(c.report.reuse);
  text += "\n" + format_restart(c.runs, c.report.targets, c.device);
  text += "\n" + format_targets(c.report.targets);
  return text;
}

std::string restart_comparison_json(const restart_comparison& c) {
  auto j = report_json(c.report);
  j["restart"] = restart_json(c.runs, c.device);
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

} // namespace kvlane::tools::bench
