#include "tools/bench/restart_driver.hpp"

#include "common/elapsed.hpp"
#include "common/model_name.hpp"
#include "common/temp_dir.hpp"
#include "tools/bench/prometheus_text.hpp"
#include "tools/bench/request_clock.hpp"
#include "tools/bench/restart_daemon.hpp"
#include "tools/bench/run_collector.hpp"

#include <kvlane/client.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <memory>
#include <regex>
#include <thread>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// How one half of the requests went.
struct half_end {
  std::size_t submitted = 0;
  bool timed_out = false;
  clock::time_point last_release; ///< when the last of them was sent
  clock::time_point last_end;     ///< when the last of them ended
};

/// Sends requests [first, last) of `all` through `d` at start + arrival /
/// ts (held turns at their previous turn's end), waits for every accepted one
/// to end until `deadline`, and records them into `outcomes` (same indices as
/// `all`). A previous turn before `first` has ended already: it holds nothing.
half_end drive_half(restart_daemon& d, const std::string& model,
                    std::span<const trace_request> all, std::size_t first, std::size_t last,
                    clock::time_point start, double ts, clock::time_point deadline,
                    std::vector<request_outcome>& outcomes, double& max_submit_lag_ms) {
  std::vector<trace_request> part(all.begin() + static_cast<std::ptrdiff_t>(first),
                                  all.begin() + static_cast<std::ptrdiff_t>(last));
  for (auto& r : part)
    r.previous_turn = r.previous_turn >= static_cast<std::int32_t>(first)
                        ? r.previous_turn - static_cast<std::int32_t>(first)
                        : -1;
  std::vector<request_outcome> local(outcomes.begin() + static_cast<std::ptrdiff_t>(first),
                                     outcomes.begin() + static_cast<std::ptrdiff_t>(last));
  auto col = std::make_shared<run_collector>();
  col->outcomes = &local;
  col->time_scale = ts;
  col->start = start;
  col->last_end = start;
  col->gate = std::make_shared<turn_gate>(part, start, ts);
  half_end out;
  out.last_release = start;
  while (const auto next = col->gate->next(deadline)) {
    const std::size_t i = next->index;
    const auto& r = part[i];
    const auto now = clock::now();
    max_submit_lag_ms = std::max(max_submit_lag_ms, ms_between(next->due, now));
    client::request req;
    req.model = model;
    req.prio = r.interactive ? client::priority::interactive : client::priority::batch;
    req.prompt_tokens = prompt_of(r, static_cast<std::uint32_t>(first + i));
    req.sampling.max_tokens = r.output_tokens;
    req.sampling.stop_at_eos = false;
    auto id = d.connection(r.interactive).submit(req, request_callback(col, i, now));
    if (col->sent(i, r, *next,
                  id ? std::string{}
                     : fmt::format("submit failed: {} ({})", id.error().message,
                                   client::to_string(id.error().code))))
      ++out.submitted;
    out.last_release = now;
  }
  {
    std::unique_lock lock{col->mutex};
    out.timed_out =
      !col->cv.wait_until(lock, deadline, [&] { return col->ended >= out.submitted; });
    out.last_end = col->last_end;
    col->outcomes = nullptr; // a late end records nothing: `local` goes away
  }
  std::copy(local.begin(), local.end(), outcomes.begin() + static_cast<std::ptrdiff_t>(first));
  return out;
}

/// One request to `model` on `d`, waited for: submit to end, wall ms. Fails
/// unless it completes.
expected<double, std::string> one_request(restart_daemon& d, const std::string& model,
                                          std::chrono::milliseconds timeout) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  client::request req;
  req.model = model;
  req.prio = client::priority::interactive;
  const auto prompt = synthetic_prompt(0xffffu, 64);
  req.prompt_tokens.assign(prompt.begin(), prompt.end());
  req.sampling.max_tokens = 8;
  req.sampling.stop_at_eos = false;
  const auto sent = clock::now();
  auto id = d.connection(true).submit(req, [done, set = false](const client::event& ev) mutable {
    if (set || (!ev.end && !ev.failure))
      return;
    set = true;
    if (ev.failure)
      done->set_value(fmt::format("{} ({})", ev.failure->message,
                                  client::to_string(ev.failure->code)));
    else if (ev.end->reason != client::end_reason::length
             && ev.end->reason != client::end_reason::stop)
      done->set_value(fmt::format("it ended {}: {}", client::to_string(ev.end->reason),
                                  ev.end->message));
    else
      done->set_value({});
  });
  if (!id)
    return unexpected(fmt::format("the request to '{}' was refused: {} ({})", model,
                                  id.error().message, client::to_string(id.error().code)));
  if (result.wait_for(timeout) != std::future_status::ready)
    return unexpected(fmt::format("the request to '{}' did not end within {} ms", model,
                                  timeout.count()));
  if (auto err = result.get(); !err.empty())
    return unexpected(fmt::format("the request to '{}' failed: {}", model, err));
  return ms_between(sent, clock::now());
}

