// kvlane-soak: a chaos soak of the real daemon (docs/reliability.md).
//
// Runs kvlaned as a child with 1% injected step, dump and load faults and a
// snapshot store small enough to stay at its limit, plus app processes
// (children of this program, using the client library) that connect, stream,
// cancel, disconnect mid-stream, and are killed with SIGKILL; the daemon is
// reloaded with SIGHUP (alternating scheduler quanta) every few seconds.
//
// At the end it checks that
//  - requests completed, and nothing happened that the soak did not cause:
//    no refused connect or submit, no stream that failed, no end other than
//    completion, the app's own cancel or a fault the soak injected, no app
//    that crashed (deliberate kills, disconnects, cancels and injected faults
//    are counted apart, as expected outcomes),
//  - every stream that ended delivered exactly the tokens its end counts
//    (fewer: lost tokens; more: duplicated tokens),
//  - every stream that completed (length or stop) equals a solo run of the
//    same request in process, without faults,
//  - the daemon, once every app is gone, holds no sequence, no snapshot and no
//    committed store byte beyond the warm pool (free bytes kept committed on
//    purpose, within its target), has the open fds it had at the baseline, and an
//    RSS within rss_slack of it (not under AddressSanitizer: see below),
//  - the daemon's RSS, sampled through the run, no longer grows over its
//    second half (tools/soak/rss_trend: a plateau passes, a leak does not),
// prints a summary line and the RSS trend's line, and exits 1 if any check failed
// (0 otherwise).
//
//   kvlane-soak [--seconds N] [--apps N] [--seed N] [--daemon PATH] [--dir DIR]
//   kvlane-soak --app --socket PATH --seed N --seconds N   (one app; run by the soak)
#include "actors/engine.hpp"
#include "daemon/config.hpp"
#include "app_report.hpp"
#include "rss_trend.hpp"

#include <kvlane/client.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <poll.h>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
namespace client = kvlane::client;
using json = nlohmann::json;
namespace soak = kvlane::tools::soak;
using soak::outcome;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t rss_slack_bytes = 64ull << 20;

// Under AddressSanitizer (the daemon is built like this program) freed memory
// waits in ASan's quarantine, 256 MiB by default, and shadow pages stay mapped,
// so the RSS says nothing about leaks there. LeakSanitizer checks at the
// daemon's exit instead: a leak makes its exit code non-zero.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool rss_checked = false;
#else
constexpr bool rss_checked = true;
#endif

// -- requests: a key names one request completely --------------------------------

client::request recipe(std::uint64_t key) {
  client::request r;
  r.model = "soak";
  std::string text = fmt::format("soak request {}: ", key);
  for (std::uint64_t i = 0; i < key % 4; ++i) // up to ~260 prompt tokens: fits with max_tokens
    text += "a longer prompt that travels in chunks and fills a few more prefill steps; ";
  r.prompt = text;
  r.sampling.max_tokens = 16 + static_cast<std::uint32_t>(key % 97);
  if (key % 2 == 1) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = key;
  }
  r.prio = key % 3 == 0 ? client::priority::batch : client::priority::interactive;
  return r;
}

