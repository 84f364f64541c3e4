#include "daemon/app.hpp"

#include "actors/engine.hpp"
#include "actors/model_fingerprint.hpp"
#include "daemon/fd_store.hpp"
#include "daemon/admin_server.hpp"
#include "daemon/gateway.hpp"
#include "daemon/gguf_model.hpp"
#include "common/elapsed.hpp"
#include "common/logging.hpp"
#include "daemon/http/server.hpp"
#include "daemon/metrics.hpp"
#include "daemon/metrics_http.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>


#include <cerrno>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <pthread.h>
#include <string_view>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace kvlane::daemon {

namespace {

// Parks the store's arena and index in systemd's fd store, so a restart takes
// them back (daemon/fd_store). Inherited descriptors the store did not reuse
// are dropped from the fd store first, or the next start would get both.
// (`inherited`: the inodes of the descriptors systemd passed in, 0 for none.)
ino_t inode_of(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

void keep_store(const ipc::snapshot_store& store, std::pair<ino_t, ino_t> inherited) {
  auto log = logging::get("store");
  if (inherited.first != 0 && inherited.first != inode_of(store.fd()))
    remove_from_fd_store(arena_fd_name);
  if (inherited.second != 0 && inherited.second != inode_of(store.index_fd()))
    remove_from_fd_store(index_fd_name);
  for (const auto& [fd, name] : {std::pair{store.fd(), arena_fd_name},
                                 std::pair{store.index_fd(), index_fd_name}}) {
    if (fd < 0)
      continue;
    auto kept = keep_in_fd_store(fd, name);
    if (!kept)
      log->warn("the store survives no restart: {}", kept.error());
    else if (*kept)
      log->debug("'{}' is in systemd's fd store", name);
  }
}

constexpr std::string_view default_config_path = "/etc/kvlane/kvlane.toml";

expected<void, std::string> make_runtime_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return unexpected(fmt::format("cannot create runtime directory {}: {}", dir, ec.message()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return unexpected(fmt::format("runtime directory {} is not writable: {}", dir,
                                  std::strerror(errno)));
  return {};
}

} // namespace

std::string resolve_runtime_dir(const daemon_section& d) {
  if (!d.runtime_dir.empty())
    return d.runtime_dir;
  if (const char* rd = std::getenv("RUNTIME_DIRECTORY"); rd && *rd) {
    // systemd may pass several directories separated by ':'; ours is the first.
    std::string_view v{rd};
    return std::string{v.substr(0, v.find(':'))};
  }
  if (::geteuid() == 0)
    return "/run/kvlane";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
    return std::string{xdg} + "/kvlane";
  return fmt::format("/tmp/kvlane-{}", ::geteuid());
}

app::app(config cfg) : cfg_(std::move(cfg)) {}

namespace {

void log_completion(const actors::completion& c) {
  const auto& e = *c.end;
  auto log = logging::get("scheduler");
  auto level = e.reason == actors::end_reason::error ? spdlog::level::warn : spdlog::level::info;
  log->log(level,
           "request {} ({}, client '{}', model '{}') ended: {}{}{}; {} prompt + {} generated "
           "tokens, ttft {:.1f} ms, tpot {:.1f} ms, e2e {:.1f} ms, preemptions {}",
           c.id, actors::to_string(c.priority), c.client, c.model, actors::to_string(e.reason),
           e.message.empty() ? "" : ": ", e.message, e.prompt_tokens, e.generated_tokens,
           e.ttft_ms, e.tpot_ms, e.e2e_ms, e.preemptions);
}

expected<std::shared_ptr<const ipc::access_policy>, std::string>
admin_policy(const admin_section& a) {
  auto p = ipc::access_policy::create(a.allow_users, a.allow_groups, /*open_when_empty=*/false);
  if (!p)
    return unexpected("[admin] " + std::move(p).error());
  return std::make_shared<const ipc::access_policy>(std::move(*p));
}

session_limits session_limits_of(const config& c) {
  session_limits l;
  l.max_per_user = c.sessions.max_per_user;
  l.max_sessions = c.sessions.max_sessions;
  l.idle_ttl = std::chrono::seconds(c.reuse.idle_ttl_s);
  return l;
}

} // namespace

app::~app() {
  stop();
}

void app::on_stop(std::string what, std::function<void()> fn) {
  stops_.emplace_back(std::move(what), std::move(fn));
}

expected<std::unique_ptr<app>, std::string> app::create(config cfg, std::string config_path) {
  auto log = logging::get("daemon");
  std::unique_ptr<app> self{new app(std::move(cfg))};
  self->config_path_ = std::move(config_path);

  self->runtime_dir_ = resolve_runtime_dir(self->cfg_.daemon);
  if (auto ok = make_runtime_dir(self->runtime_dir_); !ok)
    return unexpected(std::move(ok).error());
  log->info("runtime directory {}", self->runtime_dir_);

  // Actor system. Its worker threads inherit the blocked signal mask.
  self->actor_cfg_ = std::make_unique<caf::actor_system_config>();
  auto threads = self->cfg_.daemon.worker_threads;
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  self->actor_cfg_->set("scheduler.max-threads", static_cast<size_t>(threads));
  // Work sharing: idle workers block on a condition variable. CAF's default (work stealing)
  // polls for ~25 ms after every message, and the schedulers message each other every step,
  // so its workers never sleep while a model runs: they take CPU from the backend's compute
  // threads (ggml's OpenMP team waits at barriers for a descheduled thread).
  self->actor_cfg_->set("scheduler.policy", caf::atom("sharing"));
  self->system_ = std::make_unique<caf::actor_system>(*self->actor_cfg_);
  log->info("actor system started with {} worker threads", threads);
  self->on_stop("actor system", [s = self.get()] {
    s->system_.reset();
    s->actor_cfg_.reset();
  });

  // Request metrics, fed by the engine's completion hook.
  std::vector<std::string> names;
  for (auto& m : self->cfg_.models)
    names.push_back(m.name);
  std::vector<std::string> identities; // as http::key_ring names them
  if (!self->cfg_.http.listen.empty()) {
    const auto& h = self->cfg_.http;
    if (!h.api_key.empty() || !h.api_key_file.empty() || h.keys.empty())
      identities.emplace_back("default");
    for (auto& k : h.keys)
      identities.push_back(k.name);
  }
  self->metrics_ = std::make_unique<metrics>(std::move(names), std::move(identities));

  // The engine: snapshot store, model backends, schedulers and their lanes. The
  // store starts on an earlier daemon's arena when systemd kept it (fd_store).
  std::vector<std::string> fd_notes;
  auto handoff = take_inherited_store(fd_notes);
  for (const auto& note : fd_notes)
    logging::get("store")->info("{}", note);
  handoff.hash_cache = actors::default_hash_cache_dir();
  const std::pair inherited{inode_of(handoff.arena_fd), inode_of(handoff.index_fd)};
  auto eng = actors::engine::create(*self->system_, self->cfg_, {},
                                    [m = self->metrics_.get()](const actors::completion& c) {
                                      m->record(c);
                                      log_completion(c);
                                    },
                                    {}, std::move(handoff));
  if (!eng)
    return unexpected(std::move(eng).error());
  self->engine_ = std::move(*eng);
  keep_store(self->engine_->store(), inherited);
  self->on_stop("engine", [s = self.get()] {
    s->engine_->shutdown("daemon shutting down"); // logs each model it unloads
    s->engine_.reset();
  });

  // The client gateway: control socket and IPC loop. Stopped before the
  // engine, so apps see their connection end before their streams do.
  self->sessions_ = std::make_shared<session_table>(session_limits_of(self->cfg_));
  auto gw = gateway::create(self->cfg_.clients, self->client_socket_path(), *self->engine_,
                            self->sessions_);
  if (!gw)
    return unexpected("client gateway: " + std::move(gw).error());
  self->gateway_ = std::move(*gw);
  logging::get("ipc")->info("listening for clients on {} (mode {:04o})",
                            self->gateway_->socket_path(), self->cfg_.clients.socket_mode);
  self->on_stop("gateway", [s = self.get()] {
    s->gateway_->stop();
    s->gateway_.reset();
  });

  // The admin socket and, when configured, HTTP metrics.
  auto& sv = self->services_;
  sv.engine = self->engine_.get();
  sv.registry = self->metrics_.get();
  sv.sessions = self->sessions_.get();
  sv.version = KVLANE_VERSION;
  sv.mode = std::string{to_string(self->cfg_.scheduler.mode)};
  sv.started = self->started_;
  sv.clients_connected = [s = self.get()] {
    return s->gateway_ ? s->gateway_->counters().clients_connected.load() : 0;
  };
  sv.reload = [s = self.get()] { return s->reload(); };
  // Read on the admin thread, the one that reloads.
  sv.slo = [s = self.get()] { return s->cfg_.scheduler.slo; };
  sv.refuse_over = [s = self.get()] { return s->cfg_.scheduler.refuse_over; };
  for (auto& k : self->cfg_.http.keys)
    sv.http_keys.push_back(k.name);
  sv.set_log_level = [](std::string_view logger, std::string_view level) {
    return logging::set_level(logger, level);
  };
  auto policy = admin_policy(self->cfg_.admin);
  if (!policy)
    return unexpected(std::move(policy).error());
  admin_server::options ao;
  ao.path = self->admin_socket_path();
  ao.socket_mode = self->cfg_.admin.socket_mode;
  auto admin = admin_server::create(ao, std::move(*policy), [s = self.get()](std::string_view line) {
    return handle_admin_request(line, s->services_);
  });
  if (!admin)
    return unexpected(std::move(admin).error());
  self->admin_ = std::move(*admin);
  logging::get("admin")->info("admin socket {} (mode {:04o})", self->admin_->path(),
                              self->cfg_.admin.socket_mode);
  self->on_stop("admin socket", [s = self.get()] { s->admin_.reset(); });

  if (!self->cfg_.metrics.listen.empty()) {
    auto where = parse_listen(self->cfg_.metrics.listen);
    auto http = metrics_http::create(*where, [s = self.get()] { return render_metrics(s->services_); });
    if (!http)
      return unexpected(std::move(http).error());
    self->http_ = std::move(*http);
    logging::get("admin")->info("metrics on http://{}/metrics", self->cfg_.metrics.listen);
    self->on_stop("metrics HTTP", [s = self.get()] { s->http_.reset(); });
  }

  // The HTTP API. Stopped before the engine: its streams end with their connections.
  if (!self->cfg_.http.listen.empty()) {
    auto api = http::server::create(self->cfg_.http, self->cfg_.models, *self->engine_,
                                    [s = self.get()] {
                                      return s->serving_.load() && s->engine_->admitting();
                                    },
                                    self->gateway_->shared_admission());
    if (!api)
      return unexpected(std::move(api).error());
    self->api_ = std::move(*api);
    logging::get("http")->info("HTTP API (OpenAI and Ollama compatible) on {}{}", self->api_->url(),
                               self->cfg_.http.api_key.empty() && self->cfg_.http.api_key_file.empty()
                                     && self->cfg_.http.keys.empty()
                                 ? ""
                                 : " (API key required)");
    self->on_stop("HTTP API", [s = self.get()] { s->api_.reset(); });
  }
  return self;
}

bool app::stop() {
  if (stops_.empty())
    return true;
  auto log = logging::get("daemon");
  notify_.stopping();
  const auto bound = cfg_.daemon.shutdown_timeout;

  // A watchdog bounds the whole shutdown: a stop action that hangs (a wedged
  // device call, say) must not keep the process alive past the bound.
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog{[&] {
    std::unique_lock lock{m};
    if (!cv.wait_for(lock, bound, [&] { return done; })) {
      log->critical("shutdown exceeded {} ms; exiting now", bound.count());
      spdlog::shutdown();
      std::_Exit(static_cast<int>(exit_code::runtime_failure));
    }
  }};
  auto started = std::chrono::steady_clock::now();
  while (!stops_.empty()) {
    auto [what, fn] = std::move(stops_.back());
    stops_.pop_back();
    log->debug("stopping {}", what);
    fn();
  }
  {
    std::lock_guard lock{m};
    done = true;
  }
  cv.notify_one();
  watchdog.join();
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - started);
  log->info("stopped in {} ms", took.count());
  return true;
}

std::string app::summary() const {
  std::uint32_t busy = 0, slots = 0, without_slot = 0;
  const auto loaded = engine_->loaded_models();
  for (auto& m : loaded) {
    auto st = engine_->stats(m->name, std::chrono::seconds(1));
    if (!st)
      continue;
    busy += st->slots_busy;
    slots += st->slots;
    without_slot += st->without_slot_interactive + st->without_slot_batch;
  }
  auto store = engine_->store_stats();
  return fmt::format("{}{} of {} model(s) loaded, slots {}/{}, without a slot {}, clients {}, "
                     "store {} MiB, mode {}",
                     drain_.active ? "draining: " : "", loaded.size(),
                     engine_->configured().size(), busy, slots,
                     without_slot, gateway_ ? gateway_->counters().clients_connected.load() : 0,
                     store.committed_bytes >> 20,
                     to_string(cfg_.scheduler.mode));
}

// Periodic work of the main thread: watchdog, status line, the end of a drain.
void app::tick(std::chrono::steady_clock::time_point now) {
  auto log = logging::get("daemon");
  if (!model_failed_) {
    if (auto failed = engine_->failures(); !failed.empty()) {
      // A model whose scheduler stopped serves nothing until the process
      // restarts: let the other models' running sequences finish, then exit
      // 70 so that the service manager restarts kvlaned.
      model_failed_ = true;
      log->critical("model '{}' failed ({}); withholding watchdog pings, draining, then exiting "
                    "{} so that the service manager restarts kvlaned",
                    failed.front().model, failed.front().reason,
                    static_cast<int>(exit_code::runtime_failure));
      notify_.status(fmt::format("model '{}' failed: {}", failed.front().model, failed.front().reason));
      if (!drain_.active)
        begin_drain(now, "a model failed");
    }
  }
  if (watchdog_ && !model_failed_) {
    // A backend call running for longer than the watchdog interval means a
    // hung NPU: stop pinging and let systemd restart the service.
    auto stuck = engine_->stuck_call(*watchdog_);
    if (stuck.empty()) {
      notify_.watchdog();
      watchdog_starved_ = false;
    } else if (!watchdog_starved_) {
      log->critical("{}; withholding watchdog pings", stuck);
      watchdog_starved_ = true;
    }
  }
  if (now - last_status_ >= std::chrono::seconds(5)) {
    notify_.status(summary());
    last_status_ = now;
  }
}

exit_code app::run(const sigset_t& signals) {
  auto log = logging::get("daemon");
  watchdog_ = notify_.watchdog_interval();
  notify_.ready(summary());
  serving_ = true;
  last_status_ = std::chrono::steady_clock::now();
  log->info("ready: {} model(s), scheduler mode {}, {:.0f} ms after start", engine_->configured().size(),
            to_string(cfg_.scheduler.mode), ms_between(started_, std::chrono::steady_clock::now()));
  for (;;) {
    // Wake at least every second (the watchdog wants a ping every half
    // interval), and every 50 ms while draining to notice the last finish.
    auto period = std::chrono::milliseconds(drain_.active ? 50 : 1000);
    if (watchdog_)
      period = std::min(period, std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog_ / 2));
    timespec ts{static_cast<time_t>(period.count() / 1000),
                static_cast<long>(period.count() % 1000) * 1'000'000};
    int sig = sigtimedwait(&signals, nullptr, &ts);
    auto now = std::chrono::steady_clock::now();
    if (sig < 0) {
      if (errno != EAGAIN && errno != EINTR) {
        log->critical("sigtimedwait failed: {}", std::strerror(errno));
        stop();
        return exit_code::runtime_failure;
      }
      tick(now);
      if (drain_.active && (engine_->list().empty() || now >= drain_.deadline)) {
        auto left = engine_->list().size();
        if (left > 0)
          log->warn("shutdown grace of {} ms is over; cancelling {} running sequence(s)",
                    cfg_.daemon.shutdown_grace.count(), left);
        else
          log->info("every running sequence finished");
        const bool stopped = stop();
        return stopped && !model_failed_ ? exit_code::ok : exit_code::runtime_failure;
      }
      continue;
    }
    if (sig == SIGHUP) {
      reload();
      continue;
    }
    const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (drain_.active) {
      log->info("second {} received: stopping now", name);
      const bool stopped = stop();
      return stopped && !model_failed_ ? exit_code::ok : exit_code::runtime_failure;
    }
    begin_drain(now, fmt::format("{} received", name));
  }
}

