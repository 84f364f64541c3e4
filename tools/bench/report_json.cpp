#include "tools/bench/report_json.hpp"

#include "tools/json_figure.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::ordered_json;
using tools::json_figure;

json mode_json(const mode_summary& m, bool timeline) {
  json j;
  j["requests"] = m.requests;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["interactive"] = m.interactive;
  j["output_tokens"] = m.output_tokens;
  j["makespan_s"] = json_figure(m.makespan_s);
  j["throughput_tok_s"] = json_figure(m.throughput_tok_s);
  j["request_s"] = json_figure(m.request_s);
  j["ttft_p50_ms"] = json_figure(m.ttft_p50_ms);
  j["ttft_p90_ms"] = json_figure(m.ttft_p90_ms);
  j["ttft_p99_ms"] = json_figure(m.ttft_p99_ms);
  j["ttft_p99_interactive_ms"] = json_figure(m.ttft_p99_interactive_ms);
  j["ttft_p99_batch_ms"] = json_figure(m.ttft_p99_batch_ms);
  j["tpot_p50_ms"] = json_figure(m.tpot_p50_ms);
  j["tpot_p99_ms"] = json_figure(m.tpot_p99_ms);
  j["e2e_p50_ms"] = json_figure(m.e2e_p50_ms);
  j["e2e_p99_ms"] = json_figure(m.e2e_p99_ms);
  j["goodput_req_s"] = json_figure(m.goodput_req_s);
  j["slo_attainment"] = json_figure(m.slo_attainment);
  j["slo_met_interactive"] = m.slo_met_interactive;
  j["slo_met_batch"] = m.slo_met_batch;
  j["saturation_tok_s"] = json_figure(m.saturation_tok_s);
  j["saturated_s"] = json_figure(m.saturated_s);
  j["npu_busy"] = json_figure(m.npu_busy);
  j["transfer_s"] = json_figure(m.transfer_s);
  j["transfer_hidden"] = json_figure(m.transfer_hidden);
  j["transfer_hidden_reported"] = json_figure(m.transfer_hidden_reported);
  j["preemptions"] = m.preemptions;
  j["swaps"] = m.swaps;
  j["recomputes"] = m.recomputes;
  j["dumps"] = m.dumps;
  j["loads"] = m.loads;
  j["steps"] = m.steps;
  j["preemptions_per_s"] = json_figure(m.preemptions_per_s);
  j["preemptions_per_slot_s"] = json_figure(m.preemptions_per_slot_s);
  j["peak_store_bytes"] = m.store_peaks_known ? json(m.peak_store_bytes) : json(nullptr);
  j["peak_snapshots"] = m.store_peaks_known ? json(m.peak_snapshots) : json(nullptr);
  j["mean_slots_busy"] = json_figure(m.mean_slots_busy);
  j["peak_without_slot"] = m.peak_without_slot;
  j["slots"] = m.slots;
  j["max_submit_lag_ms"] = json_figure(m.max_submit_lag_ms);
  j["held_turns"] = m.held_turns;
  j["held_ms_mean"] = json_figure(m.held_ms_mean);
  j["step_stretch"] = json_figure(m.step_stretch);
  j["timed_out"] = m.timed_out;
  if (m.ipc_vs_inproc_throughput)
    j["ipc_vs_inproc_throughput"] = json_figure(*m.ipc_vs_inproc_throughput);
  if (timeline) {
    j["timeline_columns"] = "t_s slots_busy resident queued parked without_slot_interactive "
                            "without_slot_batch npu_busy tokens_generated preemptions";
    auto& rows = j["timeline"] = json::array();
    for (auto& t : m.timeline)
      rows.push_back(fmt::format("{:.1f} {} {} {} {} {} {} {:.3f} {} {}", t.t_s, t.slots_busy,
                                 t.resident, t.queued, t.parked, t.without_slot_interactive,
                                 t.without_slot_batch, t.npu_busy, t.tokens_generated, t.preemptions));
  }
  return j;
}