std::uint64_t fnv1a(const std::vector<std::uint32_t>& tokens) {
  std::uint64_t h = 1469598103934665603ull;
  for (auto t : tokens)
    for (int b = 0; b < 4; ++b) {
      h ^= (t >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  return h;
}

// -- one app process --------------------------------------------------------------
//
// Reports each event as one line on stdout, a pipe to the soak
// (tools/soak/app_report.hpp).

struct live_stream {
  std::uint64_t key = 0;
  std::shared_ptr<client::stream> s;
  std::vector<std::uint32_t> tokens;
  std::uint32_t cancel_after = 0; ///< 0: never
  bool cancel_sent = false;
};

int run_app(const std::string& socket, std::uint64_t seed, double seconds) {
  std::mt19937_64 rng{seed};
  auto chance = [&](double p) { return std::uniform_real_distribution<double>{0, 1}(rng) < p; };
  const auto until = steady::now() + std::chrono::duration<double>(seconds);
  std::uint64_t counter = 0;
  auto say = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  while (steady::now() < until) {
    client::connect_options o;
    o.socket_path = socket;
    o.client_name = fmt::format("soak-{}", seed);
    auto conn = client::connect(o);
    if (!conn) {
      // Nothing in the soak should be refused (six apps are well within every
      // admission limit, and a reload keeps the listener): the soak counts it
      // as a failure. Back off and retry so the run goes on.
      say(soak::refused_connect_line(client::to_string(conn.error().code), conn.error().message));
      std::this_thread::sleep_for(50ms);
      continue;
    }
    const int rounds = 1 + static_cast<int>(rng() % 5);
    for (int round = 0; round < rounds && steady::now() < until; ++round) {
      std::vector<live_stream> streams;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        live_stream ls;
        ls.key = (seed << 24) | ++counter;
        if (chance(0.2))
          ls.cancel_after = 1 + static_cast<std::uint32_t>(rng() % 16);
        auto s = (*conn)->submit(recipe(ls.key));
        if (!s) {
          say(soak::refused_submit_line(ls.key, client::to_string(s.error().code),
                                        s.error().message));
          continue;
        }
        say(soak::submitted_line(ls.key));
        ls.s = std::move(*s);
        streams.push_back(std::move(ls));
      }
      const bool disconnect = chance(0.1);
      const std::size_t disconnect_after = 1 + rng() % 24;
      std::size_t total = 0;
      while (!streams.empty()) {
        if (disconnect && total >= disconnect_after)
          break;
        for (auto it = streams.begin(); it != streams.end();) {
          auto c = it->s->next(2ms);
          if (!c) {
            if (c.error().code == client::errc::timeout) {
              ++it;
              continue;
            }
            say(soak::failed_line(it->key, client::to_string(c.error().code), c.error().message));
            it = streams.erase(it);
            continue;
          }
          it->tokens.insert(it->tokens.end(), c->tokens.begin(), c->tokens.end());
          total += c->tokens.size();
          if (c->end) {
            say(soak::ended_line(it->key, client::to_string(c->end->reason), it->tokens.size(),
                                 c->end->generated_tokens, fnv1a(it->tokens), it->cancel_sent,
                                 c->end->message));
            it = streams.erase(it);
            continue;
          }
          if (it->cancel_after != 0 && !it->cancel_sent && it->tokens.size() >= it->cancel_after) {
            (void)it->s->cancel();
            it->cancel_sent = true;
          }
          ++it;
        }
      }
      if (!streams.empty()) {
        for (auto& ls : streams)
          say(soak::abandoned_line(ls.key));
        streams.clear();
        break; // the connection goes away with streams in flight
      }
    }
  }
  return 0;
}

// -- the soak ------------------------------------------------------------------------

std::string soak_config(const std::string& dir, std::uint32_t quantum, bool faults,
                        double time_scale) {
  std::string text = fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}/run"
worker_threads = 2
log_level = "warn"
shutdown_grace_ms = 2000
[[model]]
name = "soak"
[model.sim]
slots = 4
max_context = 512
max_prefill_chunk = 64
snapshot_bytes = "512KiB"
time_scale = {}
seed = 7
)",
                                 dir, time_scale);
  if (faults)
    text += R"([model.sim.faults.step]
fail_rate = 0.01
[model.sim.faults.dump]
fail_rate = 0.01
[model.sim.faults.load]
fail_rate = 0.01
)";
  text += fmt::format(R"([scheduler]
quantum_steps = {}
spare_slots = 1
[store]
max_bytes = "2MiB"
[clients]
max_backlog_records = 4096
[http]
listen = "" # the soak speaks the IPC protocol; two soaks may run at once
)",
                      quantum);
  return text;
}

/// A child process whose stdout is a pipe to us (or a file).
struct child {
  pid_t pid = -1;
  int out = -1;
  std::string pending; ///< a partial line
  bool done = false;
};

child spawn(const std::vector<std::string>& argv, const std::string& log_file = {}) {
  int fds[2] = {-1, -1};
  if (log_file.empty() && ::pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    std::exit(2);
  }
  std::fflush(stdout);
  child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    if (log_file.empty()) {
      ::dup2(fds[1], STDOUT_FILENO);
    } else {
      std::FILE* f = std::freopen(log_file.c_str(), "a", stdout);
      (void)f;
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
    }
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (log_file.empty()) {
    ::close(fds[1]);
    c.out = fds[0];
  }
  return c;
}

