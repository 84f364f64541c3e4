#include "tools/bench/race_run.hpp"

#include "tools/admin_connection.hpp"
#include "tools/bench/admin_status.hpp"
#include "tools/bench/completion_stream.hpp"
#include "tools/bench/http_driver.hpp"
#include "tools/bench/ipc_driver.hpp"
#include "tools/bench/race_report.hpp"
#include "tools/bench/race_server.hpp"
#include "tools/bench/race_summary.hpp"
#include "tools/bench/race_workloads.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int fail(int code, std::string_view message) {
  std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

expected<void, std::string> write_file(const std::string& path, const std::string& text) {
  std::error_code ec;
  if (auto parent = std::filesystem::path{path}.parent_path(); !parent.empty())
    std::filesystem::create_directories(parent, ec);
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  out.flush();
  if (!out)
    return unexpected(fmt::format("cannot write '{}'", path));
  return {};
}

std::chrono::milliseconds run_bound(const bench_options& o) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000.0));
}

/// llama-server's /v1/models meta.n_params.
std::optional<std::uint64_t> model_params(http_client& client) {
  http_request req;
  req.path = "/v1/models";
  auto r = client.fetch(req, clock::now() + 10s);
  if (!r || r->head.status != 200)
    return std::nullopt;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
    return std::nullopt;
  const auto& m = j["data"][0];
  if (!m.contains("meta") || !m["meta"].is_object())
    return std::nullopt;
  const auto& n = m["meta"]["n_params"];
  return n.is_number_unsigned() ? std::optional<std::uint64_t>(n.get<std::uint64_t>()) : std::nullopt;
}

/// One short unmeasured request, so that no measured request pays a server's
/// first-use costs (buffers, graph). Returns its error, empty when it completed.
std::string warm_up(const http_endpoint& ep, server_kind kind, const std::string& model) {
  http_client client{ep, 1};
  completion_request cr;
  cr.model = model;
  trace_request probe;
  probe.prompt_tokens = 8;
  cr.prompt = request_prompt(probe, 999999);
  cr.max_tokens = 4;
  http_request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = completion_body(kind, cr);
  std::string body;
  auto r = client.exchange(req, clock::now() + 120s, nullptr,
                           [&](std::string_view b) { body.append(b.substr(0, 4096)); });
  if (!r)
    return r.error();
  if (r->status != 200)
    return fmt::format("HTTP {}: {}", r->status, error_message_of(body));
  return {};
}

class race {
public:
  race(const bench_options& o, std::function<void(std::string_view)> progress)
    : o_(o), progress_(std::move(progress)) {}

  /// Starts `kind`, runs `w` on it, stops it.
  expected<http_run_result, std::string> run_once(server_kind kind, const race_workload& w) {
    race_server_options so;
    so.kind = kind;
    so.exe = kind == server_kind::kvlane ? kvlaned_ : o_.race.llama_server_path;
    so.settings = o_.race.settings;
    so.kvlane_config = o_.race.kvlane_config;
    so.log_level = o_.log_level;
    so.progress = progress_;
    auto server = race_server::start(so);
    if (!server)
      return unexpected(std::move(server).error());
    auto& s = **server;
    if (kind == server_kind::llama_server && !params_) {
      http_client c{s.endpoint(), 1};
      params_ = model_params(c);
    }
    if (auto err = warm_up(s.endpoint(), kind, o_.model); !err.empty())
      notes_.push_back(fmt::format("{}: {}: the warm-up request failed: {}", w.name, to_string(kind), err));
    http_run_options ro;
    ro.endpoint = s.endpoint();
    ro.kind = kind;
    ro.model = o_.model;
    ro.timeout = run_bound(o_);
    ro.progress = progress_;
    ro.label = fmt::format("{} on {}", w.name, to_string(kind));
    progress_(fmt::format("{}: {} requests", ro.label, w.requests.size()));
    auto run = run_http(ro, w.requests);
    if (kind == server_kind::kvlane && w.trace)
      notes_.push_back(scheduler_note(s, w.name));
    const bool alive = s.running();
    auto stopped = s.stop();
    if (!run)
      return unexpected(std::move(run).error());
    if (!alive)
      notes_.push_back(fmt::format("{}: {} exited during the run", w.name, to_string(kind)));
    else if (!stopped)
      notes_.push_back(fmt::format("{}: stopping {}: {}", w.name, to_string(kind), stopped.error()));
    else if (*stopped != 0)
      notes_.push_back(fmt::format("{}: {} exited with status {}", w.name, to_string(kind), *stopped));
    if (run->timed_out)
      notes_.push_back(fmt::format("{}: {} did not finish within the run's bound", w.name,
                                   to_string(kind)));
    return run;
  }

