#include "tools/bench/bench_run.hpp"

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/conversation_workload.hpp"
#include "tools/bench/ipc_driver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace kvlane::tools::bench {

namespace {

/// Runs every mode of an invocation on the requested path(s).
class mode_runner {
public:
  mode_runner(const bench_options& o, const bench_setup& setup, const bench_run_options& run)
    : o_(o), setup_(setup), run_(run) {}

  /// Every mode on `reqs` under `run_cfg`. With --path both, each mode runs in
  /// process then via ipc, and the ipc figures go to *ipc_out.
  expected<std::vector<mode_summary>, std::string>
  run_all(const std::vector<trace_request>& reqs, const daemon::config& run_cfg,
          const std::string& label, std::vector<mode_summary>* ipc_out) const {
    const bool inproc = o_.path != bench_path::ipc;
    const bool ipc = o_.path != bench_path::inproc;
    std::vector<mode_summary> out;
    for (auto mode : o_.modes) {
      run_options ro;
      ro.cfg = run_cfg;
      ro.model = setup_.model().name;
      ro.time_scale = setup_.time_scale;
      ro.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o_.timeout_s * 1000));
      ro.progress = [this](std::string_view line) { progress(line); };
      if (inproc) {
        progress(fmt::format("{}{}: running {} requests", label, actors::to_string(mode),
                             reqs.size()));
        auto r = run_mode(ro, mode, reqs);
        if (!r)
          return unexpected(fmt::format("mode {}: {}", actors::to_string(mode), r.error()));
        auto s = summarize(*r, o_.slo);
        done(label, s, *r, "");
        out.push_back(std::move(s));
      }
      if (ipc) {
        ipc_run_options io;
        io.run = ro;
        io.kvlaned_path = run_.kvlaned_path;
        io.log_level = o_.log_level;
        io.transfers_overlap = setup_.info.caps.transfer_overlaps_compute;
        progress(fmt::format("{}{} (ipc): running {} requests through {}", label,
                             actors::to_string(mode), reqs.size(), run_.kvlaned_path));
        auto r = run_mode_ipc(io, mode, reqs);
        if (!r)
          return unexpected(fmt::format("mode {} (ipc): {}", actors::to_string(mode), r.error()));
        auto s = summarize(*r, o_.slo);
        done(label, s, *r, " (ipc)");
        (inproc && ipc_out ? *ipc_out : out).push_back(std::move(s));
      }
    }
    apply_hidden_cost(out);
    if (ipc_out)
      apply_hidden_cost(*ipc_out);
    return out;
  }

  void progress(std::string_view line) const {
    if (run_.progress)
      run_.progress(line);
  }

private:
  void done(const std::string& label, const mode_summary& s, const run_result& r,
            std::string_view path) const {
    progress(fmt::format("{}{}{}: {}/{} completed in {:.1f} s wall; {:.1f} tokens/s, TTFT p99 "
                         "{:.0f} ms, {} preemptions{}",
                         label, s.mode, path, s.completed, s.requests, r.wall_ms / 1000.0,
                         s.throughput_tok_s, s.ttft_p99_ms, s.preemptions,
                         s.timed_out ? " (TIMED OUT)" : ""));
  }

  const bench_options& o_;
  const bench_setup& setup_;
  const bench_run_options& run_;
};

/// The quantum sweep: halves scheduler.quantum_steps from its configured
/// value until a mode preempts at least once per slot per simulated second.
expected<void, std::string> sweep_quantum(const mode_runner& runner, const bench_options& o,
                                          const bench_setup& setup, const bench_workload& w,
                                          bench_report& report) {
  std::uint32_t q = std::max(1u, setup.cfg.scheduler.quantum_steps);
  const bool overlap_runs = std::find(o.modes.begin(), o.modes.end(),
                                      actors::scheduler_mode::overlap)
                            != o.modes.end();
  for (;;) {
    auto run_cfg = setup.cfg;
    run_cfg.scheduler.quantum_steps = q;
    auto modes = runner.run_all(w.main, run_cfg, fmt::format("quantum {}: ", q), nullptr);
    if (!modes)
      return unexpected(std::move(modes).error());
    quantum_point p{q, std::move(*modes)};
    // The criterion is overlap's rate (kvlane's mode); without it, any mode's.
    double rate = 0;
    for (auto& s : p.modes)
      if (s.mode == "overlap")
        rate = s.preemptions_per_slot_s;
    if (!overlap_runs)
      for (auto& s : p.modes)
        rate = std::max(rate, s.preemptions_per_slot_s);
    report.quantum_sweep.push_back(std::move(p));
    runner.progress(fmt::format("quantum {}: {:.3f} preemptions per slot per second", q, rate));
    if (rate >= 1.0)
      break;
    if (q == 1) {
      runner.progress("quantum 1 reached before 1 preemption per slot per second");
      break;
    }
    q = std::max(1u, q / 2);
  }
  report.modes = report.quantum_sweep.front().modes;
  report.ratios = standard_ratios(report.modes);
  report.targets = sweep_targets(report.quantum_sweep);
  return {};
}

