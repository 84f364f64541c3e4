#include "tools/bench/ipc_driver.hpp"

#include "common/child_process.hpp"
#include "common/elapsed.hpp"
#include "common/temp_dir.hpp"
#include "tools/admin_connection.hpp"
#include "tools/bench/admin_status.hpp"
#include "tools/bench/config_toml.hpp"
#include "tools/bench/prometheus_text.hpp"
#include "tools/bench/request_clock.hpp"
#include "tools/bench/run_collector.hpp"

#include <kvlane/client.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/un.h>
#include <thread>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// Starts kvlaned. Its output is drained for the whole run (a full pipe would
/// block its logging): warnings and errors are forwarded to this process's
/// stderr, and the last lines are kept for error messages.
expected<child_process, std::string> start_kvlaned(const std::string& exe,
                                                   const std::string& config_path) {
  child_options o;
  o.args = {"--config", config_path};
  // The daemon must not talk to this process's service manager.
  o.unset_env = {"NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC"};
  o.max_output_bytes = 256 * 1024;
  o.on_line = [](std::string_view l) {
    // The journal format of a daemon whose stderr is not a terminal:
    // "<priority>logger: message"; warnings are <4>, errors <3>, critical <2>.
    if (l.size() > 3 && l[0] == '<' && l[1] >= '0' && l[1] <= '4' && l[2] == '>')
      std::fprintf(stderr, "kvlaned: %.*s\n", static_cast<int>(l.size() - 3), l.data() + 3);
  };
  auto c = child_process::start(exe, std::move(o));
  if (!c)
    return unexpected(fmt::format("cannot start kvlaned: {}", c.error()));
  return c;
}

/// The last lines the daemon printed, indented, for error messages.
std::string tail(const child_process& kvlaned) {
  std::string out;
  for (const auto& l : kvlaned.last_lines(20))
    out += "\n    " + l;
  return out.empty() ? std::string{" (it printed nothing)"} : "; its last lines:" + out;
}

/// `kvlane_transfers_total{model="<model>",kind="<kind>"}` from the metrics text.
std::optional<std::uint64_t> transfers_metric(std::string_view text, const std::string& model,
                                              std::string_view kind) {
  const auto v = find_sample(text, "kvlane_transfers_total", {{"model", model}, {"kind", kind}});
  if (!v || !std::isfinite(*v) || *v < 0)
    return std::nullopt;
  return static_cast<std::uint64_t>(*v + 0.5);
}

} // namespace

std::string default_kvlaned_path() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return {};
  return (self.parent_path() / "kvlaned").string();
}