  /// What kvlaned's scheduler did during a trace workload (its admin `status`): where the
  /// device's time went besides steps, for reading a throughput figure.
  std::string scheduler_note(const race_server& s, std::string_view workload) const {
    using namespace std::chrono_literals;
    auto admin = admin_connection::open(s.admin_socket());
    if (!admin)
      return fmt::format("{}: kvlane's status: {}", workload, admin.error().message);
    auto reply = admin->command("status", 10s);
    auto st = reply ? stats_from_status(*reply, o_.model)
                    : expected<actors::scheduler_stats, std::string>{unexpected(reply.error().message)};
    if (!st)
      return fmt::format("{}: kvlane's status: {}", workload, st.error());
    return fmt::format("{}: kvlane's scheduler: {} steps ({:.0f} ms busy, {:.2f} tokens generated "
                       "per step), {} preemptions ({} swaps, {} recomputes), {:.0f} ms of transfers",
                       workload, st->steps, st->step_busy_ms,
                       st->steps ? double(st->tokens_generated) / double(st->steps) : 0.0,
                       st->preemptions, st->swaps, st->recomputes, st->transfer_ms);
  }

  /// Every server of the race on `w`, in rounds, each server's rounds pooled
  /// into one figure. A trace workload runs whole in each of --trace-rounds
  /// rounds; a one-stream workload (decode, prefill) runs one request per
  /// round. Each round starts each server afresh, and the servers' order
  /// turns round every other round (A B, B A, ...), so that whatever else
  /// slows the machine for a while, and whoever runs second, favours neither.
  expected<std::vector<std::pair<server_kind, side_summary>>, std::string>
  run_sides(const race_workload& w) {
    const auto& servers = o_.race.servers;
    std::vector<http_run_result> runs(servers.size());
    const std::size_t rounds = w.trace ? o_.race.trace_rounds : w.requests.size();
    for (std::size_t k = 0; k < rounds; ++k) {
      race_workload part;
      const race_workload* run_of = &w;
      if (!w.trace || rounds > 1) {
        part = w;
        if (!w.trace) {
          part.requests = {w.requests[k]};
          part.requests.front().previous_turn = -1;
        }
        if (rounds > 1)
          part.name = fmt::format("{} {}/{}", w.name, k + 1, rounds);
        run_of = &part;
      }
      for (std::size_t i = 0; i < servers.size(); ++i) {
        const std::size_t s = k % 2 == 0 ? i : servers.size() - 1 - i;
        auto run = run_once(servers[s], *run_of);
        if (!run)
          return unexpected(fmt::format("{} on {}: {}", run_of->name, to_string(servers[s]), run.error()));
        append_run(runs[s], std::move(*run));
      }
    }
    std::vector<std::pair<server_kind, side_summary>> out;
    for (std::size_t s = 0; s < servers.size(); ++s) {
      auto summary = summarize_side(runs[s]);
      progress_(fmt::format("{} on {}: {} completed, {} failed, {:.1f} output tok/s, TTFT p50 {:.0f} ms",
                            w.name, to_string(servers[s]), summary.completed, summary.failed,
                            summary.output_tok_s, summary.ttft_p50_ms));
      out.emplace_back(servers[s], std::move(summary));
    }
    return out;
  }

