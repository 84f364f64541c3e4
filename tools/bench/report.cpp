#include "tools/bench/report.hpp"

#include "tools/bench/hidden_cost.hpp"
#include "tools/bench/saturation.hpp"
#include "tools/bench/stats.hpp"
#include "tools/bench/store_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

double div_or_nan(double a, double b) {
  return b != 0 && std::isfinite(a) && std::isfinite(b) ? a / b : nan;
}

const mode_summary* find_mode(const std::vector<mode_summary>& modes, std::string_view name) {
  for (auto& m : modes)
    if (m.mode == name)
      return &m;
  return nullptr;
}

target_check make_target(std::string id, std::string description, double value, double threshold,
                         bool at_least, bool evaluated) {
  target_check t{std::move(id), std::move(description), value, threshold, at_least, std::nullopt};
  if (evaluated)
    t.pass = std::isfinite(value) && (at_least ? value >= threshold : value <= threshold);
  return t;
}

std::string num(double x, int decimals = 1) {
  if (!std::isfinite(x))
    return "-";
  return fmt::format("{:.{}f}", x, decimals);
}

} // namespace

mode_summary summarize(const run_result& r, const slo_set& slo) {
  mode_summary s;
  s.mode = std::string{actors::to_string(r.mode)};
  s.requests = r.requests.size();
  std::vector<double> ttft, ttft_int, ttft_batch, tpot, e2e;
  for (auto& o : r.requests) {
    s.interactive += o.interactive;
    s.output_tokens += o.generated;
    if (!o.completed()) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    if (std::isfinite(o.ttft_ms)) {
      ttft.push_back(o.ttft_ms);
      (o.interactive ? ttft_int : ttft_batch).push_back(o.ttft_ms);
    }
    if (std::isfinite(o.tpot_ms))
      tpot.push_back(o.tpot_ms);
    if (std::isfinite(o.e2e_ms))
      e2e.push_back(o.e2e_ms);
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(tpot.begin(), tpot.end());
  std::sort(e2e.begin(), e2e.end());
  s.makespan_s = r.sim_ms() / 1000.0;
  s.throughput_tok_s = div_or_nan(static_cast<double>(s.output_tokens), s.makespan_s);
  s.request_s = div_or_nan(static_cast<double>(s.completed), s.makespan_s);
  s.ttft_p50_ms = percentile_sorted(ttft, 50);
  s.ttft_p90_ms = percentile_sorted(ttft, 90);
  s.ttft_p99_ms = percentile_sorted(ttft, 99);
  s.ttft_p99_interactive_ms = percentile(ttft_int, 99);
  s.ttft_p99_batch_ms = percentile(ttft_batch, 99);
  s.tpot_p50_ms = percentile_sorted(tpot, 50);
  s.tpot_p99_ms = percentile_sorted(tpot, 99);
  s.e2e_p50_ms = percentile_sorted(e2e, 50);
  s.e2e_p99_ms = percentile_sorted(e2e, 99);
  const auto met = evaluate_slo(r.requests, s.makespan_s, slo);
  s.goodput_req_s = met.goodput_req_s;
  s.slo_attainment = met.attainment;
  s.slo_met_interactive = met.met_interactive;
  s.slo_met_batch = met.met_batch;
  const auto sat = saturation_throughput(r.timeline);
  s.saturation_tok_s = sat.tok_s;
  s.saturated_s = sat.saturated_s;
  const auto& st = r.stats;
  s.npu_busy = div_or_nan(st.step_busy_ms, r.wall_ms);
  s.transfer_s = st.transfer_ms * r.time_scale / 1000.0;
  s.transfer_hidden_reported = div_or_nan(st.transfer_hidden_ms, st.transfer_ms);
  s.serialized = r.serialized;
  s.covered_ms = st.transfer_hidden_ms * r.time_scale;
  s.step_busy_ms = st.step_busy_ms * r.time_scale;
  s.modeled_step_ms = r.modeled_step_busy_ms;
  s.transfer_hidden = hidden_cost_share({st.transfer_ms * r.time_scale, s.covered_ms,
                                         s.step_busy_ms, s.modeled_step_ms, 1.0, s.serialized});
  s.preemptions = st.preemptions;
  s.swaps = st.swaps;
  s.recomputes = st.recomputes;
  s.dumps = st.dumps;
  s.loads = st.loads;
  s.steps = st.steps;
  s.slots = st.slots;
  s.preemptions_per_s = div_or_nan(static_cast<double>(st.preemptions), s.makespan_s);
  s.preemptions_per_slot_s = div_or_nan(s.preemptions_per_s, static_cast<double>(st.slots));
  s.peak_store_bytes = r.peak_store_bytes;
  s.peak_snapshots = r.peak_snapshots;
  s.store_peaks_known = r.store_peaks_known;
  s.mean_slots_busy = r.mean_slots_busy;
  s.peak_without_slot = r.peak_without_slot;
  s.max_submit_lag_ms = r.max_submit_lag_ms * r.time_scale;
  const auto held = held_turns_of(r.requests);
  s.held_turns = held.count;
  s.held_ms_mean = held.mean_ms;
  s.step_stretch = r.modeled_step_busy_ms > 0
                     ? st.step_busy_ms * r.time_scale / r.modeled_step_busy_ms
                     : nan;
  s.timed_out = r.timed_out;
  s.ttft_samples_ms = std::move(ttft);
  s.timeline = r.timeline;
  return s;
}

void apply_hidden_cost(std::vector<mode_summary>& modes) {
  const auto* reference = find_mode(modes, "free-transfer");
  const double stretch = reference && std::isfinite(reference->step_stretch)
                             && reference->step_stretch > 0
                           ? reference->step_stretch
                           : 1.0;
  for (auto& m : modes)
    m.transfer_hidden = hidden_cost_share({m.transfer_s * 1000.0, m.covered_ms, m.step_busy_ms,
                                           m.modeled_step_ms, stretch, m.serialized});
}

ratio_set ratio(const mode_summary& mode, const mode_summary& baseline) {
  ratio_set r;
  r.name = mode.mode + "_vs_" + baseline.mode;
  std::replace(r.name.begin(), r.name.end(), '-', '_'); // an id: prio_fcfs_vs_free_transfer
  r.throughput = div_or_nan(mode.throughput_tok_s, baseline.throughput_tok_s);
  r.ttft_p99 = div_or_nan(mode.ttft_p99_ms, baseline.ttft_p99_ms);
  r.ttft_p99_interactive = div_or_nan(mode.ttft_p99_interactive_ms, baseline.ttft_p99_interactive_ms);
  r.e2e_p99 = div_or_nan(mode.e2e_p99_ms, baseline.e2e_p99_ms);
  r.tpot_p99 = div_or_nan(mode.tpot_p99_ms, baseline.tpot_p99_ms);
  return r;
}

std::vector<ratio_set> standard_ratios(const std::vector<mode_summary>& modes) {
  std::vector<ratio_set> out;
  if (auto* free = find_mode(modes, "free-transfer"))
    for (auto& m : modes)
      if (m.mode != "free-transfer")
        out.push_back(ratio(m, *free));
  if (auto* overlap = find_mode(modes, "overlap"))
    for (auto base : {"fcfs", "sync"})
      if (auto* b = find_mode(modes, base))
        out.push_back(ratio(*overlap, *b));
  return out;
}

std::vector<target_check> comparison_targets(const std::vector<mode_summary>& modes,
                                             bool transfers_overlap) {
  const auto* overlap = find_mode(modes, "overlap");
  std::vector<target_check> out;
  double failed = 0;
  for (auto& m : modes)
    failed += static_cast<double>(m.failed) + (m.timed_out ? 1.0 : 0.0);
  out.push_back(make_target("no_failed_requests",
                            "failed or timed-out requests over all modes == 0", failed, 0, false,
                            !modes.empty()));
  const auto* prio = find_mode(modes, "prio-fcfs");
  const bool op = overlap && prio;
  out.push_back(make_target(
    "overlap_interactive_ttft_p99_vs_prio_fcfs",
    "overlap interactive TTFT p99 <= 0.5 x prio-fcfs (what preemption adds over ordering)",
    op ? div_or_nan(overlap->ttft_p99_interactive_ms, prio->ttft_p99_interactive_ms) : nan, 0.5,
    false, op));
  if (transfers_overlap) {
    const mode_summary* best = nullptr;
    for (auto& m : modes)
      if (m.mode != "overlap" && m.mode != "free-transfer"
          && (!best || !(m.goodput_req_s <= best->goodput_req_s)))
        best = &m;
    const bool ob = overlap && best;
    out.push_back(make_target(
      "overlap_goodput_vs_best_other",
      fmt::format("overlap goodput >= every other mode's but free-transfer ({} best: {})",
                  best ? best->mode : "-", best ? num(best->goodput_req_s, 3) : "-"),
      ob ? div_or_nan(overlap->goodput_req_s, best->goodput_req_s) : nan, 1.0, true, ob));
  } else {
    const auto* sync = find_mode(modes, "sync");
    const bool os = overlap && sync;
    out.push_back(make_target(
      "no_overlap_goodput_vs_sync",
      "device cannot overlap: overlap goodput >= 0.98 x sync (no worse; 2% noise margin)",
      os ? div_or_nan(overlap->goodput_req_s, sync->goodput_req_s) : nan, 0.98, true, os));
  }
  // A run that lost requests proves nothing: it fails every target.
  if (failed > 0)
    for (auto& t : out)
      if (t.pass)
        t.pass = false;
  return out;
}

std::vector<target_check> reuse_targets(const std::vector<reuse_summary>& runs) {
  auto find = [&](std::string_view name) -> const reuse_summary* {
    for (auto& r : runs)
      if (r.policy == name)
        return &r;
    return nullptr;
  };
  const auto* off = find("off");
  const auto* slot = find("slot");
  const auto* store = find("store");
  std::vector<target_check> out;
  double failed = 0;
  for (auto& r : runs)
    failed += static_cast<double>(r.failed) + (r.timed_out ? 1.0 : 0.0);
  out.push_back(make_target("no_failed_requests",
                            "failed or timed-out requests over all reuse policies == 0", failed, 0,
                            false, !runs.empty()));
  auto tokens = [](std::uint64_t x) { return static_cast<double>(x); };
  out.push_back(make_target(
    "store_reused_vs_achievable", "store reuses >= 0.8 x the tokens an unlimited cache would",
    store ? div_or_nan(tokens(store->reused_tokens), tokens(store->achievable_reused_tokens)) : nan,
    0.8, true, store != nullptr));
  out.push_back(make_target(
    "store_reused_vs_slot", "store reuses >= 2 x the tokens slot reuses",
    store && slot ? div_or_nan(tokens(store->reused_tokens), tokens(slot->reused_tokens)) : nan,
    2.0, true, store && slot));
  out.push_back(make_target(
    "store_reusable_ttft_p50_vs_off",
    "store TTFT p50 of requests with a reusable prefix <= 1/3 x off's",
    store && off ? div_or_nan(store->ttft_p50_reusable_ms, off->ttft_p50_reusable_ms) : nan,
    1.0 / 3.0, false, store && off));
  out.push_back(make_target(
    "store_throughput_vs_off", "store output tokens/s >= off's",
    store && off ? div_or_nan(store->throughput_tok_s, off->throughput_tok_s) : nan, 1.0, true,
    store && off));
  if (failed > 0)
    for (auto& t : out)
      if (t.pass)
        t.pass = false;
  return out;
}

std::vector<target_check> split_targets(const std::vector<split_summary>& runs) {
  const split_summary* shared = nullptr;
  const split_summary* fixed = nullptr;
  double failed = 0;
  for (auto& s : runs) {
    (s.split == store_split::shared ? shared : fixed) = &s;
    failed += static_cast<double>(s.total.failed) + (s.total.timed_out ? 1.0 : 0.0);
  }
  std::vector<target_check> out;
  out.push_back(make_target("no_failed_requests",
                            "failed or timed-out requests over all store splits == 0", failed, 0,
                            false, !runs.empty()));
  const bool both = shared && fixed;
  const auto q = both ? shared_vs_static(*shared, *fixed) : split_ratios{nan, nan, nan, nan};
  out.push_back(make_target("shared_reused_vs_static",
                            "shared store: both models reuse >= the tokens static halves reuse",
                            q.reused_tokens, 1.0, true, both));
  out.push_back(make_target(
    "shared_reusable_ttft_p50_vs_static",
    "shared store: TTFT p50 of requests with a reusable prefix <= static halves'",
    q.ttft_p50_reusable, 1.0, false, both));
  if (failed > 0)
    for (auto& t : out)
      if (t.pass)
        t.pass = false;
  return out;
}

std::vector<target_check> sweep_targets(const std::vector<quantum_point>& points) {
  double worst = std::numeric_limits<double>::infinity();
  bool evaluated = false;
  double sync_last = nan;
  for (auto& p : points) {
    const auto* o = find_mode(p.modes, "overlap");
    const auto* i = find_mode(p.modes, "free-transfer");
    const auto* s = find_mode(p.modes, "sync");
    if (o && i) {
      evaluated = true;
      double v = div_or_nan(o->throughput_tok_s, i->throughput_tok_s);
      worst = std::isfinite(v) ? std::min(worst, v) : nan;
    }
    if (s && i)
      sync_last = div_or_nan(s->throughput_tok_s, i->throughput_tok_s);
  }
  std::vector<target_check> out;
  out.push_back(make_target("sweep_overlap_throughput_vs_free_transfer_min",
                            "quantum sweep: overlap output tokens/s >= 0.95 x free-transfer at every point "
                            "(worst point shown)",
                            evaluated ? worst : nan, 0.95, true, evaluated));
  // Not a target: where sync ends up, for the record.
  auto sync = make_target("sweep_sync_throughput_vs_free_transfer_last",
                          "quantum sweep: sync output tokens/s / free-transfer at the shortest quantum "
                          "(reported, no threshold)",
                          sync_last, 0, true, false);
  out.push_back(sync);
  return out;
}

std::string format_table(const std::vector<mode_summary>& modes,
                         const std::vector<ratio_set>& ratios,
                         const std::vector<target_check>& targets) {
  std::string out;
  auto row = [&](std::string_view label, auto cell) {
    out += fmt::format("{:<28}", label);
    for (auto& m : modes)
      out += fmt::format("{:>14}", cell(m));
    out += '\n';
  };
  row("mode", [](const mode_summary& m) { return m.mode; });
  row("completed / failed", [](const mode_summary& m) {
    return fmt::format("{}/{}{}", m.completed, m.failed, m.timed_out ? "!" : "");
  });
  row("output tokens/s", [](const mode_summary& m) { return num(m.throughput_tok_s, 1); });
  row("requests/s", [](const mode_summary& m) { return num(m.request_s, 3); });
  row("goodput req/s (SLO met)", [](const mode_summary& m) { return num(m.goodput_req_s, 3); });
  row("SLO attainment", [](const mode_summary& m) { return num(m.slo_attainment, 3); });
  row("saturation tokens/s", [](const mode_summary& m) { return num(m.saturation_tok_s, 1); });
  row("TTFT p50 ms", [](const mode_summary& m) { return num(m.ttft_p50_ms, 0); });
  row("TTFT p90 ms", [](const mode_summary& m) { return num(m.ttft_p90_ms, 0); });
  row("TTFT p99 ms", [](const mode_summary& m) { return num(m.ttft_p99_ms, 0); });
  row("TTFT p99 interactive ms", [](const mode_summary& m) { return num(m.ttft_p99_interactive_ms, 0); });
  row("TTFT p99 batch ms", [](const mode_summary& m) { return num(m.ttft_p99_batch_ms, 0); });
  row("TPOT p50 ms", [](const mode_summary& m) { return num(m.tpot_p50_ms, 1); });
  row("TPOT p99 ms", [](const mode_summary& m) { return num(m.tpot_p99_ms, 1); });
  row("E2E p50 ms", [](const mode_summary& m) { return num(m.e2e_p50_ms, 0); });
  row("E2E p99 ms", [](const mode_summary& m) { return num(m.e2e_p99_ms, 0); });
  row("NPU busy", [](const mode_summary& m) { return num(m.npu_busy, 3); });
  row("transfer s", [](const mode_summary& m) { return num(m.transfer_s, 1); });
  row("transfer hidden (cost)", [](const mode_summary& m) { return num(m.transfer_hidden, 3); });
  row("transfer co-occurring", [](const mode_summary& m) {
    return num(m.transfer_hidden_reported, 3);
  });
  row("preemptions", [](const mode_summary& m) { return fmt::format("{}", m.preemptions); });
  row("swaps / recomputes", [](const mode_summary& m) {
    return fmt::format("{}/{}", m.swaps, m.recomputes);
  });
  row("preemptions/slot/s", [](const mode_summary& m) { return num(m.preemptions_per_slot_s, 3); });
  row("peak store KiB", [](const mode_summary& m) {
    return m.store_peaks_known ? fmt::format("{}", m.peak_store_bytes / 1024) : std::string{"-"};
  });
  row("peak snapshots", [](const mode_summary& m) {
    return m.store_peaks_known ? fmt::format("{}", m.peak_snapshots) : std::string{"-"};
  });
  row("mean slots busy", [](const mode_summary& m) { return num(m.mean_slots_busy, 1); });
  row("peak without slot",
      [](const mode_summary& m) { return fmt::format("{}", m.peak_without_slot); });
  row("makespan s", [](const mode_summary& m) { return num(m.makespan_s, 1); });
  row("max submit lag ms", [](const mode_summary& m) { return num(m.max_submit_lag_ms, 0); });
  row("turns held (mean ms)", [](const mode_summary& m) {
    return fmt::format("{} ({})", m.held_turns, num(m.held_ms_mean, 0));
  });
  row("step stretch", [](const mode_summary& m) { return num(m.step_stretch, 3); });

  if (!ratios.empty()) {
    out += fmt::format("\n{:<20}{:>12}{:>12}{:>14}{:>12}{:>12}\n", "ratio", "tokens/s",
                       "TTFT p99", "TTFT p99 int", "TPOT p99", "E2E p99");
    for (auto& r : ratios)
      out += fmt::format("{:<20}{:>12}{:>12}{:>14}{:>12}{:>12}\n", r.name, num(r.throughput, 3),
                         num(r.ttft_p99, 3), num(r.ttft_p99_interactive, 3), num(r.tpot_p99, 3),
                         num(r.e2e_p99, 3));
  }
  if (!targets.empty())
    out += "\n" + format_targets(targets);
  return out;
}

std::vector<target_check> compare_paths(std::vector<mode_summary>& inproc,
                                        std::vector<mode_summary>& ipc) {
  std::vector<target_check> out;
  for (auto& m : inproc) {
    auto it = std::find_if(ipc.begin(), ipc.end(), [&](auto& x) { return x.mode == m.mode; });
    if (it == ipc.end())
      continue;
    const double r = div_or_nan(it->throughput_tok_s, m.throughput_tok_s);
    m.ipc_vs_inproc_throughput = r;
    it->ipc_vs_inproc_throughput = r;
    out.push_back(make_target("ipc_vs_inproc_throughput_" + m.mode,
                              m.mode + ": output tokens/s via ipc >= 0.97 x in process", r, 0.97,
                              true, true));
  }
  return out;
}

std::string format_path_comparison(const std::vector<mode_summary>& inproc,
                                   const std::vector<mode_summary>& ipc) {
  std::string out = fmt::format("{:<14}{:>16}{:>14}{:>9}{:>16}{:>14}{:>9}\n", "ipc vs inproc",
                                "tokens/s inproc", "tokens/s ipc", "ratio", "TTFT p99 inproc",
                                "TTFT p99 ipc", "ratio");
  for (auto& m : inproc) {
    auto it = std::find_if(ipc.begin(), ipc.end(), [&](auto& x) { return x.mode == m.mode; });
    if (it == ipc.end())
      continue;
    out += fmt::format("{:<14}{:>16}{:>14}{:>9}{:>16}{:>14}{:>9}\n", m.mode,
                       num(m.throughput_tok_s, 1), num(it->throughput_tok_s, 1),
                       num(div_or_nan(it->throughput_tok_s, m.throughput_tok_s), 3),
                       num(m.ttft_p99_ms, 0), num(it->ttft_p99_ms, 0),
                       num(div_or_nan(it->ttft_p99_ms, m.ttft_p99_ms), 3));
  }
  return out;
}

std::string format_targets(const std::vector<target_check>& targets) {
  std::string out = "targets:\n";
  for (auto& t : targets) {
    std::string verdict = !t.pass ? "  --  " : *t.pass ? " PASS " : " FAIL ";
    if (!t.pass && t.threshold == 0)
      verdict = " info ";
    out += fmt::format("  [{}] {:<42} {:>8}  ({})\n", verdict, t.id, num(t.value, 3),
                       t.description);
  }
  return out;
}

std::string format_quantum_sweep(const std::vector<quantum_point>& points) {
  std::string out = fmt::format("{:>8}  {:<8}{:>12}{:>14}{:>16}{:>12}{:>12}\n", "quantum", "mode",
                                "tokens/s", "preempt/s", "preempt/slot/s", "vs free-tr", "NPU busy");
  for (auto& p : points) {
    const mode_summary* free = find_mode(p.modes, "free-transfer");
    for (auto& m : p.modes)
      out += fmt::format("{:>8}  {:<8}{:>12}{:>14}{:>16}{:>12}{:>12}\n", p.quantum_tokens, m.mode,
                         num(m.throughput_tok_s, 1), num(m.preemptions_per_s, 2),
                         num(m.preemptions_per_slot_s, 3),
                         free ? num(div_or_nan(m.throughput_tok_s, free->throughput_tok_s), 3)
                               : "-",
                         num(m.npu_busy, 3));
  }
  return out;
}

std::string format_load_sweep(const std::vector<load_point>& points) {
  std::string out =
    fmt::format("{:>6}{:>9}  {:<14}{:>9}{:>9}{:>12}{:>12}{:>14}{:>12}\n", "load", "offered",
                "mode", "SLO att", "goodput", "tokens/s", "TTFT p99", "TTFT p99 int", "completed");
  for (auto& p : points)
    for (auto& m : p.modes)
      out += fmt::format("{:>6}{:>9}  {:<14}{:>9}{:>9}{:>12}{:>12}{:>14}{:>12}\n", num(p.load, 2),
                         num(p.offered_load, 3), m.mode, num(m.slo_attainment, 3),
                         num(m.goodput_req_s, 3), num(m.throughput_tok_s, 1),
                         num(m.ttft_p99_ms, 0), num(m.ttft_p99_interactive_ms, 0),
                         fmt::format("{}/{}", m.completed, m.requests));
  return out;
}

std::string format_devices(const std::vector<device_run>& devices) {
  std::string out;
  for (auto& d : devices) {
    out += fmt::format("\ndevice overlap {}{}:\n", backends::to_string(d.overlap),
                       d.assumption ? " (an assumption: no public measurement shows a device "
                                      "transferring alongside a step at full speed)"
                                    : "");
    out += fmt::format("{:<14}{:>9}{:>9}{:>10}{:>10}{:>11}{:>10}{:>10}{:>10}{:>8}\n", "mode",
                       "goodput", "SLO att", "tokens/s", "sat tok/s", "TTFT p99i", "TTFT p99",
                       "TPOT p99", "E2E p99", "hidden");
    for (auto& m : d.modes)
      out += fmt::format("{:<14}{:>9}{:>9}{:>10}{:>10}{:>11}{:>10}{:>10}{:>10}{:>8}\n", m.mode,
                         num(m.goodput_req_s, 3), num(m.slo_attainment, 3),
                         num(m.throughput_tok_s, 1), num(m.saturation_tok_s, 1),
                         num(m.ttft_p99_interactive_ms, 0), num(m.ttft_p99_ms, 0),
                         num(m.tpot_p99_ms, 1), num(m.e2e_p99_ms, 0), num(m.transfer_hidden, 3));
    out += format_targets(d.targets);
  }
  return out;
}

std::vector<mode_summary> report_columns(const bench_report& r) {
  if (r.ipc_modes.empty())
    return r.modes;
  std::vector<mode_summary> columns;
  for (auto& s : r.modes) {
    columns.push_back(s);
    for (auto x : r.ipc_modes)
      if (x.mode == s.mode) {
        x.mode += " ipc";
        columns.push_back(std::move(x));
      }
  }
  return columns;
}

std::string format_report(const bench_report& r) {
  const auto& c = r.ctx;
  std::string_view path_desc =
    c.path == "inproc" ? "in-process engine"
    : c.path == "ipc"  ? "kvlaned child via the client library"
                       : "in process, then kvlaned via the client library (\"ipc\" columns)";
  std::string_view overlap = "n/a";
  for (auto& m : c.cfg.models)
    if (m.name == c.model && m.backend.kind == "sim")
      overlap = backends::to_string(m.backend.sim.overlap);
  std::string text = fmt::format(
    "\nkvlane-bench: {} requests, offered load {:.3f}, time_scale {}, sim overlap {}\n"
    "path: {}\nall times in simulated ms (wall ms x {})\n\n",
    c.requests, c.offered_load, c.time_scale, overlap, path_desc, c.time_scale);
  if (!r.reuse.empty() || !r.splits.empty()) {
    if (c.conversations) {
      const auto& cv = *c.conversations;
      text += fmt::format("conversations: {} of {} kept (--sample-conversations {}, seed {}), "
                          "{}-token blocks (input scale {}), users: {}, turns: {}\n",
                          cv.kept_conversations, cv.conversations, cv.sample, c.seed,
                          cv.block_tokens, c.input_scale,
                          cv.users == "one" ? "one for all requests" : "one per conversation",
                          cv.turns == "open" ? "open (at trace times)"
                                             : "causal (after the previous turn's end)");
    }
    text += fmt::format("mode {}{}; {} requests, {} clamped; {} of {} prompt tokens reusable by an "
                        "unlimited cache{}, in {} requests\n\n",
                        c.scheduler_mode,
                        c.split_policy.empty() ? std::string{} : ", reuse " + c.split_policy,
                        c.requests,
                        c.clamped, c.achievable_reused_tokens, c.prompt_tokens_total,
                        c.split_policy.empty() ? "" : " on one model", c.reusable_requests);
    if (!r.splits.empty()) {
      std::string names;
      for (auto& m : r.splits.front().models)
        names += (names.empty() ? "" : ", ") + m.figures.policy;
      text += fmt::format("two models ({}), each the profile's model, both on one simulated "
                          "device ('{}': they take turns on it) and one {:.0f} MiB store; a "
                          "conversation goes to model floor(t / {} s) mod 2, t its first "
                          "request's arrival (simulated)\n\n",
                          names, split_device(c.cfg),
                          static_cast<double>(c.cfg.store.max_bytes) / (1 << 20), c.burst_s);
      text += format_split(r.splits);
    }
    else
      text += format_reuse(r.reuse);
    if (!r.host_times.empty())
      text += "\n" + format_transfer_host_time(r.host_times);
    text += "\n" + format_targets(r.targets);
    return text;
  }
  if (!r.quantum_sweep.empty()) {
    text += "quantum sweep (scheduler.quantum_steps halved until >= 1 preemption/slot/s):\n";
    text += format_quantum_sweep(r.quantum_sweep);
    text += "\n" + format_targets(r.targets);
    return text;
  }
  text += fmt::format("SLO: interactive TTFT <= {} ms, TPOT <= {} ms; batch TTFT <= {} ms, "
                      "TPOT <= {} ms{}\n",
                      c.slo.interactive.ttft_ms, c.slo.interactive.tpot_ms, c.slo.batch.ttft_ms,
                      c.slo.batch.tpot_ms, c.slo_defaults ? " (defaults)" : "");
  text += fmt::format("capacity bound (analytic, from the step costs): {:.1f} output tokens/s\n\n",
                      c.capacity_tok_s);
  text += format_table(report_columns(r), r.ratios, r.targets);
  if (!r.devices.empty())
    text += "\nside by side, the same requests under each device assumption:" +
            format_devices(r.devices);
  if (!r.ipc_modes.empty())
    text += "\n" + format_path_comparison(r.modes, r.ipc_modes);
  if (!r.load_sweep.empty())
    text += "\nload sweep:\n" + format_load_sweep(r.load_sweep);
  return text;
}

} // namespace kvlane::tools::bench
