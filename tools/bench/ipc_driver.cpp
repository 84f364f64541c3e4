#include "tools/bench/ipc_driver.hpp"

#include <kvlane/client.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace std::chrono_literals;

double ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// -- kvlane.toml ----------------------------------------------------------------

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
        else
          out += ch;
    }
  }
  return out + "\"";
}

// fmt's "{}" is the shortest text that reads back as the same double.
std::string toml_real(double x) {
  return fmt::format("{}", x);
}

// The config keeps numeric ids as their decimal text; write them back as integers.
std::string toml_principals(const std::vector<std::string>& list) {
  std::string out = "[";
  for (const auto& p : list) {
    if (out.size() > 1)
      out += ", ";
    const bool numeric = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    out += numeric ? p : toml_string(p);
  }
  return out + "]";
}

std::string_view overlap_name(backends::transfer_overlap o) {
  switch (o) {
    case backends::transfer_overlap::full: return "full";
    case backends::transfer_overlap::none: return "none";
    case backends::transfer_overlap::shared: return "shared";
  }
  return "full";
}

// -- the daemon child -----------------------------------------------------------------

/// A kvlaned child process. Its stdout and stderr go to one pipe that a
/// reader thread drains for the whole life of the child (a full pipe would
/// block the daemon's logging): it flags the "ready:" line, forwards warnings
/// and errors to this process's stderr and keeps the last lines for error
/// messages. The exit is observed through a pidfd.
class daemon_child {
public:
  static expected<std::unique_ptr<daemon_child>, std::string>
  start(const std::string& exe, const std::vector<std::string>& args) {
    if (::access(exe.c_str(), X_OK) != 0)
      return unexpected(fmt::format("cannot execute kvlaned at '{}': {}", exe,
                                    std::strerror(errno)));
    // Everything the child needs is prepared before fork(): after it, only
    // async-signal-safe calls until execve().
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string_view v{*e};
      // The daemon must not talk to this process's service manager.
      if (v.starts_with("NOTIFY_SOCKET=") || v.starts_with("WATCHDOG_PID=")
          || v.starts_with("WATCHDOG_USEC="))
        continue;
      env.emplace_back(v);
    }
    std::vector<char*> envp, argv;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0)
      return unexpected(fmt::format("open /dev/null: {}", std::strerror(errno)));
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      ::close(devnull);
      return unexpected(fmt::format("pipe2: {}", std::strerror(errno)));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      ::close(devnull);
      ::close(fds[0]);
      ::close(fds[1]);
      return unexpected(fmt::format("fork: {}", std::strerror(e)));
    }
    if (pid == 0) {
      ::dup2(devnull, STDIN_FILENO);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      // The daemon must not outlive the benchmark.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(127);
      ::execve(exe.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(devnull);
    ::close(fds[1]);
    std::unique_ptr<daemon_child> c{new daemon_child(pid, fds[0])};
    // The raw system call: glibc 2.36's <sys/pidfd.h> lacks extern "C".
    c->pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (c->pidfd_ < 0)
      return unexpected(fmt::format("pidfd_open: {}", std::strerror(errno)));
    c->reader_ = std::thread{[p = c.get()] { p->read_output(); }};
    return c;
  }

  ~daemon_child() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (reader_.joinable())
      reader_.join(); // the child is gone: its end of the pipe is closed
    if (pidfd_ >= 0)
      ::close(pidfd_);
    ::close(out_fd_);
  }

  daemon_child(const daemon_child&) = delete;
  daemon_child& operator=(const daemon_child&) = delete;

  pid_t pid() const noexcept { return pid_; }

  /// True once the daemon printed its "ready:" line; false if it closed its
  /// output first (it died) or `timeout` passed.
  bool wait_ready(std::chrono::milliseconds timeout) {
    std::unique_lock lock{mutex_};
    cv_.wait_for(lock, timeout, [&] { return ready_ || eof_; });
    return ready_;
  }

  /// SIGTERM; a second one if it has not exited after `grace`; SIGKILL after
  /// `bound` more. Returns the exit status (128 + signal if killed by one).
  expected<int, std::string> stop(std::chrono::milliseconds grace, std::chrono::milliseconds bound) {
    if (status_)
      return *status_;
    ::kill(pid_, SIGTERM);
    if (!wait_exit(grace)) {
      ::kill(pid_, SIGTERM); // ends the shutdown grace at once
      if (!wait_exit(bound)) {
        ::kill(pid_, SIGKILL);
        wait_exit(10s);
        return unexpected(fmt::format("kvlaned (pid {}) did not exit within {} ms of SIGTERM; "
                                      "killed it",
                                      pid_, (grace + bound).count()));
      }
    }
    return *status_;
  }

  /// Sends one signal (no wait).
  void signal(int sig) {
    if (!status_)
      ::kill(pid_, sig);
  }

  /// The exit status if it has exited (reaps it).
  std::optional<int> poll_exit() {
    wait_exit(0ms);
    return status_;
  }

  /// The last lines the daemon printed, indented, for error messages.
  std::string tail() {
    std::lock_guard lock{mutex_};
    std::string out;
    for (auto& l : tail_)
      out += "\n    " + l;
    return out.empty() ? std::string{" (it printed nothing)"} : "; its last lines:" + out;
  }