  int run() {
    const auto& r = o_.race;
    const bool has_kvlane = std::find(r.servers.begin(), r.servers.end(), server_kind::kvlane)
                            != r.servers.end();
    kvlaned_ = o_.kvlaned_path.empty() ? default_kvlaned_path() : o_.kvlaned_path;
    if (has_kvlane && (kvlaned_.empty() || ::access(kvlaned_.c_str(), X_OK) != 0))
      return fail(exit_code::unavailable,
                  fmt::format("--race-llama: no executable kvlaned at '{}'; build it or pass "
                              "--kvlaned PATH",
                              kvlaned_));
    if (std::find(r.servers.begin(), r.servers.end(), server_kind::llama_server) != r.servers.end()
        && ::access(r.llama_server_path.c_str(), X_OK) != 0)
      return fail(exit_code::unavailable,
                  fmt::format("--race-llama: no executable llama-server at '{}' (scripts/llama-cpp "
                              "builds one)",
                              r.llama_server_path));
    if (!r.settings.gguf.empty() && ::access(r.settings.gguf.c_str(), R_OK) != 0)
      return fail(exit_code::no_input, fmt::format("--gguf: cannot read '{}'", r.settings.gguf));

    race_report report;
    report.command = o_.command_line;
    report.machine = this_machine();
    report.settings = r.settings;
    report.model.gguf = r.settings.gguf;
    report.model.name = o_.model;
    if (!r.settings.gguf.empty()) {
      std::error_code ec;
      if (auto size = std::filesystem::file_size(r.settings.gguf, ec); !ec)
        report.model.size_bytes = size;
    }
    report.load = o_.load;
    report.rate_scale = o_.rate_scale;

    std::vector<race_workload> workloads;
    for (const auto& name : r.workloads) {
      auto w = build_race_workload(o_, name);
      if (!w)
        return fail(w.error().exit_code, w.error().message);
      workloads.push_back(std::move(*w));
    }
    const server_kind reference = r.servers.front();
    std::optional<race_calibration> cal;
    race_calibration measured{0, 0, std::string{to_string(reference)}};
    for (auto& w : workloads) {
      if (w.trace && o_.load && !cal) {
        if (measured.decode_tok_s <= 0 || measured.prefill_tok_s <= 0)
          if (auto ok = calibrate(reference, measured); !ok)
            return fail(exit_code::other, ok.error());
        cal = measured;
        report.calibration = cal;
      }
      scale_race_arrivals(w, cal, o_.load, o_.rate_scale, r.settings.parallel, r.settings.batch);
      race_workload_result res;
      res.name = w.name;
      res.description = w.description;
      if (w.trace && r.trace_rounds > 1)
        res.description += fmt::format("; {} rounds per server, pooled", r.trace_rounds);
      res.requests = w.requests.size();
      res.offered_load = w.offered_load;
      res.arrival_scale = w.arrival_scale;
      auto sides = run_sides(w);
      if (!sides)
        return fail(exit_code::other, sides.error());
      for (auto& [kind, side] : *sides) {
        if (kind == reference && w.name == "decode")
          measured.decode_tok_s = side.decode_tok_s;
        if (kind == reference && w.name == "prefill")
          measured.prefill_tok_s = side.prefill_tok_s;
        (kind == server_kind::kvlane ? res.kvlane : res.llama) = std::move(side);
      }
      report.workloads.push_back(std::move(res));
    }
    report.model.params = params_;
    std::vector<race_sides> sides;
    for (const auto& w : report.workloads)
      sides.push_back(race_sides{w.name, w.kvlane, w.llama});
    report.targets = race_targets(sides);
    report.notes = notes_;
    std::size_t kvlane_eos = 0;
    for (const auto& w : report.workloads)
      kvlane_eos += w.kvlane ? w.kvlane->stopped_early : 0;
    if (kvlane_eos > 0)
      report.notes.push_back(fmt::format(
        "{} kvlane requests ended at an end-of-text token before max_tokens: kvlaned's HTTP API "
        "has no ignore_eos (llama-server's requests set it)",
        kvlane_eos));
    const auto text = format_race_report(report);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (!o_.json_out.empty()) {
      if (auto ok = write_file(o_.json_out, race_report_json(report)); !ok)
        return fail(exit_code::other, ok.error());
      progress_("wrote " + o_.json_out);
    }
    return 0;
  }

private:
  /// The first server's one-stream speeds when the decode and prefill
  /// workloads were not raced: one short request of each, not reported.
  expected<void, std::string> calibrate(server_kind kind, race_calibration& c) {
    auto o = o_;
    o.race.repeats = 1;
    o.race.decode_tokens = std::min<std::uint32_t>(o.race.decode_tokens, 64);
    for (std::string_view name : {"decode", "prefill"}) {
      if ((name == "decode" && c.decode_tok_s > 0) || (name == "prefill" && c.prefill_tok_s > 0))
        continue;
      auto w = build_race_workload(o, name);
      if (!w)
        return unexpected(w.error().message);
      w->name = std::string{"calibration "} + std::string{name};
      auto run = run_once(kind, *w);
      if (!run)
        return unexpected(run.error());
      const auto side = summarize_side(*run);
      (name == "decode" ? c.decode_tok_s : c.prefill_tok_s) =
        name == "decode" ? side.decode_tok_s : side.prefill_tok_s;
    }
    if (!(c.decode_tok_s > 0) || !(c.prefill_tok_s > 0))
      return unexpected(fmt::format("cannot calibrate the arrival rate: {} gave no decode or prefill "
                                    "speed (its requests failed); give --rate-scale X instead",
                                    c.server));
    return {};
  }