void app::begin_drain(std::chrono::steady_clock::time_point now, std::string_view why) {
  engine_->set_admitting(false);
  drain_.active = true;
  drain_.deadline = now + cfg_.daemon.shutdown_grace;
  auto running = engine_->list().size();
  logging::get("daemon")->info("{}, shutting down: admitting no new requests; {} running "
                               "sequence(s) may finish within {} ms (send SIGTERM to stop at once)",
                               why, running, cfg_.daemon.shutdown_grace.count());
  notify_.stopping();
  notify_.status(summary());
}

reload_report app::reload() {
  std::lock_guard lock{reload_mutex_};
  auto log = logging::get("daemon");
  reload_report r;
  notify_.reloading();
  auto fresh = load(config_path_);
  if (!fresh) {
    r.error = fresh.error().message;
    log->error("reload rejected, nothing changed: {}", r.error);
    notify_.ready(summary());
    return r;
  }
  auto& now = cfg_;
  auto& next = *fresh;

  // Validate everything first so that a rejected reload changes nothing.
  std::shared_ptr<const ipc::access_policy> new_admin, new_clients;
  if (next.clients.allow_users != now.clients.allow_users
      || next.clients.allow_groups != now.clients.allow_groups) {
    auto p = ipc::access_policy::create(next.clients.allow_users, next.clients.allow_groups,
                                        /*open_when_empty=*/true);
    if (!p) {
      r.error = "[clients] " + std::move(p).error();
      log->error("reload rejected, nothing changed: {}", r.error);
      notify_.ready(summary());
      return r;
    }
    new_clients = std::make_shared<const ipc::access_policy>(std::move(*p));
  }
  if (next.admin.allow_users != now.admin.allow_users
      || next.admin.allow_groups != now.admin.allow_groups) {
    auto p = admin_policy(next.admin);
    if (!p) {
      r.error = p.error();
      log->error("reload rejected, nothing changed: {}", r.error);
      notify_.ready(summary());
      return r;
    }
    new_admin = std::move(*p);
  }
  for (auto& [logger, level] : next.daemon.log_levels)
    if (!logging::known_logger(logger)) {
      r.error = fmt::format("daemon.log_levels: unknown logger '{}'", logger);
      log->error("reload rejected, nothing changed: {}", r.error);
      notify_.ready(summary());
      return r;
    }

  if (next.daemon.log_level != now.daemon.log_level
      || next.daemon.log_levels != now.daemon.log_levels) {
    r.applied.push_back("daemon.log_level / daemon.log_levels");
    now.daemon.log_level = next.daemon.log_level;
    now.daemon.log_levels = next.daemon.log_levels;
  }
  logging::set_level("*", now.daemon.log_level);
  for (auto& [logger, level] : now.daemon.log_levels)
    logging::set_level(logger, level);

  if (next.daemon.shutdown_timeout != now.daemon.shutdown_timeout
      || next.daemon.shutdown_grace != now.daemon.shutdown_grace) {
    r.applied.push_back("daemon.shutdown_timeout_ms / daemon.shutdown_grace_ms");
    now.daemon.shutdown_timeout = next.daemon.shutdown_timeout;
    now.daemon.shutdown_grace = next.daemon.shutdown_grace;
  }
  auto knobs = next.scheduler;
  knobs.mode = now.scheduler.mode;
  if (knobs != now.scheduler) {
    if (engine_->update_policy(knobs)) {
      r.applied.push_back("scheduler (quantum_steps, levels, spare_slots, max_step_tokens, "
                          "batch_prefill_yields, aging_steps, ewma_alpha, faults, slo)");
      now.scheduler = knobs;
    } else {
      r.needs_restart.push_back("scheduler: a model's scheduler did not confirm the new knobs");
    }
  }
  if (next.clients.max_pending != now.clients.max_pending
      || next.clients.max_clients_per_user != now.clients.max_clients_per_user
      || next.clients.max_requests_per_user != now.clients.max_requests_per_user
      || next.clients.max_live_sequences != now.clients.max_live_sequences
      || next.clients.busy_retry != now.clients.busy_retry) {
    now.clients.max_pending = next.clients.max_pending;
    now.clients.max_clients_per_user = next.clients.max_clients_per_user;
    now.clients.max_requests_per_user = next.clients.max_requests_per_user;
    now.clients.max_live_sequences = next.clients.max_live_sequences;
    now.clients.busy_retry = next.clients.busy_retry;
    gateway_->set_admission(now.clients);
    r.applied.push_back("clients.max_pending / max_clients_per_user / max_requests_per_user / "
                        "max_live_sequences / busy_retry_ms");
  }
  if (next.reuse != now.reuse) {
    if (engine_->update_reuse(next.reuse)) {
      r.applied.push_back("reuse (mode, scope, store_share, idle_ttl_s, min_prefix_tokens)");
      now.reuse = next.reuse;
    } else {
      r.needs_restart.push_back("reuse: a model's scheduler did not confirm the new knobs");
    }
  }
  // Sessions expire with the reuse TTL applied above (or kept, if it was not).
  if (next.sessions != now.sessions || session_limits_of(now) != sessions_->limits()) {
    now.sessions = next.sessions;
    sessions_->set_limits(session_limits_of(now));
    r.applied.push_back("sessions (max_per_user, max_sessions; idle TTL from reuse.idle_ttl_s)");
  }
  if (new_clients) {
    gateway_->set_policy(std::move(new_clients));
    now.clients.allow_users = next.clients.allow_users;
    now.clients.allow_groups = next.clients.allow_groups;
    r.applied.push_back("clients.allow_users / clients.allow_groups");
  }
  if (new_admin) {
    admin_->set_policy(std::move(new_admin));
    now.admin.allow_users = next.admin.allow_users;
    now.admin.allow_groups = next.admin.allow_groups;
    r.applied.push_back("admin.allow_users / admin.allow_groups");
  }

  if (next.scheduler.mode != now.scheduler.mode)
    r.needs_restart.push_back("scheduler.mode");
  if (next.daemon.runtime_dir != now.daemon.runtime_dir)
    r.needs_restart.push_back("daemon.runtime_dir");
  if (next.daemon.worker_threads != now.daemon.worker_threads)
    r.needs_restart.push_back("daemon.worker_threads");
  if (next.models != now.models)
    r.needs_restart.push_back("model (models, backends and their options)");
  if (next.lifecycle != now.lifecycle)
    r.needs_restart.push_back("models (max_loaded, load_timeout_ms)");
  if (next.store != now.store)
    r.needs_restart.push_back("store");
  if (next.clients != now.clients)
    r.needs_restart.push_back("clients (other than the allow lists and the admission limits)");
  if (next.admin.socket_mode != now.admin.socket_mode)
    r.needs_restart.push_back("admin.socket_mode");
  if (next.metrics != now.metrics)
    r.needs_restart.push_back("metrics");
  if (next.http != now.http)
    r.needs_restart.push_back("http");

  log->info("reloaded {}: applied [{}]; needs a restart: [{}]", config_path_,
            fmt::join(r.applied, "; "), fmt::join(r.needs_restart, "; "));
  notify_.ready(summary());
  return r;
}

