#include "tools/bench/race_report.hpp"

#include "tools/json_figure.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <thread>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::ordered_json;
using tools::json_figure;

std::string figure(double x, int decimals = 1) {
  if (!std::isfinite(x))
    return "-";
  return fmt::format("{:.{}f}", x, decimals);
}

std::string ratio_text(double kv, double ll) {
  if (!std::isfinite(kv) || !std::isfinite(ll) || ll <= 0)
    return "-";
  return fmt::format("{:.2f}x", kv / ll);
}

json side_json(const side_summary& s) {
  json j;
  j["output_tok_s"] = json_figure(s.output_tok_s);
  j["ttft_p50_ms"] = json_figure(s.ttft_p50_ms);
  j["ttft_p99_ms"] = json_figure(s.ttft_p99_ms);
  j["ttft_p50_reusable_ms"] = json_figure(s.ttft_p50_reusable_ms);
  j["ttft_p99_interactive_ms"] = json_figure(s.ttft_p99_interactive_ms);
  j["prefill_tokens"] = s.prefill_tokens;
  j["reused_tokens"] = s.reused_tokens;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  json failures = json::array();
  for (const auto& f : s.failures)
    failures.push_back({{"status", f.status}, {"message", f.message}, {"count", f.count}});
  j["failures"] = std::move(failures);
  return j;
}

/// The sides of a workload present in the report, in column order.
std::vector<std::pair<std::string_view, const side_summary*>> columns(const race_workload_result& w) {
  std::vector<std::pair<std::string_view, const side_summary*>> out;
  if (w.kvlane)
    out.emplace_back("kvlane", &*w.kvlane);
  if (w.llama)
    out.emplace_back("llama-server", &*w.llama);
  return out;
}

void table(std::string& out, const race_workload_result& w) {
  const auto cols = columns(w);
  const bool both = cols.size() == 2;
  out += fmt::format("\n== {} ==\n{}\n", w.name, w.description);
  if (w.offered_load > 0)
    out += fmt::format("offered load {:.2f} of the calibrated capacity (trace time x {:.3g})\n",
                       w.offered_load, w.arrival_scale);
  else if (w.arrival_scale != 1.0)
    out += fmt::format("trace time x {:.3g}\n", w.arrival_scale);
  if (cols.empty()) {
    out += "  (not run)\n";
    return;
  }
  out += fmt::format("  {:<34}", "");
  for (const auto& [name, s] : cols)
    out += fmt::format("{:>14}", name);
  if (both)
    out += fmt::format("{:>10}", "kv/llama");
  out += '\n';
  auto row = [&](std::string_view label, auto get, int decimals, bool ratio) {
    out += fmt::format("  {:<34}", label);
    for (const auto& c : cols)
      out += fmt::format("{:>14}", figure(get(*c.second), decimals));
    if (both && ratio)
      out += fmt::format("{:>10}", ratio_text(get(*cols[0].second), get(*cols[1].second)));
    out += '\n';
  };
  auto num = [](auto member) {
    return [member](const side_summary& s) { return static_cast<double>(s.*member); };
  };
  const auto& first = *cols.front().second;
  row("requests completed", num(&side_summary::completed), 0, false);
  row("requests failed", num(&side_summary::failed), 0, false);
  row("output tok/s", num(&side_summary::output_tok_s), 1, true);
  if (w.name == "decode")
    row("decode tok/s (one stream)", num(&side_summary::decode_tok_s), 1, true);
  if (w.name == "prefill")
    row("prefill tok/s (one stream)", num(&side_summary::prefill_tok_s), 1, true);
  row("TTFT p50 ms", num(&side_summary::ttft_p50_ms), 0, true);
  row("TTFT p99 ms", num(&side_summary::ttft_p99_ms), 0, true);
  if (first.reusable > 0)
    row(fmt::format("TTFT p50 ms, reusable prefix ({})", first.reusable),
        num(&side_summary::ttft_p50_reusable_ms), 0, true);
  if (first.interactive > 0 && first.interactive < first.requests)
    row(fmt::format("TTFT p99 ms, interactive ({})", first.interactive),
        num(&side_summary::ttft_p99_interactive_ms), 0, true);
  row("requests in flight at most", num(&side_summary::peak_in_flight), 0, false);
  if (first.reusable > 0)
    row("conversations live at most", num(&side_summary::peak_live_conversations), 0, false);
  row("prompt tokens prefilled", num(&side_summary::prefill_tokens), 0, false);
  row("prompt tokens reused", num(&side_summary::reused_tokens), 0, false);
  row("output tokens", num(&side_summary::output_tokens), 0, false);
  row("ended at an end-of-text token", num(&side_summary::stopped_early), 0, false);
  for (const auto& [name, s] : cols)
    for (const auto& f : s->failures)
      out += fmt::format("  {} failed {} x: {}{}\n", name, f.count,
                         f.status ? fmt::format("HTTP {}: ", f.status) : std::string{}, f.message);
}

} // namespace