json modes_json(const std::vector<mode_summary>& modes, bool timeline = false) {
  json j = json::object();
  for (auto& m : modes)
    j[m.mode] = mode_json(m, timeline);
  return j;
}

json ratios_json(const std::vector<ratio_set>& ratios) {
  json j = json::object();
  for (auto& r : ratios)
    j[r.name] = json{{"throughput", json_figure(r.throughput)},
                     {"ttft_p99", json_figure(r.ttft_p99)},
                     {"ttft_p99_interactive", json_figure(r.ttft_p99_interactive)},
                     {"tpot_p99", json_figure(r.tpot_p99)},
                     {"e2e_p99", json_figure(r.e2e_p99)}};
  return j;
}

json targets_json(const std::vector<target_check>& targets) {
  json j = json::array();
  for (auto& t : targets)
    j.push_back(json{{"id", t.id},
                     {"description", t.description},
                     {"value", json_figure(t.value)},
                     {"threshold", json_figure(t.threshold)},
                     {"at_least", t.at_least},
                     {"pass", t.pass ? json(*t.pass) : json(nullptr)}});
  return j;
}

json profile_json(const report_context& c) {
  const daemon::model_section* m = nullptr;
  for (auto& x : c.cfg.models)
    if (x.name == c.model)
      m = &x;
  json j;
  j["source"] = c.profile_source;
  if (!c.profile_toml.empty())
    j["toml"] = c.profile_toml;
  j["model"] = c.model;
  if (m) {
    j["backend"] = m->backend.kind;
    const auto& s = m->backend.sim;
    j["sim"] = json{{"slots", s.slots},
                    {"max_context", s.max_context},
                    {"max_prefill_chunk", s.max_prefill_chunk},
                    {"snapshot_bytes", s.snapshot_bytes},
                    {"snapshot",
                     s.extent == backends::snapshot_extent::full_slot ? "full" : "used"},
                    {"step_base_ms", json_figure(s.step_base_ms)},
                    {"step_per_token_ms", json_figure(s.step_per_token_ms)},
                    {"dump_min_ms", json_figure(s.dump_min_ms)},
                    {"dump_max_ms", json_figure(s.dump_max_ms)},
                    {"load_min_ms", json_figure(s.load_min_ms)},
                    {"load_max_ms", json_figure(s.load_max_ms)},
                    {"time_scale", json_figure(s.time_scale)},
                    {"overlap", backends::to_string(s.overlap)},
                    {"seed", s.seed},
                    {"eos_rate", json_figure(s.eos_rate)}};
  }
  const auto& p = c.cfg.scheduler;
  j["scheduler"] = json{{"quantum_tokens", p.quantum_steps},
                        {"levels", p.levels},
                        {"spare_slots", p.spare_slots},
                        {"max_step_tokens", p.max_step_tokens},
                        {"batch_prefill_yields", p.batch_prefill_yields},
                        {"aging_steps", p.aging_steps},
                        {"ewma_alpha", json_figure(p.ewma_alpha)}};
  j["store_max_bytes"] = c.cfg.store.max_bytes;
  j["store_warm_pool_bytes"] = c.cfg.store.warm_pool_bytes;
  j["worker_threads"] = c.cfg.daemon.worker_threads;
  j["time_scale"] = json_figure(c.time_scale);
  return j;
}