/// One JSON request on the admin socket; nullopt if the daemon does not answer.
std::optional<json> admin(const std::string& path, const json& request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  const auto line = request.dump() + "\n";
  (void)::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[4096];
  while (in.find('\n') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1)
      break;
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (in.find('\n') == std::string::npos)
    return std::nullopt;
  return json::parse(in.substr(0, in.find('\n')), nullptr, false);
}

std::uint64_t daemon_rss(pid_t pid) {
  std::ifstream f{fmt::format("/proc/{}/status", pid)};
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024;
  return 0;
}

std::size_t daemon_fds(pid_t pid) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

/// Every committed store byte is the warm pool's (free, kept committed on
/// purpose, within its target): none is held by a snapshot or leaked.
bool only_warm_pool_committed(const json& store) {
  const auto committed = store.value("committed_bytes", ~0ull);
  const auto pool = store.value("warm_pool_bytes", ~0ull);
  return committed == pool && pool <= store.value("warm_pool_target_bytes", 0ull);
}

/// Waits until the daemon holds nothing: no client, no live sequence, no
/// snapshot, no committed store byte beyond the warm pool. Returns the last status.
json wait_idle(const std::string& admin_socket, std::chrono::seconds timeout) {
  json last;
  const auto deadline = steady::now() + timeout;
  while (steady::now() < deadline) {
    auto s = admin(admin_socket, {{"cmd", "status"}});
    if (s && s->contains("models")) {
      last = *s;
      std::uint64_t live = 0;
      for (auto& m : last["models"])
        live += m.value("slots_busy", 0u) + m.value("without_slot_interactive", 0u)
                + m.value("without_slot_batch", 0u);
      if (last["clients"] == 0 && live == 0 && last["store"]["snapshots"] == 0
          && only_warm_pool_committed(last["store"]))
        return last;
    }
    std::this_thread::sleep_for(100ms);
  }
  return last;
}

/// Runs every completed request alone, in process, without faults, and
/// returns how many ended differently from the soak's stream.
std::uint64_t count_mismatches(const std::string& dir, const std::map<std::uint64_t, outcome>& done,
                               std::uint64_t& checked) {
  spdlog::set_level(spdlog::level::warn); // the in-process engine logs like the daemon
  auto cfg = kvlane::daemon::parse(soak_config(dir, 8, false, 1e6));
  if (!cfg) {
    std::fprintf(stderr, "kvlane-soak: %s\n", cfg.error().message.c_str());
    std::exit(2);
  }
  caf::actor_system_config sc;
  sc.set("scheduler.max-threads", size_t{2});
  caf::actor_system sys{sc};
  auto eng = kvlane::actors::engine::create(sys, *cfg);
  if (!eng) {
    std::fprintf(stderr, "kvlane-soak: %s\n", eng.error().c_str());
    std::exit(2);
  }
  std::vector<std::pair<std::uint64_t, const outcome*>> todo;
  for (auto& [key, o] : done)
    if (o.reason == "length" || o.reason == "stop")
      todo.emplace_back(key, &o);
  std::uint64_t mismatches = 0;
  for (std::size_t at = 0; at < todo.size(); at += 32) {
    std::vector<std::pair<std::shared_ptr<kvlane::actors::token_stream>, const outcome*>> batch;
    for (std::size_t i = at; i < std::min(todo.size(), at + 32); ++i) {
      const auto r = recipe(todo[i].first);
      kvlane::actors::submit_request q;
      q.model = r.model;
      q.client = "solo";
      q.priority = r.prio == client::priority::batch ? kvlane::actors::priority_class::batch
                                                      : kvlane::actors::priority_class::interactive;
      q.prompt_text = r.prompt;
      q.sampling.temperature = r.sampling.temperature;
      q.sampling.top_k = r.sampling.top_k;
      q.sampling.top_p = r.sampling.top_p;
      q.sampling.seed = r.sampling.seed;
      q.sampling.max_tokens = r.sampling.max_tokens;
      q.stop_at_eos = r.sampling.stop_at_eos;
      auto s = (*eng)->submit(std::move(q));
      if (s)
        batch.emplace_back(*s, todo[i].second);
      else
        ++mismatches;
    }
    for (auto& [s, o] : batch) {
      auto all = s->collect(60s);
      ++checked;
      const bool same = all && all->end
                        && kvlane::actors::to_string(all->end->reason) == o->reason
                        && fnv1a(all->tokens) == o->hash;
      mismatches += same ? 0 : 1;
    }
  }
  (*eng)->shutdown();
  return mismatches;
}