namespace {

struct cli_options {
  std::string config_path{default_config_path};
  bool config_given = false;
  std::string gguf; ///< --gguf: serve this file instead of the configured models
  bool check = false;
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kvlaned [--config PATH] [--gguf FILE] [--check] [--version] [--help]\n"
               "  --config PATH  configuration file (default %s)\n"
               "  --gguf FILE    serve this GGUF model (backend llamacpp, [model.llamacpp]\n"
               "                 defaults) instead of the configured models; without --config\n"
               "                 every other key keeps its default\n"
               "  --check        validate the configuration and exit (0 valid, 1 invalid)\n"
               "  --version      print the version and exit\n",
               default_config_path.data());
}

/// The config of `--gguf FILE`: the given (or built-in default) config with its models
/// replaced by one llamacpp model named after the file.
expected<config, config_error> load_with_gguf(const cli_options& opts) {
  std::error_code ec;
  const auto path = std::filesystem::absolute(opts.gguf, ec).lexically_normal();
  const auto model = gguf_model_toml(path.string());
  if (!model)
    return unexpected(config_error{"", 0, model.error()});
  auto gguf_cfg = parse("version = 1\n" + *model, "--gguf");
  if (!gguf_cfg || !opts.config_given)
    return gguf_cfg;
  auto cfg = load(opts.config_path);
  if (!cfg)
    return cfg;
  cfg->models = std::move(gguf_cfg->models);
  return cfg;
}

} // namespace