private:
  daemon_child(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}

  bool wait_exit(std::chrono::milliseconds timeout) {
    if (status_)
      return true;
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
      return false;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_)
      return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
  }

  void read_output() {
    std::string pending;
    char buf[4096];
    for (;;) {
      const auto n = ::read(out_fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      pending.append(buf, static_cast<std::size_t>(n));
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
        line(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
    }
    if (!pending.empty())
      line(pending);
    std::lock_guard lock{mutex_};
    eof_ = true;
    cv_.notify_all();
  }

  void line(const std::string& l) {
    // The journal format of a daemon whose stderr is not a terminal:
    // "<priority>logger: message"; warnings are <4>, errors <3>, critical <2>.
    if (l.size() > 3 && l[0] == '<' && l[1] >= '0' && l[1] <= '4' && l[2] == '>')
      std::fprintf(stderr, "kvlaned: %s\n", l.c_str() + 3);
    std::lock_guard lock{mutex_};
    tail_.push_back(l);
    if (tail_.size() > 20)
      tail_.pop_front();
    if (!ready_ && l.find("ready:") != std::string::npos) {
      ready_ = true;
      cv_.notify_all();
    }
  }

  pid_t pid_;
  int out_fd_;
  int pidfd_ = -1;
  std::optional<int> status_;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ready_ = false, eof_ = false;
  std::deque<std::string> tail_;
};

// -- the admin socket --------------------------------------------------------------

/// One connection to <runtime_dir>/kvlane-admin.sock: a JSON line out, a
/// JSON line back (docs/admin.md). JSON exceptions stop here.
class admin_link {
public:
  static expected<admin_link, std::string> open(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
      return unexpected(fmt::format("admin socket path too long: {}", path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return unexpected(fmt::format("socket: {}", std::strerror(errno)));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      const int e = errno;
      ::close(fd);
      return unexpected(fmt::format("cannot connect to {}: {}", path, std::strerror(e)));
    }
    return admin_link{fd};
  }

  admin_link(admin_link&& o) noexcept : fd_(std::exchange(o.fd_, -1)), buf_(std::move(o.buf_)) {}
  admin_link& operator=(admin_link&&) = delete;
  ~admin_link() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  /// Sends {"cmd": cmd}; the reply, which may be {"error": ...}.
  expected<json, std::string> ask(std::string_view cmd, std::chrono::milliseconds timeout) {
    const auto line = fmt::format("{{\"cmd\":\"{}\"}}\n", cmd);
    if (::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
      return unexpected(std::string{"the daemon closed the admin connection"});
    const auto deadline = clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto reply = json::parse(buf_.substr(0, nl), nullptr, false);
        buf_.erase(0, nl + 1);
        if (reply.is_discarded() || !reply.is_object())
          return unexpected(std::string{"the daemon sent a malformed admin response"});
        if (auto e = reply.find("error"); e != reply.end())
          return unexpected(fmt::format("admin '{}' failed: {}", cmd, e->dump()));
        return reply;
      }
      const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return unexpected(fmt::format("the daemon did not answer '{}' within {} ms", cmd,
                                      timeout.count()));
      char chunk[65536];
      const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0)
        return unexpected(std::string{"the daemon closed the admin connection"});
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

private:
  explicit admin_link(int fd) : fd_(fd) {}
  int fd_;
  std::string buf_;
};

/// models[] entry `model` of a `status` reply as scheduler statistics.
expected<actors::scheduler_stats, std::string> stats_from_status(const json& reply,
                                                                 const std::string& model) {
  try {
    for (const auto& m : reply.at("models")) {
      if (m.at("name").get<std::string>() != model)
        continue;
      actors::scheduler_stats s;
      s.model = model;
      auto u32 = [&](const char* k) { return m.at(k).get<std::uint32_t>(); };
      auto u64 = [&](const char* k) { return m.at(k).get<std::uint64_t>(); };
      auto ms = [&](const char* k) { return m.at(k).get<double>() * 1000.0; };
      s.slots = u32("slots");
      s.slots_busy = u32("slots_busy");
      s.resident = u32("resident");
      s.parked = u32("parked");
      s.loading = u32("loading");
      s.dumping = u32("dumping");
      s.queued_interactive = u32("queued_interactive");
      s.queued_batch = u32("queued_batch");
      // Sequences without a slot are the waiting ones (no KV) and the parked ones.
      const auto without_slot = s.queued_interactive + s.queued_batch;
      s.waiting = without_slot > s.parked ? without_slot - s.parked : 0;
      s.submitted = u64("submitted");
      s.finished = u64("finished");
      s.cancelled = u64("cancelled");
      s.failed = u64("failed");
      s.tokens_generated = u64("tokens_generated");
      s.steps = u64("steps");
      s.step_busy_ms = ms("step_busy_s");
      s.preemptions = u64("preemptions");
      s.swaps = u64("swaps");
      s.recomputes = u64("recomputes");
      s.transfer_ms = ms("transfer_s");
      s.transfer_hidden_ms = ms("transfer_hidden_s");
      return s;
    }
  } catch (const json::exception& e) {
    return unexpected(fmt::format("unexpected admin status reply: {}", e.what()));
  }
  return unexpected(fmt::format("the admin status lists no model '{}'", model));
}

/// `kvlane_transfers_total{model="<model>",kind="<kind>"} N` from the metrics text.
std::optional<std::uint64_t> transfers_metric(std::string_view text, const std::string& model,
                                              std::string_view kind) {
  const auto head = fmt::format("kvlane_transfers_total{{model=\"{}\",kind=\"{}\"}} ", model, kind);
  const auto at = text.find(head);
  if (at == std::string_view::npos)
    return std::nullopt;
  const auto start = at + head.size();
  const auto end = text.find('\n', start);
  const std::string value{text.substr(start, end == std::string_view::npos ? end : end - start)};
  char* stop = nullptr;
  const double v = std::strtod(value.c_str(), &stop);
  if (stop == value.c_str() || !(v >= 0))
    return std::nullopt;
  return static_cast<std::uint64_t>(v + 0.5);
}

/// The run's private directory, removed with its contents at the end.
class run_dir {
public:
  static expected<run_dir, std::string> create() {
    std::error_code ec;
    auto base = std::filesystem::temp_directory_path(ec);
    if (ec)
      base = "/tmp";
    std::string tmpl = (base / "kvlane-bench-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      return unexpected(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
    return run_dir{std::move(tmpl)};
  }
  run_dir(run_dir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  run_dir& operator=(run_dir&&) = delete;
  ~run_dir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const noexcept { return path_; }

private:
  explicit run_dir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

/// Where every request's callback records its end; shared by all callbacks of a run.
struct collector {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<request_outcome>* outcomes = nullptr;
  std::size_t ended = 0;
  clock::time_point start;
  clock::time_point last_end;
  double time_scale = 1;
};

actors::end_reason from_client(client::end_reason r) {
  switch (r) {
    case client::end_reason::length: return actors::end_reason::length;
    case client::end_reason::stop: return actors::end_reason::stop;
    case client::end_reason::cancelled:
    case client::end_reason::backlog: return actors::end_reason::cancelled;
    case client::end_reason::error: return actors::end_reason::error;
  }
  return actors::end_reason::error;
}

/// The callback of request `index`: times its tokens as they arrive here.
/// Runs on its connection's reader thread only, so its clock needs no lock.
client::callback request_callback(std::shared_ptr<collector> col, std::size_t index,
                                  clock::time_point submitted) {
  struct request_clock {
    clock::time_point submitted, first, last;
    std::uint64_t delivered = 0;
  };
  return [col = std::move(col), index, t = request_clock{submitted, {}, {}, 0}](
           const client::event& ev) mutable {
    const auto now = clock::now();
    if (ev.tokens && !ev.tokens->empty()) {
      if (t.delivered == 0)
        t.first = now;
      t.last = now;
      t.delivered += ev.tokens->size();
    }
    if (!ev.end && !ev.failure)
      return;
    {
      std::lock_guard lock{col->mutex};
      if (!col->outcomes)
        return; // the run is over (it timed out and gave up on this request)
      auto& o = (*col->outcomes)[index];
      const double ts = col->time_scale;
      o.ended = true;
      if (ev.end) {
        o.reason = from_client(ev.end->reason);
        o.error = ev.end->reason == client::end_reason::backlog
                    ? "cancelled by the daemon: the bench stopped reading events"
                    : ev.end->message;
        o.generated = ev.end->generated_tokens;
        o.preemptions = ev.end->preemptions;
        if (t.delivered > 0)
          o.ttft_ms = ms_between(t.submitted, t.first) * ts;
        if (t.delivered > 1)
          o.tpot_ms = ms_between(t.first, t.last) / static_cast<double>(t.delivered - 1) * ts;
        o.e2e_ms = ms_between(t.submitted, now) * ts;
      } else {
        o.reason = actors::end_reason::error;
        o.error = fmt::format("{} ({})", ev.failure->message, client::to_string(ev.failure->code));
      }
      o.end_s = ms_between(col->start, now) * ts / 1000.0;
      col->last_end = std::max(col->last_end, now);
      ++col->ended;
    }
    col->cv.notify_all();
  };
}

} // namespace

std::string default_kvlaned_path() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return {};
  return (self.parent_path() / "kvlaned").string();
}

std::string config_toml(const daemon::config& cfg) {
  std::string out = "# written by kvlane-bench --path ipc\nversion = 1\n";
  out += "\n[http]\nlisten = \"\"\n"; // the benchmark drives the ring path only
  const auto& d = cfg.daemon;
  out += fmt::format("\n[daemon]\nruntime_dir = {}\nworker_threads = {}\nlog_level = {}\n"
                     "shutdown_timeout_ms = {}\nshutdown_grace_ms = {}\n",
                     toml_string(d.runtime_dir), d.worker_threads, toml_string(d.log_level),
                     d.shutdown_timeout.count(), d.shutdown_grace.count());
  out += "\n[daemon.log_levels]\n";
  for (const auto& [logger, level] : d.log_levels)
    out += fmt::format("{} = {}\n", toml_string(logger), toml_string(level));

  for (const auto& m : cfg.models) {
    out += fmt::format("\n[[model]]\nname = {}\nbackend = {}\nstore_floor_bytes = {}\n"
                       "store_cap_bytes = {}\n",
                       toml_string(m.name), toml_string(m.backend.kind), m.store_floor_bytes,
                       m.store_cap_bytes);
    const auto& s = m.backend.sim;
    out += fmt::format(
      "\n[model.sim]\nslots = {}\nmax_context = {}\nmax_prefill_chunk = {}\nsnapshot_bytes = {}\n"
      "snapshot = {}\nstep_base_ms = {}\nstep_per_token_ms = {}\ndump_min_ms = {}\n"
      "dump_max_ms = {}\nload_min_ms = {}\nload_max_ms = {}\ntime_scale = {}\noverlap = {}\n"
      "seed = {}\neos_rate = {}\n",
      s.slots, s.max_context, s.max_prefill_chunk, s.snapshot_bytes,
      toml_string(s.extent == backends::snapshot_extent::full_slot ? "full" : "used"),
      toml_real(s.step_base_ms), toml_real(s.step_per_token_ms), toml_real(s.dump_min_ms),
      toml_real(s.dump_max_ms), toml_real(s.load_min_ms), toml_real(s.load_max_ms),
      toml_real(s.time_scale), toml_string(overlap_name(s.overlap)), s.seed,
      toml_real(s.eos_rate));
    for (const auto& [op, f] : {std::pair{"step", &s.step_faults}, std::pair{"dump", &s.dump_faults},
                                std::pair{"load", &s.load_faults}})
      out += fmt::format("\n[model.sim.faults.{}]\nfail_nth = {}\nfail_rate = {}\ncode = {}\n", op,
                         f->fail_nth, toml_real(f->fail_rate),
                         toml_string(backends::to_string(f->code)));
  }

  const auto& p = cfg.scheduler;
  out += fmt::format("\n[scheduler]\nmode = {}\nquantum_steps = {}\nlevels = {}\nspare_slots = {}\n"
                     "max_step_tokens = {}\naging_steps = {}\newma_alpha = {}\n",
                     toml_string(actors::to_string(p.mode)), p.quantum_steps, p.levels,
                     p.spare_slots, p.max_step_tokens, p.aging_steps, toml_real(p.ewma_alpha));
  out += fmt::format("\n[store]\nmax_bytes = {}\n", cfg.store.max_bytes);

  const auto& c = cfg.clients;
  out += fmt::format(
    "\n[clients]\nsocket_mode = 0o{:o}\nallow_users = {}\nallow_groups = {}\nmax_clients = {}\n"
    "max_requests = {}\nmax_prompt_bytes = {}\nsubmit_ring_records = {}\n"
    "events_ring_records = {}\nmax_backlog_records = {}\nspin_us = {}\nhello_timeout_ms = {}\n",
    c.socket_mode, toml_principals(c.allow_users), toml_principals(c.allow_groups), c.max_clients,
    c.max_requests, c.max_prompt_bytes, c.submit_ring_records, c.events_ring_records,
    c.max_backlog_records, c.spin_us, c.hello_timeout.count());
  const auto& a = cfg.admin;
  out += fmt::format("\n[admin]\nsocket_mode = 0o{:o}\nallow_users = {}\nallow_groups = {}\n",
                     a.socket_mode, toml_principals(a.allow_users),
                     toml_principals(a.allow_groups));
  out += fmt::format("\n[metrics]\nlisten = {}\n", toml_string(cfg.metrics.listen));
  return out;
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
  auto dir = run_dir::create();
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
  cfg.clients.allow_users.clear();
  cfg.clients.allow_groups.clear();
  cfg.clients.max_requests = static_cast<std::uint32_t>(std::clamp<std::size_t>(
    std::max<std::size_t>(cfg.clients.max_requests, requests.size()), 1, 65536));
  const auto config_path = dir->path() + "/kvlane.toml";
  {
    std::ofstream f{config_path, std::ios::binary | std::ios::trunc};
    f << config_toml(cfg);
    f.flush();
    if (!f)
      return unexpected(fmt::format("cannot write {}", config_path));
  }

  // -- start it and connect ------------------------------------------------------------
  const auto started = clock::now();
  auto child = daemon_child::start(opts.kvlaned_path, {"--config", config_path});
  if (!child)
    return unexpected(std::move(child).error());
  auto& kvlaned = **child;
  if (!kvlaned.wait_ready(opts.ready_timeout)) {
    const auto st = kvlaned.poll_exit();
    return unexpected(st ? fmt::format("kvlaned exited with status {} before it was ready{}", *st,
                                       kvlaned.tail())
                         : fmt::format("kvlaned was not ready within {} ms{}",
                                       opts.ready_timeout.count(), kvlaned.tail()));
  }
  std::unique_ptr<client::connection> conns[2]; // [0] interactive, [1] batch
  for (auto& c : conns) {
    client::connect_options co;
    co.socket_path = runtime + "/kvlane.sock";
    co.client_name = "bench";
    auto r = client::connect(co);
    if (!r)
      return unexpected(fmt::format("cannot connect to kvlaned: {} ({}){}", r.error().message,
                                    client::to_string(r.error().code), kvlaned.tail()));
    c = std::move(*r);
  }
  auto admin = admin_link::open(admin_socket);
  if (!admin)
    return unexpected(std::move(admin).error());
  progress(fmt::format("{} (ipc): kvlaned ready (pid {}) in {:.0f} ms; connected as 'bench'",
                       mode_name, kvlaned.pid(), ms_between(started, clock::now())));

  run_result result;
  result.mode = mode;
  result.time_scale = ts;
  result.store_peaks_known = false;
  result.serialized = mode == actors::scheduler_mode::sync
                      || (mode != actors::scheduler_mode::fcfs && !opts.transfers_overlap);
  result.requests.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& o = result.requests[i];
    o.index = static_cast<std::uint32_t>(i);
    o.interactive = requests[i].interactive;
    o.prompt_tokens = requests[i].prompt_tokens;
    o.output_tokens = requests[i].output_tokens;
    o.arrival_s = requests[i].arrival_s;
  }
  auto col = std::make_shared<collector>();
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
    auto link = admin_link::open(admin_socket);
    if (!link) {
      sampler_error = link.error();
      return;
    }
    auto next = start;
    std::unique_lock lock{sampler_mutex};
    while (sampling) {
      lock.unlock();
      auto reply = link->ask("status", 2s);
      auto st = reply ? stats_from_status(*reply, model)
                      : expected<actors::scheduler_stats, std::string>{unexpected(reply.error())};
      const auto now = clock::now();
      if (st) {
        gauges.add(*st, now, result.timeline, result.peak_waiting);
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

  // -- the driver: every request at its arrival time -------------------------------------
  col->start = start;
  col->last_end = start;
  std::size_t submitted = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    const auto due = start + std::chrono::duration_cast<clock::duration>(
                               std::chrono::duration<double, std::milli>(r.arrival_s * 1000.0 / ts));
    std::this_thread::sleep_until(due);
    result.max_submit_lag_ms = std::max(result.max_submit_lag_ms, ms_between(due, clock::now()));
    client::request req;
    req.model = model;
    req.prio = r.interactive ? client::priority::interactive : client::priority::batch;
    req.prompt_tokens = synthetic_prompt(static_cast<std::uint32_t>(i), r.prompt_tokens);
    req.sampling.max_tokens = r.output_tokens;
    req.sampling.stop_at_eos = false;
    auto& conn = *conns[r.interactive ? 0 : 1];
    auto id = conn.submit(req, request_callback(col, i, clock::now()));
    std::lock_guard lock{col->mutex};
    auto& o = result.requests[i];
    if (id) {
      o.submitted = true;
      ++submitted;
    } else {
      o.error = fmt::format("submit failed: {} ({})", id.error().message,
                            client::to_string(id.error().code));
    }
  }
  progress(fmt::format("{} (ipc): all {} requests submitted ({} accepted), waiting for the ends",
                       mode_name, requests.size(), submitted));

  // Wait for every accepted request to end, within the bound.
  auto bound = ro.timeout;
  if (bound.count() == 0) {
    const double span_ms = requests.empty() ? 0 : requests.back().arrival_s * 1000.0 / ts;
    bound = std::chrono::milliseconds(60000 + static_cast<std::int64_t>(4 * span_ms));
  }
  {
    std::unique_lock lock{col->mutex};
    result.timed_out =
      !col->cv.wait_until(lock, start + bound, [&] { return col->ended >= submitted; });
  }
  stop_sampler();

  // The scheduler's counters at the end (before any cancel of a timed-out run).
  std::string stats_error;
  if (auto reply = admin->ask("status", 10s)) {
    if (auto st = stats_from_status(*reply, model))
      result.stats = *st;
    else
      stats_error = st.error();
    // The store keeps exact peaks; `status` reports them.
    if (auto store = reply->find("store"); store != reply->end() && store->contains("peak_used_bytes")) {
      result.peak_store_bytes = store->at("peak_used_bytes").get<std::uint64_t>();
      result.peak_snapshots = store->at("peak_snapshots").get<std::uint64_t>();
      result.store_peaks_known = true;
    }
  } else {
    stats_error = reply.error();
  }
  if (auto reply = admin->ask("metrics", 10s)) {
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
    return unexpected(exit_status.error() + kvlaned.tail());
  if (*exit_status != 0)
    return unexpected(fmt::format("kvlaned exited with status {} after SIGTERM{}", *exit_status,
                                  kvlaned.tail()));
  if (!stats_error.empty() && !result.timed_out)
    return unexpected(fmt::format("scheduler statistics unavailable: {}", stats_error));
  if (!sampler_error.empty())
    progress(fmt::format("{} (ipc): gauge sampling incomplete: {}", mode_name, sampler_error));
  return result;
}

} // namespace kvlane::tools::bench