  const bench_options& o_;
  std::function<void(std::string_view)> progress_;
  std::string kvlaned_;
  std::optional<std::uint64_t> params_;
  std::vector<std::string> notes_;
};

} // namespace

int run_race(const bench_options& o) {
  auto progress = [&](std::string_view line) {
    if (!o.quiet)
      std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  race r{o, progress};
  return r.run();
}

int run_http_path(const bench_options& o) {
  auto progress = [&](std::string_view line) {
    if (!o.quiet)
      std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto ep = parse_http_url(o.race.url);
  if (!ep)
    return fail(exit_code::usage, ep.error());
  auto w = build_flag_workload(o);
  if (!w)
    return fail(w.error().exit_code, w.error().message);
  progress(w->description);
  http_run_options ro;
  ro.endpoint = *ep;
  ro.kind = o.race.server;
  ro.model = o.model;
  ro.timeout = run_bound(o);
  ro.progress = progress;
  ro.label = std::string{to_string(o.race.server)};
  auto run = run_http(ro, w->requests);
  if (!run)
    return fail(exit_code::other, run.error());

  race_report report;
  report.race = false;
  report.command = o.command_line;
  report.machine = this_machine();
  report.single = o.race.server;
  report.url = o.race.url;
  report.model.name = o.model;
  report.rate_scale = o.rate_scale;
  race_workload_result res;
  res.name = w->name;
  res.description = w->description;
  res.requests = w->requests.size();
  res.arrival_scale = w->arrival_scale;
  (o.race.server == server_kind::kvlane ? res.kvlane : res.llama) = summarize_side(*run);
  report.workloads.push_back(std::move(res));
  if (run->timed_out)
    report.notes.push_back("the run did not finish within its bound (--timeout)");
  const auto text = format_race_report(report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    if (auto ok = write_file(o.json_out, race_report_json(report)); !ok)
      return fail(exit_code::other, ok.error());
    progress("wrote " + o.json_out);
  }
  return 0;
}

} // namespace kvlane::tools::bench