int run_main(int argc, char** argv) {
  // A write to a socket or pipe whose reader went away (a closed stdout pipe
  // during shutdown, an app gone mid-send) must fail with EPIPE, not kill the
  // daemon and leave its sockets behind.
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);

  cli_options opts;
  for (int i = 1; i < argc; ++i) {
    std::string_view a{argv[i]};
    if (a == "--config" && i + 1 < argc) {
      opts.config_path = argv[++i];
      opts.config_given = true;
    } else if (a.starts_with("--config=")) {
      opts.config_path = std::string{a.substr(9)};
      opts.config_given = true;
    } else if (a == "--gguf" && i + 1 < argc) {
      opts.gguf = argv[++i];
    } else if (a.starts_with("--gguf=")) {
      opts.gguf = std::string{a.substr(7)};
    } else if (a == "--check") {
      opts.check = true;
    } else if (a == "--version") {
      std::printf("kvlaned %s\n", KVLANE_VERSION);
      return 0;
    } else if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "kvlaned: unknown or incomplete argument '%s'\n", argv[i]);
      print_usage(stderr);
      return static_cast<int>(exit_code::usage);
    }
  }

  auto cfg = opts.gguf.empty() ? load(opts.config_path) : load_with_gguf(opts);
  if (!cfg) {
    std::fprintf(stderr, "kvlaned: invalid configuration: %s\n", cfg.error().message.c_str());
    return static_cast<int>(opts.check ? exit_code::check_failed : exit_code::config_error);
  }
  if (auto err = logging::setup(cfg->daemon.log_level, cfg->daemon.log_levels); !err.empty()) {
    std::fprintf(stderr, "kvlaned: invalid configuration: %s: daemon.log_levels: %s\n",
                 opts.config_path.c_str(), err.c_str());
    return static_cast<int>(opts.check ? exit_code::check_failed : exit_code::config_error);
  }
  if (opts.check) {
    std::printf("%s: ok (%zu model(s))\n", opts.config_path.c_str(), cfg->models.size());
    return 0;
  }

  // Block the shutdown signals before any thread starts, so every thread
  // inherits the mask and only sigwait() in this thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto log = logging::get("daemon");
  log->info("kvlaned {} starting with {}", KVLANE_VERSION, opts.config_path);
  auto a = app::create(std::move(*cfg), opts.config_path);
  if (!a) {
    log->critical("start-up failed: {}", a.error());
    spdlog::shutdown();
    return static_cast<int>(exit_code::runtime_failure);
  }
  auto rc = (*a)->run(signals);
  a->reset();
  log->info("exit {}", static_cast<int>(rc));
  spdlog::shutdown();
  return static_cast<int>(rc);
}

} // namespace kvlane::daemon