int run_soak(double seconds, std::uint32_t apps, std::uint64_t seed, const std::string& daemon_exe,
             std::string dir) {
  const bool keep = !dir.empty();
  if (dir.empty())
    dir = fmt::format("/tmp/kvlane-soak-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto self = std::filesystem::canonical("/proc/self/exe").string();
  const auto config_path = dir + "/kvlane.toml";
  const auto socket = dir + "/run/kvlane.sock";
  const auto admin_socket = dir + "/run/kvlane-admin.sock";
  std::ofstream{config_path} << soak_config(dir, 8, true, 50);

  auto daemon = spawn({daemon_exe, "--config", config_path}, dir + "/kvlaned.log");
  for (int i = 0; i < 400 && !admin(admin_socket, {{"cmd", "status"}}); ++i)
    std::this_thread::sleep_for(50ms);
  if (!admin(admin_socket, {{"cmd", "status"}})) {
    std::fprintf(stderr, "kvlane-soak: kvlaned did not start (see %s/kvlaned.log)\n", dir.c_str());
    return 2;
  }

  soak::tally t;
  std::uint64_t killed = 0, reloads = 0, app_runs = 0;
  std::vector<child> running;
  std::set<pid_t> killed_pids;
  std::mt19937_64 rng{seed};
  std::uint64_t next_app_seed = seed * 1000 + 1;

  auto start_app = [&](double lifetime) {
    running.push_back(spawn({self, "--app", "--socket", socket, "--seed",
                             std::to_string(next_app_seed++), "--seconds",
                             fmt::format("{:.2f}", lifetime)}));
    ++app_runs;
  };
  auto pump = [&](int timeout_ms) {
    std::vector<pollfd> p;
    for (auto& c : running)
      p.push_back({c.out, POLLIN, 0});
    if (::poll(p.data(), p.size(), timeout_ms) <= 0)
      return;
    for (std::size_t i = 0; i < running.size(); ++i) {
      if (p[i].revents == 0)
        continue;
      char buf[8192];
      const auto n = ::read(running[i].out, buf, sizeof buf);
      if (n <= 0) {
        running[i].done = true;
        continue;
      }
      running[i].pending.append(buf, static_cast<std::size_t>(n));
      for (auto nl = running[i].pending.find('\n'); nl != std::string::npos;
           nl = running[i].pending.find('\n')) {
        t.take(std::string_view{running[i].pending}.substr(0, nl));
        running[i].pending.erase(0, nl + 1);
      }
    }
  };
  auto reap = [&] {
    for (auto it = running.begin(); it != running.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      ::close(it->out);
      int st = 0;
      ::waitpid(it->pid, &st, 0);
      const bool by_us = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && killed_pids.count(it->pid);
      if (!by_us && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        t.app_crashed(fmt::format("app {} {} {}", it->pid, WIFEXITED(st) ? "exited" : "died of signal",
                           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st)));
      }
      killed_pids.erase(it->pid);
      it = running.erase(it);
    }
  };
  auto kill_app = [&](const child& c) {
    ::kill(c.pid, SIGKILL);
    killed_pids.insert(c.pid);
  };

  // Warm-up: one app for two seconds, then the baseline of an idle daemon.
  start_app(2.0);
  while (!running.empty()) {
    pump(100);
    reap();
  }
  auto idle = wait_idle(admin_socket, 30s);
  const auto base_rss = daemon_rss(daemon.pid);
  const auto base_fds = daemon_fds(daemon.pid);

  // The daemon's RSS through the drive, judged at the end (tools/soak/rss_trend):
  // at least every 0.5 s, at most ~1200 samples however long the run.
  std::vector<kvlane::tools::soak::rss_sample> rss_samples;
  const auto sample_every = std::chrono::duration<double>(std::max(0.5, seconds / 1200));
  const auto t0 = steady::now();
  auto next_sample = t0;
  const auto deadline = t0 + std::chrono::duration<double>(seconds);
  auto next_kill = t0 + 3s;
  auto next_reload = t0 + 5s;
  std::uniform_real_distribution<double> life{2.0, 10.0};
  while (steady::now() < deadline) {
    while (running.size() < apps) {
      const double left = std::chrono::duration<double>(deadline - steady::now()).count();
      start_app(std::min(life(rng), std::max(0.5, left)));
    }
    pump(100);
    reap();
    const auto now = steady::now();
    if (now >= next_sample) {
      rss_samples.push_back({std::chrono::duration<double>(now - t0).count(), daemon_rss(daemon.pid)});
      next_sample += std::chrono::duration_cast<steady::duration>(sample_every);
    }
    if (now >= next_kill && !running.empty()) {
      kill_app(running[rng() % running.size()]);
      ++killed;
      next_kill = now + 3s;
    }
    if (now >= next_reload) {
      std::ofstream{config_path} << soak_config(dir, reloads % 2 == 0 ? 16 : 8, true, 50);
      ::kill(daemon.pid, SIGHUP);
      ++reloads;
      next_reload = now + 5s;
    }
  }
  const auto end_of_drive = steady::now() + 60s;
  while (!running.empty() && steady::now() < end_of_drive) {
    pump(100);
    reap();
  }
  const auto stuck_apps = running.size(); // still running a minute past their lifetime
  for (auto& c : running)
    kill_app(c);
  while (!running.empty()) {
    pump(100);
    reap();
  }

  // Retained conversation KV stays in the store by design; a reload with reuse
  // off drops it all, after which nothing may remain committed.
  std::ofstream{config_path} << soak_config(dir, 8, true, 50) << "[reuse]\nmode = \"off\"\n";
  ::kill(daemon.pid, SIGHUP);
  ++reloads;
  idle = wait_idle(admin_socket, 30s);
  const auto end_rss = daemon_rss(daemon.pid);
  // The daemon closes a finished admin or client connection on its own
  // thread, a moment after we close ours: give the count 2 s to settle.
  auto end_fds = daemon_fds(daemon.pid);
  for (int i = 0; i < 40 && end_fds != base_fds; ++i) {
    std::this_thread::sleep_for(50ms);
    end_fds = daemon_fds(daemon.pid);
  }
  const bool alive = ::waitpid(daemon.pid, nullptr, WNOHANG) == 0;
  std::uint64_t live_left = 0;
  for (auto& m : idle.value("models", json::array()))
    live_left += m.value("slots_busy", 0u) + m.value("without_slot_interactive", 0u)
                 + m.value("without_slot_batch", 0u);
  const json store = idle.contains("store") ? idle["store"] : json::object();
  const std::uint64_t committed = store.value("committed_bytes", ~0ull);
  const std::uint64_t snapshots = store.value("snapshots", ~0ull);
  const std::uint64_t peak = store.value("peak_used_bytes", 0ull);
  const std::uint64_t limit = store.value("limit_bytes", 0ull);
  const std::uint64_t evictions = store.value("evictions", 0ull);
  const std::uint64_t pool = store.value("warm_pool_bytes", 0ull);
  ::kill(daemon.pid, SIGTERM);
  int st = 0;
  ::waitpid(daemon.pid, &st, 0);
  const int daemon_exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);

  std::uint64_t lost = 0, duplicated = 0;
  const std::uint64_t completed = t.completed();
  soak::counts by_reason;
  for (auto& [key, o] : t.ended) {
    ++by_reason[o.reason];
    if (o.received < o.generated)
      lost += o.generated - o.received;
    else
      duplicated += o.received - o.generated;
  }
  std::uint64_t checked = 0;
  const auto mismatched = count_mismatches(dir, t.ended, checked);
  const auto trend = kvlane::tools::soak::judge_rss_trend(rss_samples);

  const bool rss_ok = !rss_checked || (trend.ok() && end_rss <= base_rss + rss_slack_bytes);
  const bool fds_ok = end_fds == base_fds;
  const bool store_ok = idle.contains("store") && only_warm_pool_committed(store)
                        && snapshots == 0 && live_left == 0;
  const bool pass = alive && daemon_exit == 0 && t.clean()
                    && stuck_apps == 0 && lost == 0 && duplicated == 0 && mismatched == 0
                    && checked == completed && rss_ok && fds_ok && store_ok;
  const auto in_flight_killed =
    t.submitted
    - std::min(t.submitted, t.ended.size() + t.abandoned + soak::total(t.failed_streams));
  std::string line = fmt::format(
    "soak {:.0f} s: {} app runs ({} killed), {} reloads; requests {}, ended {} ({}); expected: "
    "cancelled by the app {}, ended by an injected fault {}, abandoned by a disconnect {}, in "
    "flight in killed apps {}; unexpected: refused connects {} ({}), refused submits {} ({}), "
    "failed streams {} ({}), errored streams {} ({}), apps crashed {}, apps stuck {}; ",
    seconds, app_runs, killed, reloads, t.submitted, t.ended.size(), soak::by_kind(by_reason),
    t.cancelled_by_app, t.ended_by_injected, t.abandoned, in_flight_killed,
    soak::total(t.refused_connects), soak::by_kind(t.refused_connects), soak::total(t.refused_submits),
    soak::by_kind(t.refused_submits), soak::total(t.failed_streams), soak::by_kind(t.failed_streams),
    soak::total(t.errored_streams), soak::by_kind(t.errored_streams), t.apps_crashed, stuck_apps);
  line += fmt::format(
    "store peak {:.1f} of {:.1f} MiB, {} evictions; completed {} checked against solo runs: {} "
    "mismatched; tokens lost {}, duplicated {}; daemon fds {} -> {}, rss {:.1f} -> {:.1f} MiB{}, "
    "store committed {} B (warm pool {} B), snapshots {}, live {}; daemon {}, exit {}: {}",
    static_cast<double>(peak) / (1 << 20), static_cast<double>(limit) / (1 << 20), evictions,
    completed, mismatched, lost, duplicated, base_fds, end_fds,
    static_cast<double>(base_rss) / (1 << 20), static_cast<double>(end_rss) / (1 << 20),
    rss_checked ? "" : " (not checked under ASan; LeakSanitizer checks the exit)", committed,
    pool, snapshots, live_left, alive ? "alive" : "DEAD", daemon_exit, pass ? "PASS" : "FAIL");
  std::printf("%s\n%s%s\n", line.c_str(), to_string(trend).c_str(),
              rss_checked ? "" : " (not checked under ASan)");
  for (auto& e : t.examples)
    std::printf("kvlane-soak: unexpected: %s\n", e.c_str());
  if (completed == 0)
    std::printf("kvlane-soak: no request completed\n");
  if (!keep && pass) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else if (!pass) {
    std::printf("kvlane-soak: the daemon's log is %s/kvlaned.log\n", dir.c_str());
  }
  return pass ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  bool app = false;
  std::string socket, dir;
  std::string daemon_exe =
    (std::filesystem::canonical("/proc/self/exe").parent_path() / "kvlaned").string();
  double seconds = 600;
  std::uint32_t apps = 6;
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view a{argv[i]};
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kvlane-soak: %s needs a value\n", argv[i]);
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--app")
      app = true;
    else if (a == "--socket")
      socket = value();
    else if (a == "--seconds")
      seconds = std::stod(value());
    else if (a == "--apps")
      apps = static_cast<std::uint32_t>(std::stoul(value()));
    else if (a == "--seed")
      seed = std::stoull(value());
    else if (a == "--daemon")
      daemon_exe = value();
    else if (a == "--dir")
      dir = value();
    else {
      std::fprintf(stderr, "usage: kvlane-soak [--seconds N] [--apps N] [--seed N] [--daemon PATH] "
                           "[--dir DIR]\n");
      return 64;
    }
  }
  if (app)
    return run_app(socket, seed, seconds);
  return run_soak(seconds, apps, seed, daemon_exe, dir);
}