std::uint64_t sample_of(std::string_view metrics, std::string_view name,
                        const std::vector<metric_label>& labels = {}) {
  const auto v = find_sample(metrics, name, labels);
  return v && std::isfinite(*v) && *v >= 0 ? static_cast<std::uint64_t>(*v + 0.5) : 0;
}

/// The daemon's configuration for `kind`: the run's, its loggers, nothing on
/// TCP, no access lists, every request of the run allowed on one connection.
daemon::config run_config(const restart_run_options& opts, actors::scheduler_mode mode,
                          restart_kind kind, const std::string& model, const std::string& dir,
                          std::size_t requests) {
  auto cfg = opts.run.cfg;
  cfg.scheduler.mode = mode;
  cfg.daemon.log_level = opts.log_level;
  // READY=1 needs nothing from the log, but the disk lane's stop line is an
  // info line of the store logger, and "ready:" one of the daemon logger.
  for (const char* logger : {"daemon", "store"})
    if (auto it = cfg.daemon.log_levels.find(logger);
        it == cfg.daemon.log_levels.end() || (it->second != "trace" && it->second != "debug"))
      cfg.daemon.log_levels[logger] = "info";
  cfg.metrics.listen.clear();
  cfg.http.listen.clear();
  cfg.clients.allow_users.clear();
  cfg.clients.allow_groups.clear();
  cfg.clients.max_requests = static_cast<std::uint32_t>(std::clamp<std::size_t>(
    std::max<std::size_t>(cfg.clients.max_requests, requests + 1), 1, 65536));
  if (kind == restart_kind::disk)
    cfg.store.disk.dir = dir + "/kv";
  if (kind == restart_kind::swap) {
    const auto it = std::find_if(cfg.models.begin(), cfg.models.end(),
                                 [&](const auto& m) { return m.name == model; });
    auto other = *it;
    other.name = swap_model_name(model);
    other.load_at_start = false;
    it->load_at_start = true;
    cfg.models.push_back(std::move(other));
    cfg.lifecycle.max_loaded = 1;
  }
  return cfg;
}

} // namespace

std::string swap_model_name(std::string_view model) {
  return fmt::format("{}-b", model);
}

std::optional<disk_writeback> parse_disk_writeback(std::string_view log) {
  static const std::regex line{
    R"(disk tier: (\d+) snapshots written back \((\d+) MiB in ([0-9.]+) s, ([0-9.]+) MiB/s\))"};
  std::optional<disk_writeback> out;
  const std::string text{log};
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
       it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out = disk_writeback{std::stoull(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])};
  }
  return out;
}