/// The main comparison, after the load sweep's points when --sweep is given
/// (the main table is the point at the main load, run once more if missing).
expected<void, std::string> compare_modes(const mode_runner& runner, const bench_options& o,
                                          const bench_setup& setup, const bench_workload& w,
                                          bench_report& report) {
  bool have_main = false;
  for (double load : o.sweep_loads) {
    double factor = 1;
    auto reqs = w.at_load(load, factor);
    auto modes = runner.run_all(reqs, setup.cfg, fmt::format("load {}: ", load), nullptr);
    if (!modes)
      return unexpected(std::move(modes).error());
    load_point p{load, offered_load(reqs, w.wm).value_or(0), std::move(*modes)};
    if (w.main_load && std::fabs(load - *w.main_load) < 1e-9) {
      report.modes = p.modes;
      have_main = true;
    }
    report.load_sweep.push_back(std::move(p));
  }
  if (!have_main) {
    auto modes = runner.run_all(w.main, setup.cfg, "", &report.ipc_modes);
    if (!modes)
      return unexpected(std::move(modes).error());
    report.modes = std::move(*modes);
  }
  report.ratios = standard_ratios(report.modes);
  report.targets = comparison_targets(report.modes, setup.info.caps.transfer_overlaps_compute);
  // Side by side: the same requests under each device assumption; the
  // configured device's comparison (above) is reused, not run twice.
  const auto configured = setup.model().backend.sim.overlap;
  for (auto d : o.devices) {
    device_run dr;
    dr.overlap = d;
    dr.assumption = d == backends::transfer_overlap::full;
    if (d == configured) {
      dr.modes = report.modes;
    } else {
      auto run_cfg = setup.cfg;
      run_cfg.models.front().backend.sim.overlap = d;
      auto modes = runner.run_all(w.main, run_cfg,
                                  fmt::format("device {}: ", backends::to_string(d)), nullptr);
      if (!modes)
        return unexpected(std::move(modes).error());
      dr.modes = std::move(*modes);
    }
    dr.targets = comparison_targets(dr.modes, d != backends::transfer_overlap::none);
    report.devices.push_back(std::move(dr));
  }
  for (auto& t : compare_paths(report.modes, report.ipc_modes))
    report.targets.push_back(std::move(t));
  return {};
}

/// --reuse: the same requests once per reuse policy, in one mode, in process.
expected<void, std::string> compare_reuse(const bench_options& o, const bench_setup& setup,
                                          const bench_workload& w, const bench_run_options& run,
                                          bench_report& report) {
  auto progress = [&](std::string_view line) {
    if (run.progress)
      run.progress(line);
  };
  const auto mode = o.modes.front();
  for (const auto& v : o.reuse) {
    run_options ro;
    ro.cfg = setup.cfg;
    ro.cfg.reuse.mode = v.mode;
    ro.cfg.store.eviction = v.eviction;
    ro.model = setup.model().name;
    ro.time_scale = setup.time_scale;
    ro.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
    ro.progress = progress;
    progress(fmt::format("reuse {} ({}): running {} requests", v.name, actors::to_string(mode),
                         w.main.size()));
    auto r = run_mode(ro, mode, w.main);
    if (!r)
      return unexpected(fmt::format("reuse {}: {}", v.name, r.error()));
    auto s = summarize(*r, o.slo);
    s.mode = v.name;
    auto rs = summarize_reuse(v.name, *r, w.main);
    progress(fmt::format("reuse {}: {}/{} completed in {:.1f} s wall; {:.1f} tokens/s, {} of {} "
                         "achievable prompt tokens reused, TTFT p50 {:.0f} ms (reusable {:.0f} "
                         "ms){}",
                         v.name, rs.completed, s.requests, r->wall_ms / 1000.0,
                         rs.throughput_tok_s, rs.reused_tokens, rs.achievable_reused_tokens,
                         rs.ttft_p50_ms, rs.ttft_p50_reusable_ms,
                         r->timed_out ? " (TIMED OUT)" : ""));
    report.modes.push_back(std::move(s));
    report.reuse.push_back(std::move(rs));
    if (setup.sim)
      report.host_times.emplace_back(
        v.name, measure_transfer_host_time(r->stats, setup.model().backend.sim, r->store,
                                           r->peak_committed_bytes));
  }
  report.targets = reuse_targets(report.reuse);
  return {};
}