json workload_json(const report_context& c) {
  json j;
  j["source"] = c.workload_source;
  if (!c.trace_path.empty())
    j["trace"] = c.trace_path;
  if (!c.synthetic_desc.empty())
    j["synthetic"] = c.synthetic_desc;
  if (!c.trace_format.empty())
    j["trace_format"] = c.trace_format;
  j["input_scale"] = json_figure(c.input_scale);
  if (c.conversations) {
    const auto& cv = *c.conversations;
    j["conversations"] = json{{"rows", cv.rows},
                              {"conversations", cv.conversations},
                              {"kept", cv.kept_conversations},
                              {"sample", json_figure(cv.sample)},
                              {"block_tokens", cv.block_tokens},
                              {"users", cv.users},
                              {"turns", cv.turns}};
  }
  j["requests"] = c.requests;
  j["clamped"] = c.clamped;
  j["prompt_tokens"] = c.prompt_tokens_total;
  j["achievable_reused_tokens"] = c.achievable_reused_tokens;
  j["reusable_requests"] = c.reusable_requests;
  j["interactive"] = c.interactive;
  j["interactive_share"] = json_figure(c.interactive_share);
  j["seed"] = c.seed;
  j["load"] = c.load ? json_figure(*c.load) : json(nullptr);
  j["rate_scale"] = json_figure(c.rate_scale);
  j["offered_load"] = json_figure(c.offered_load);
  j["capacity_req_s"] = json_figure(c.capacity_req_s);
  j["capacity_tok_s"] = json_figure(c.capacity_tok_s);
  j["work_s"] = json_figure(c.work_s);
  auto bound = [](const slo_bound& b) {
    return json{{"ttft_ms", json_figure(b.ttft_ms)}, {"tpot_ms", json_figure(b.tpot_ms)}};
  };
  j["slo"] = json{{"interactive", bound(c.slo.interactive)},
                  {"batch", bound(c.slo.batch)},
                  {"source", c.slo_defaults ? "defaults (docs/benchmarks.md)" : "command line"}};
  j["arrival_span_s"] = json_figure(c.arrival_span_s);
  j["prompt_tokens_mean"] = json_figure(c.prompt_tokens_mean);
  j["output_tokens_mean"] = json_figure(c.output_tokens_mean);
  return j;
}

/// One reuse policy's (or one model's) figures: the documented reuse fields.
json reuse_json(const reuse_summary& s) {
  return json{{"throughput_tok_s", json_figure(s.throughput_tok_s)},
              {"ttft_p50_ms", json_figure(s.ttft_p50_ms)},
              {"ttft_p99_ms", json_figure(s.ttft_p99_ms)},
              {"ttft_p50_reusable_ms", json_figure(s.ttft_p50_reusable_ms)},
              {"ttft_p99_reusable_ms", json_figure(s.ttft_p99_reusable_ms)},
              {"prompt_tokens", s.prompt_tokens},
              {"reused_tokens", s.reused_tokens},
              {"achievable_reused_tokens", s.achievable_reused_tokens},
              {"prefill_tokens", s.prefill_tokens},
              {"loads", s.loads},
              {"dumps", s.dumps},
              {"peak_store_bytes", s.peak_store_bytes},
              {"retained_evictions", s.retained_evictions},
              {"held_turns", s.held_turns},
              {"held_ms_mean", json_figure(s.held_ms_mean)},
              {"completed", s.completed},
              {"failed", s.failed}};
}

json host_time_json(const transfer_host_time& t) {
  return json{{"time_unit", "wall ms"},
              {"snapshot_bytes", t.snapshot_bytes},
              {"dumps", t.dumps},
              {"loads", t.loads},
              {"dump_ms", json_figure(t.dump_ms)},
              {"load_ms", json_figure(t.load_ms)},
              {"dump_modeled_ms", json_figure(t.dump_modeled_ms)},
              {"load_modeled_ms", json_figure(t.load_modeled_ms)},
              {"transfer_ms", json_figure(t.transfer_ms)},
              {"transfer_modeled_ms", json_figure(t.transfer_modeled_ms)},
              {"beyond_model_ms", json_figure(t.beyond_model_ms)},
              {"store_commit_ms_per_dump", json_figure(t.commit_ms)},
              {"store_seal_ms_per_dump", json_figure(t.seal_ms)},
              {"store_verify_ms_per_load", json_figure(t.verify_ms)},
              {"store_punch_ms_per_transfer", json_figure(t.punch_ms)},
              {"committed_on_demand_bytes", t.committed_on_demand_bytes},
              {"punched_bytes", t.punched_bytes},
              {"warm_pool_bytes", t.pool_target_bytes},
              {"peak_store_bytes", t.peak_used_bytes},
              {"peak_committed_bytes", t.peak_committed_bytes}};
}

} // namespace