expected<restart_result, std::string> run_restart(const restart_run_options& opts,
                                                  actors::scheduler_mode mode, restart_kind kind,
                                                  std::span<const trace_request> requests) {
  const auto& ro = opts.run;
  if (ro.cfg.models.empty())
    return unexpected(std::string{"the configuration has no model"});
  const std::string model = ro.model.empty() ? ro.cfg.models.front().name : ro.model;
  if (std::none_of(ro.cfg.models.begin(), ro.cfg.models.end(),
                   [&](const auto& m) { return m.name == model; }))
    return unexpected(fmt::format("no model named '{}' in the configuration", model));
  if (kind == restart_kind::swap) {
    const auto other = swap_model_name(model);
    if (!valid_model_name(other))
      return unexpected(fmt::format("the swap's second model would be named '{}', which is not a "
                                    "valid model name",
                                    other));
    if (std::any_of(ro.cfg.models.begin(), ro.cfg.models.end(),
                    [&](const auto& m) { return m.name == other; }))
      return unexpected(fmt::format("the configuration has a model named '{}' already", other));
  }
  const double ts = ro.time_scale > 0 ? ro.time_scale : 1.0;
  const auto name = std::string{to_string(kind)};
  auto progress = [&](std::string_view line) {
    if (ro.progress)
      ro.progress(fmt::format("restart {}: {}", name, line));
  };

  auto dir = temp_dir::create("kvlane-restart");
  if (!dir)
    return unexpected(std::move(dir).error());
  auto notify = notify_socket::bind(dir->path() + "/notify");
  if (!notify)
    return unexpected(std::move(notify).error());
  const auto cfg = run_config(opts, mode, kind, model, dir->path(), requests.size());
  restart_daemon::options dopts{opts.kvlaned_path, dir->path(), 1, true, opts.ready_timeout};
  auto first = restart_daemon::start(dopts, cfg, *notify);
  if (!first)
    return unexpected(std::move(first).error());
  std::optional<restart_daemon> d{std::move(*first)};
  progress(fmt::format("kvlaned ready in {:.0f} ms", d->start_to_ready_ms()));
  // The notify socket is read while a daemon runs, as systemd reads it.
  auto pump = serve_thread::start(*notify);
  if (!pump)
    return unexpected(std::move(pump).error());
  auto stop_pump = [&]() -> expected<void, std::string> {
    auto ok = (*pump)->stop();
    if (!ok)
      return unexpected("the notify socket: " + ok.error());
    return {};
  };

  restart_result out;
  out.kind = kind;
  auto& result = out.run;
  auto& fig = out.figures;
  result.mode = mode;
  result.time_scale = ts;
  result.store_peaks_known = false;
  result.requests = planned_outcomes(requests);
  fig.half = requests.size() / 2;
  fig.half_way_s = fig.half < requests.size() ? requests[fig.half].arrival_s : 0;

  // The wall bound on both halves together, as for the ipc driver; a pause
  // that eats into it shows as a timed-out run.
  auto bound = ro.timeout;
  if (bound.count() == 0) {
    const double span_ms = requests.empty() ? 0 : requests.back().arrival_s * 1000.0 / ts;
    bound = std::chrono::milliseconds(60000 + static_cast<std::int64_t>(4 * span_ms));
  }
  const auto start = clock::now();

  // -- the first half, then the drain -----------------------------------------------
  progress(fmt::format("sending the first {} of {} requests", fig.half, requests.size()));
  const auto h1 = drive_half(*d, model, requests, 0, fig.half, start, ts, start + bound,
                             result.requests, result.max_submit_lag_ms);
  fig.drain_ms = ms_between(h1.last_release, std::max(h1.last_release, h1.last_end));
  auto segment = d->counters(model);
  if (!segment)
    return unexpected(segment.error() + d->tail());
  result.stats = *segment;
  auto last_end = h1.last_end;
  if (h1.timed_out) {
    result.timed_out = true;
    progress("the first half timed out; the second is not sent");
  } else {
    // -- the event ---------------------------------------------------------------
    const auto drained = clock::now();
    if (kind == restart_kind::fd_store || kind == restart_kind::disk) {
      const auto sigterm = clock::now();
      if (auto stopped = d->stop(opts.stop_timeout); !stopped)
        return unexpected("the restart's stop: " + stopped.error());
      fig.stop_ms = ms_between(sigterm, clock::now());
      // Everything it sent is read before the next start is given the store.
      if (auto ok = stop_pump(); !ok)
        return unexpected(std::move(ok).error());
      const auto first_log = d->log_path();
      d.reset();
      if (kind == restart_kind::fd_store) {
        for (const auto* fd_name : {"kvlane-store", "kvlane-store-index"})
          if (notify->store().count(fd_name) == 0)
            return unexpected(fmt::format("kvlaned stored no '{}' in the fd store: nothing to "
                                          "hand to the next start",
                                          fd_name));
      } else {
        notify->clear_store(); // a start without the fd store: the disk tier alone
        fig.writeback = parse_disk_writeback(read_text_file(first_log));
      }
      dopts.number = 2;
      dopts.pass_store = kind == restart_kind::fd_store;
      auto next = restart_daemon::start(dopts, cfg, *notify);
      if (!next)
        return unexpected("the restart's start: " + next.error());
      d.emplace(std::move(*next));
      pump = serve_thread::start(*notify);
      if (!pump)
        return unexpected(std::move(pump).error());
      fig.restart_to_ready_ms = ms_between(sigterm, d->ready_at());
      fig.start_to_ready_ms = d->start_to_ready_ms();
      auto m = d->metrics();
      if (!m)
        return unexpected(m.error() + d->tail());
      fig.restored_snapshots = sample_of(*m, "kvlane_store_restored_snapshots_total");
      fig.disk_only_snapshots = sample_of(*m, "kvlane_store_disk_snapshots", {{"tier", "disk"}});
      progress(fmt::format("restarted: SIGTERM to exit {:.0f} ms, to READY=1 {:.0f} ms; {} "
                           "retained snapshots taken back{}",
                           fig.stop_ms, fig.restart_to_ready_ms, fig.restored_snapshots,
                           kind == restart_kind::disk
                             ? fmt::format(" ({} on disk only)", fig.disk_only_snapshots)
                             : std::string{}));
    } else if (kind == restart_kind::swap) {
      const auto other = swap_model_name(model);
      auto took = one_request(*d, other, std::chrono::milliseconds(
                                           cfg.lifecycle.load_timeout.count() + 10000));
      if (!took)
        return unexpected("the swap: " + took.error() + d->tail());
      fig.swap_ms = *took;
      auto state = d->model_state(model);
      if (!state)
        return unexpected(state.error() + d->tail());
      if (*state == "loaded" || *state == "loading")
        return unexpected(fmt::format("the swap: '{}' is still {} after a request to '{}' with "
                                      "max_loaded = 1",
                                      model, *state, other));
      progress(fmt::format("'{}' served in {:.0f} ms; '{}' is {}", other, fig.swap_ms, model,
                           *state));
    }
    const auto resumed = clock::now();
    fig.event_ms = ms_between(drained, resumed);
    // The rest of the schedule moves by the part of the pause that ran past
    // the next request's trace time.
    const auto next_due = start + std::chrono::duration_cast<clock::duration>(
                                    std::chrono::duration<double>(fig.half_way_s / ts));
    const auto shift = std::max(clock::duration::zero(), resumed - next_due);
    fig.shift_ms = std::chrono::duration<double, std::milli>(shift).count();

    // -- the second half ---------------------------------------------------------
    progress(fmt::format("drained in {:.0f} ms, serving again {:.0f} ms later; the other {} "
                         "requests follow {:.0f} ms later than their trace times",
                         fig.drain_ms, fig.event_ms, requests.size() - fig.half, fig.shift_ms));
    const auto h2 = drive_half(*d, model, requests, fig.half, requests.size(), start + shift, ts,
                               start + shift + bound, result.requests, result.max_submit_lag_ms);
    result.timed_out = h2.timed_out;
    last_end = h2.last_end - shift;
    if (fig.half < requests.size())
      fig.first_ttft_ms = result.requests[fig.half].ttft_ms / ts;
    if (kind != restart_kind::none) {
      auto later = d->counters(model);
      if (!later)
        return unexpected(later.error() + d->tail());
      add_counters(result.stats, *later);
    } else if (auto whole = d->counters(model); whole) {
      result.stats = *whole; // one daemon, one load: its counters cover both halves
    } else {
      return unexpected(whole.error() + d->tail());
    }
    if (kind == restart_kind::disk) {
      auto m = d->metrics();
      if (!m)
        return unexpected(m.error() + d->tail());
      fig.disk_reads = sample_of(*m, "kvlane_store_disk_reads_total");
      fig.disk_read_bytes = sample_of(*m, "kvlane_store_disk_read_bytes_total");
    }
  }
  note_unsent(result.requests);
  result.wall_ms = std::max(0.0, ms_between(start, last_end));
  if (auto stopped = d->stop(opts.stop_timeout); !stopped)
    return unexpected(std::move(stopped).error());
  if (auto ok = stop_pump(); !ok)
    return unexpected(std::move(ok).error());
  return out;
}

} // namespace kvlane::tools::bench