race_machine this_machine() {
  race_machine m;
  m.cores = std::thread::hardware_concurrency();
  std::ifstream cpu{"/proc/cpuinfo"};
  for (std::string line; std::getline(cpu, line);)
    if (line.rfind("model name", 0) == 0) {
      if (auto colon = line.find(':'); colon != std::string::npos)
        m.cpu = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  std::ifstream mem{"/proc/meminfo"};
  for (std::string line; std::getline(mem, line);)
    if (line.rfind("MemTotal:", 0) == 0) {
      m.memory_bytes = std::stoull(line.substr(9)) * 1024;
      break;
    }
  return m;
}

std::string format_race_report(const race_report& r) {
  std::string out;
  if (r.race)
    out += fmt::format("kvlane vs llama-server over HTTP: {} ({}{}), {} threads ({} batch), {} "
                       "slots x {} tokens, batch {}, KV {}, flash attention {}, host cache {} MiB; "
                       "{} cores{}\n",
                       r.model.gguf, r.model.name,
                       r.model.params ? fmt::format(", {:.0f}M params",
                                                    static_cast<double>(*r.model.params) / 1e6)
                                      : std::string{},
                       r.settings.threads, r.settings.threads_batch, r.settings.parallel,
                       r.settings.ctx_per_seq, r.settings.batch, r.settings.kv_type,
                       r.settings.flash_attn, r.settings.cache_ram_mib, r.machine.cores,
                       r.machine.cpu.empty() ? std::string{} : " (" + r.machine.cpu + ")");
  else
    out += fmt::format("{} at {} over HTTP, model '{}'\n", to_string(r.single), r.url, r.model.name);
  if (r.calibration)
    out += fmt::format("arrivals: load {:.2f} against the capacity implied by {}'s one-stream "
                       "speeds (decode {:.1f} tok/s, prefill {:.1f} tok/s, {} slots)\n",
                       r.load.value_or(0), r.calibration->server, r.calibration->decode_tok_s,
                       r.calibration->prefill_tok_s, r.settings.parallel);
  else if (r.rate_scale)
    out += fmt::format("arrivals: trace time / {:g}\n", *r.rate_scale);
  for (const auto& w : r.workloads)
    table(out, w);
  if (!r.targets.empty()) {
    out += "\ntargets (kvlane / llama-server; printed, not asserted):\n";
    for (const auto& t : r.targets)
      out += fmt::format("  {:<9} {:<28} {} {:.2f}x  {:>6}  (kvlane {}, llama-server {})  {}\n",
                         t.workload, t.label, t.at_least ? ">=" : "<=", t.bound,
                         std::isfinite(t.ratio) ? fmt::format("{:.2f}x", t.ratio) : "-",
                         figure(t.kvlane), figure(t.llama),
                         std::isfinite(t.ratio) ? (t.met ? "PASS" : "MISS") : "n/a");
  }
  for (const auto& n : r.notes)
    out += "note: " + n + "\n";
  return out;
}

std::string race_report_json(const race_report& r) {
  json j;
  j["command"] = r.command;
  j["machine"] = {{"cores", r.machine.cores},
                  {"cpu", r.machine.cpu},
                  {"memory_bytes", r.machine.memory_bytes}};
  json model;
  model["gguf"] = r.model.gguf;
  model["name"] = r.model.name;
  model["params"] = r.model.params ? json(*r.model.params) : json(nullptr);
  model["size_bytes"] = r.model.size_bytes ? json(*r.model.size_bytes) : json(nullptr);
  j["model"] = std::move(model);
  json settings;
  if (r.race) {
    const auto& s = r.settings;
    settings = {{"threads", s.threads},         {"threads_batch", s.threads_batch},
                {"parallel", s.parallel},       {"ctx_per_seq", s.ctx_per_seq},
                {"batch", s.batch},             {"kv_type", s.kv_type},
                {"flash_attn", s.flash_attn},   {"cache_ram_mib", s.cache_ram_mib}};
  } else {
    settings = {{"server", to_string(r.single)}, {"url", r.url}};
  }
  settings["load"] = r.load ? json_figure(*r.load) : json(nullptr);
  settings["rate_scale"] = r.rate_scale ? json_figure(*r.rate_scale) : json(nullptr);
  settings["calibration"] =
    r.calibration ? json{{"server", r.calibration->server},
                         {"decode_tok_s", json_figure(r.calibration->decode_tok_s)},
                         {"prefill_tok_s", json_figure(r.calibration->prefill_tok_s)}}
                  : json(nullptr);
  json described = json::object();
  for (const auto& w : r.workloads)
    described[w.name] = {{"description", w.description},
                         {"requests", w.requests},
                         {"offered_load", w.offered_load > 0 ? json_figure(w.offered_load)
                                                             : json(nullptr)},
                         {"arrival_scale", json_figure(w.arrival_scale)}};
  settings["workloads"] = std::move(described);
  j["settings"] = std::move(settings);
  json workloads = json::object();
  for (const auto& w : r.workloads) {
    json sides = json::object();
    if (w.kvlane)
      sides["kvlane"] = side_json(*w.kvlane);
    if (w.llama)
      sides["llama-server"] = side_json(*w.llama);
    workloads[w.name] = std::move(sides);
  }
  j["workloads"] = std::move(workloads);
  json targets = json::array();
  for (const auto& t : r.targets)
    targets.push_back({{"workload", t.workload},
                       {"metric", to_string(t.metric)},
                       {"label", t.label},
                       {"bound", json_figure(t.bound)},
                       {"at_least", t.at_least},
                       {"kvlane", json_figure(t.kvlane)},
                       {"llama-server", json_figure(t.llama)},
                       {"ratio", json_figure(t.ratio)},
                       {"met", t.met}});
  j["targets"] = std::move(targets);
  j["notes"] = r.notes;
  return j.dump(2) + "\n";
}

} // namespace kvlane::tools::bench