/// --store-split: two models from the profile's model share the store; the
/// same requests, their conversations assigned to the models in bursts, once
/// per split, in one mode and one reuse policy, in process.
expected<void, std::string> compare_store_split(const bench_options& o, const bench_setup& setup,
                                                const bench_workload& w,
                                                const bench_run_options& run,
                                                bench_report& report) {
  auto progress = [&](std::string_view line) {
    if (run.progress)
      run.progress(line);
  };
  const auto mode = o.modes.front();
  const auto& policy = o.reuse.front();
  // Whole conversations to the models in turns; what an unlimited cache
  // could reuse is then counted within each model.
  auto reqs = w.main;
  const auto model_of = assign_in_bursts(reqs, o.burst_s, split_models);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    reqs[i].model = model_of[i];
  const auto seen = achievable_reuse(reqs, setup.cfg.reuse.min_prefix_tokens);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    reqs[i].seen_prefix_tokens = seen[i];

  for (auto split : o.store_splits) {
    auto cfg = split_config(setup.cfg, split);
    if (!cfg)
      return unexpected(std::move(cfg).error());
    cfg->reuse.mode = policy.mode;
    cfg->store.eviction = policy.eviction;
    run_options ro;
    ro.cfg = *cfg;
    for (const auto& m : cfg->models)
      ro.models.push_back(m.name);
    ro.time_scale = setup.time_scale;
    ro.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
    ro.progress = progress;
    const auto name = std::string{to_string(split)};
    progress(fmt::format("store split {} (reuse {}, {}): running {} requests on {} and {}", name,
                         policy.name, actors::to_string(mode), reqs.size(), ro.models[0],
                         ro.models[1]));
    auto r = run_mode(ro, mode, reqs);
    if (!r)
      return unexpected(fmt::format("store split {}: {}", name, r.error()));
    auto ss = summarize_split(split, *r, reqs, *cfg, w.wm);
    progress(fmt::format("store split {}: {}/{} completed in {:.1f} s wall; {} of {} achievable "
                         "prompt tokens reused, TTFT p50 reusable {:.0f} ms{}",
                         name, ss.total.completed, reqs.size(), r->wall_ms / 1000.0,
                         ss.total.reused_tokens, ss.total.achievable_reused_tokens,
                         ss.total.ttft_p50_reusable_ms, r->timed_out ? " (TIMED OUT)" : ""));
    report.splits.push_back(std::move(ss));
  }
  report.targets = split_targets(report.splits);
  return {};
}

} // namespace

expected<bench_report, std::string> run_benchmark(const bench_options& o, const bench_setup& setup,
                                                  const bench_workload& w,
                                                  const bench_run_options& run) {
  const mode_runner runner{o, setup, run};
  bench_report report;
  auto ok = !o.store_splits.empty() ? compare_store_split(o, setup, w, run, report)
             : !o.reuse.empty()     ? compare_reuse(o, setup, w, run, report)
             : o.sweep_quantum ? sweep_quantum(runner, o, setup, w, report)
                               : compare_modes(runner, o, setup, w, report);
  if (!ok)
    return unexpected(ok.error());
  report.include_timeline = o.timeline;
  return report;
}

} // namespace kvlane::tools::bench