json report_json(const bench_report& r) {
  json j;
  j["tool"] = "kvlane-bench";
  j["version"] = KVLANE_VERSION;
  j["command_line"] = r.ctx.command_line;
  j["path"] = r.ctx.path;
  j["time_unit"] = "simulated ms (wall ms x time_scale); rates per simulated second";
  j["profile"] = profile_json(r.ctx);
  j["workload"] = workload_json(r.ctx);
  j["modes"] = modes_json(r.modes, r.include_timeline);
  if (!r.ipc_modes.empty())
    j["ipc_modes"] = modes_json(r.ipc_modes, r.include_timeline);
  j["ratios"] = ratios_json(r.ratios);
  j["targets"] = targets_json(r.targets);
  if (!r.devices.empty()) {
    auto& devices = j["devices"] = json::object();
    for (auto& d : r.devices)
      devices[std::string{backends::to_string(d.overlap)}] =
        json{{"assumption", d.assumption},
             {"modes", modes_json(d.modes)},
             {"targets", targets_json(d.targets)}};
  }
  if (!r.load_sweep.empty()) {
    auto& points = j["load_sweep"] = json::array();
    for (auto& p : r.load_sweep)
      points.push_back(json{{"load", json_figure(p.load)},
                            {"offered_load", json_figure(p.offered_load)},
                            {"modes", modes_json(p.modes)}});
  }
  if (!r.reuse.empty()) {
    auto& reuse = j["reuse"] = json::object();
    for (auto& s : r.reuse) {
      auto& p = reuse[s.policy] = reuse_json(s);
      for (auto& [name, t] : r.host_times)
        if (name == s.policy)
          p["host_per_transfer"] = host_time_json(t);
    }
  }
  if (!r.splits.empty()) {
    auto& split = j["store_split"] = json::object();
    split["burst_s"] = json_figure(r.ctx.burst_s);
    split["policy"] = r.ctx.split_policy;
    const split_summary* shared = nullptr;
    const split_summary* fixed = nullptr;
    for (auto& s : r.splits) {
      (s.split == store_split::shared ? shared : fixed) = &s;
      json models = json::object();
      for (auto& m : s.models) {
        auto x = reuse_json(m.figures);
        x["requests"] = m.requests;
        x["conversations"] = m.conversations;
        x["offered_load"] = json_figure(m.offered_load);
        x["store_floor_bytes"] = m.floor_bytes;
        x["store_cap_bytes"] = m.cap_bytes;
        models[m.figures.policy] = std::move(x);
      }
      auto total = reuse_json(s.total);
      split[std::string{to_string(s.split)}] =
        json{{"models", std::move(models)}, {"both", std::move(total)}};
    }
    if (shared && fixed) {
      const auto q = shared_vs_static(*shared, *fixed);
      split["shared_vs_static"] = json{{"reused_tokens", json_figure(q.reused_tokens)},
                                       {"ttft_p50_reusable", json_figure(q.ttft_p50_reusable)},
                                       {"ttft_p50", json_figure(q.ttft_p50)},
                                       {"throughput", json_figure(q.throughput)}};
    }
  }
  if (!r.quantum_sweep.empty()) {
    auto& points = j["quantum_sweep"] = json::array();
    for (auto& p : r.quantum_sweep)
      points.push_back(json{{"quantum_tokens", p.quantum_tokens}, {"modes", modes_json(p.modes)}});
  }
  return j;
}

std::string to_json(const bench_report& r) {
  // Replace, not throw, should a path or a name carry invalid UTF-8.
  return report_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

} // namespace kvlane::tools::bench