expected<run_result, std::string> run_mode_ipc(const ipc_run_options& opts,
                                               actors::scheduler_mode mode,
                                               std::span<const trace_request> requests) {
  const auto& ro = opts.run;
  auto cfg = ro.cfg;
  cfg.scheduler.mode = mode;
  if (cfg.models.empty())
    return unexpected(std::string{"the configuration has no model"});
  const std::string model = ro.model.empty() ? cfg.models.front().name : ro.model;
  if (std::none_of(cfg.models.begin(), cfg.models.end(),
                   [&](const auto& m) { return m.name == model; }))
    return unexpected(fmt::format("no model named '{}' in the configuration", model));
  const double ts = ro.time_scale > 0 ? ro.time_scale : 1.0;
  const auto mode_name = actors::to_string(mode);
  auto progress = [&](std::string_view line) {
    if (ro.progress)
      ro.progress(line);
  };

  // -- the daemon's configuration: the run's, in a private runtime directory --------
  auto dir = temp_dir::create("kvlane-bench");
  if (!dir)
    return unexpected(std::move(dir).error());
  const auto runtime = dir->path() + "/run";
  const auto admin_socket = runtime + "/kvlane-admin.sock";
  if (admin_socket.size() >= sizeof(sockaddr_un{}.sun_path))
    return unexpected(fmt::format("the temporary directory's path is too long for a socket ({}); "
                                  "set TMPDIR to a shorter one",
                                  admin_socket));
  cfg.daemon.runtime_dir = runtime;
  cfg.daemon.log_level = opts.log_level;
  // "ready:" is an info line of the daemon logger: keep it at info or more verbose.
  if (auto it = cfg.daemon.log_levels.find("daemon");
      it == cfg.daemon.log_levels.end() || (it->second != "trace" && it->second != "debug"))
    cfg.daemon.log_levels["daemon"] = "info";
  for (const char* lvl : {"trace", "debug"})
    if (opts.log_level == lvl)
      cfg.daemon.log_levels["daemon"] = lvl;
  cfg.metrics.listen.clear(); // no TCP port: another daemon may hold it
  cfg.http.listen.clear();    // the benchmark drives the ring path only
  cfg.clients.allow_users.clear();
  cfg.clients.allow_groups.clear();
  cfg.clients.max_requests = static_cast<std::uint32_t>(std::clamp<std::size_t>(
    std::max<std::size_t>(cfg.clients.max_requests, requests.size()), 1, 65536));
  auto toml = config_toml(cfg);
  if (!toml)
    return unexpected(fmt::format("the run's configuration: {}", toml.error()));
  auto config_path = dir->write("kvlane.toml", *toml);
  if (!config_path)
    return unexpected(std::move(config_path).error());

  // -- start it and connect ------------------------------------------------------------
  const auto started = clock::now();
  auto child = start_kvlaned(opts.kvlaned_path, *config_path);
  if (!child)
    return unexpected(std::move(child).error());
  auto& kvlaned = *child;
  // "ready:" is the daemon's info line once its sockets accept; false if it exited first.
  if (!kvlaned.wait_for_output("ready:", opts.ready_timeout)) {
    const auto st = kvlaned.exit_status();
    return unexpected(st ? fmt::format("kvlaned exited with status {} before it was ready{}", *st,
                                       tail(kvlaned))
                         : fmt::format("kvlaned was not ready within {} ms{}",
                                       opts.ready_timeout.count(), tail(kvlaned)));
  }
  std::unique_ptr<client::connection> conns[2]; // [0] interactive, [1] batch
  for (auto& c : conns) {
    client::connect_options co;
    co.socket_path = runtime + "/kvlane.sock";
    co.client_name = "bench";
    auto r = client::connect(co);
    if (!r)
      return unexpected(fmt::format("cannot connect to kvlaned: {} ({}){}", r.error().message,
                                    client::to_string(r.error().code), tail(kvlaned)));
    c = std::move(*r);
  }
  auto admin = admin_connection::open(admin_socket);
  if (!admin)
    return unexpected(std::move(admin).error().message);
  progress(fmt::format("{} (ipc): kvlaned ready (pid {}) in {:.0f} ms; connected as 'bench'",
                       mode_name, kvlaned.pid(), ms_between(started, clock::now())));

  run_result result;
  result.mode = mode;
  result.time_scale = ts;
  result.store_peaks_known = false;
  result.serialized = actors::place_transfers(mode, opts.transfers_overlap).on_compute_lane;
  result.requests = planned_outcomes(requests);
  auto col = std::make_shared<run_collector>();
  col->outcomes = &result.requests;
  col->time_scale = ts;

  // The scheduler's gauges from `status` every ~100 ms of wall time.
  std::mutex sampler_mutex;
  std::condition_variable sampler_cv;
  bool sampling = true;
  std::string sampler_error;
  const auto start = clock::now();
  gauge_recorder gauges{start, ts};
  std::thread sampler{[&] {
    auto link = admin_connection::open(admin_socket);
    if (!link) {
      sampler_error = link.error().message;
      return;
    }
    auto next = start;
    std::unique_lock lock{sampler_mutex};
    while (sampling) {
      lock.unlock();
      auto reply = link->command("status", 2s);
      auto st = reply ? stats_from_status(*reply, model)
                      : expected<actors::scheduler_stats, std::string>{
                          unexpected(std::move(reply).error().message)};
      const auto now = clock::now();
      if (st) {
        gauges.add(*st, now, result.timeline, result.peak_without_slot);
      } else if (sampler_error.empty()) {
        sampler_error = st.error();
      }
      next += 100ms;
      lock.lock();
      sampler_cv.wait_until(lock, next, [&] { return !sampling; });
    }
  }};
  auto stop_sampler = [&] {
    {
      std::lock_guard lock{sampler_mutex};
      sampling = false;
    }
    sampler_cv.notify_all();
    if (sampler.joinable())
      sampler.join();
  };

  // The wall bound on the run: sending and waiting for the ends.
  auto bound = ro.timeout;
  if (bound.count() == 0) {
    const double span_ms = requests.empty() ? 0 : requests.back().arrival_s * 1000.0 / ts;
    bound = std::chrono::milliseconds(60000 + static_cast<std::int64_t>(4 * span_ms));
  }

  // -- the driver: every request at its arrival time, a held turn at its previous turn's end
  col->start = start;
  col->last_end = start;
  col->gate = std::make_shared<turn_gate>(requests, start, ts);
  std::size_t submitted = 0;
  while (const auto next = col->gate->next(start + bound)) {
    const std::size_t i = next->index;
    const auto& r = requests[i];
    result.max_submit_lag_ms = std::max(result.max_submit_lag_ms, ms_between(next->due, clock::now()));
    client::request req;
    req.model = model;
    req.prio = r.interactive ? client::priority::interactive : client::priority::batch;
    req.prompt_tokens = prompt_of(r, static_cast<std::uint32_t>(i));
    req.sampling.max_tokens = r.output_tokens;
    req.sampling.stop_at_eos = false;
    auto& conn = *conns[r.interactive ? 0 : 1];
    auto id = conn.submit(req, request_callback(col, i, clock::now()));
    if (col->sent(i, r, *next,
                  id ? std::string{}
                     : fmt::format("submit failed: {} ({})", id.error().message,
                                   client::to_string(id.error().code))))
      ++submitted;
  }
  note_unsent(result.requests);
  progress(fmt::format("{} (ipc): all {} requests submitted ({} accepted), waiting for the ends",
                       mode_name, requests.size(), submitted));

  // Wait for every accepted request to end, within the bound.
  {
    std::unique_lock lock{col->mutex};
    result.timed_out =
      !col->cv.wait_until(lock, start + bound, [&] { return col->ended >= submitted; });
  }
  stop_sampler();

  // The scheduler's counters at the end (before any cancel of a timed-out run).
  std::string stats_error;
  if (auto reply = admin->command("status", 10s)) {
    if (auto st = stats_from_status(*reply, model))
      result.stats = *st;
    else
      stats_error = st.error();
    // The store keeps exact peaks; `status` reports them.
    if (auto peaks = store_peaks_from_status(*reply)) {
      result.peak_store_bytes = peaks->bytes;
      result.peak_snapshots = peaks->snapshots;
      result.store_peaks_known = true;
    }
  } else {
    stats_error = reply.error().message;
  }
  if (auto reply = admin->command("metrics", 10s)) {
    const auto it = reply->find("text");
    const auto text = it != reply->end() && it->is_string() ? it->get<std::string>() : std::string{};
    result.stats.dumps = transfers_metric(text, model, "dump").value_or(0);
    result.stats.loads = transfers_metric(text, model, "load").value_or(0);
  }
  result.stats.mode = mode;
  result.mean_slots_busy = gauges.mean_slots_busy();

  if (result.timed_out) {
    progress(fmt::format("{} (ipc): timed out after {} s with {} of {} requests ended; stopping "
                         "kvlaned",
                         mode_name, bound.count() / 1000, col->ended, submitted));
    // Two signals: no grace for the running sequences; their streams end
    // with the connection.
    kvlaned.signal(SIGTERM);
    kvlaned.signal(SIGTERM);
    std::unique_lock lock{col->mutex};
    col->cv.wait_for(lock, 10s, [&] { return col->ended >= submitted; });
  }
  for (auto& c : conns)
    c.reset(); // joins the reader threads: no callback runs after this
  {
    std::lock_guard lock{col->mutex};
    result.wall_ms = ms_between(start, col->last_end);
    col->outcomes = nullptr;
  }

  auto exit_status = kvlaned.stop(10s, cfg.daemon.shutdown_timeout + 5s);
  if (!exit_status)
    return unexpected(exit_status.error() + tail(kvlaned));
  if (*exit_status != 0)
    return unexpected(fmt::format("kvlaned exited with status {} after SIGTERM{}", *exit_status,
                                  tail(kvlaned)));
  if (!stats_error.empty() && !result.timed_out)
    return unexpected(fmt::format("scheduler statistics unavailable: {}", stats_error));
  if (!sampler_error.empty())
    progress(fmt::format("{} (ipc): gauge sampling incomplete: {}", mode_name, sampler_error));
  return result;
}

} // namespace kvlane::tools::bench
