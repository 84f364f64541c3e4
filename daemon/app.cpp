#include "daemon/app.hpp"

#include "actors/engine.hpp"
#include "daemon/gateway.hpp"
#include "daemon/logging.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <systemd/sd-daemon.h>

#include <cerrno>
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

app::~app() {
  stop();
}

void app::on_stop(std::string what, std::function<void()> fn) {
  stops_.emplace_back(std::move(what), std::move(fn));
}

expected<std::unique_ptr<app>, std::string> app::create(config cfg) {
  auto log = logging::get("daemon");
  std::unique_ptr<app> self{new app(std::move(cfg))};

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
  self->system_ = std::make_unique<caf::actor_system>(*self->actor_cfg_);
  log->info("actor system started with {} worker threads", threads);
  self->on_stop("actor system", [s = self.get()] {
    s->system_.reset();
    s->actor_cfg_.reset();
  });

  // The engine: snapshot store, model backends, schedulers and their lanes.
  auto eng = actors::engine::create(*self->system_, self->cfg_);
  if (!eng)
    return unexpected(std::move(eng).error());
  self->engine_ = std::move(*eng);
  self->on_stop("engine", [s = self.get()] {
    s->engine_->shutdown("daemon shutting down");
    for (auto& m : s->engine_->models())
      logging::get("backend")->info("model '{}' unloaded", m.name);
    s->engine_.reset();
  });

  // The client gateway: control socket and IPC loop. Stopped before the
  // engine, so apps see their connection end before their streams do.
  auto gw = gateway::create(self->cfg_.clients, self->client_socket_path(), *self->engine_);
  if (!gw)
    return unexpected("client gateway: " + std::move(gw).error());
  self->gateway_ = std::move(*gw);
  logging::get("ipc")->info("listening for clients on {} (mode {:04o})",
                            self->gateway_->socket_path(), self->cfg_.clients.socket_mode);
  self->on_stop("gateway", [s = self.get()] {
    s->gateway_->stop();
    s->gateway_.reset();
  });
  return self;
}

bool app::stop() {
  if (stops_.empty())
    return true;
  auto log = logging::get("daemon");
  sd_notify(0, "STOPPING=1");
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

exit_code app::run(const sigset_t& signals) {
  auto log = logging::get("daemon");
  sd_notify(0, "READY=1");
  log->info("ready: {} model(s), scheduler mode {}", engine_->models().size(),
            to_string(cfg_.scheduler.mode));
  for (;;) {
    int sig = 0;
    if (int rc = sigwait(&signals, &sig); rc != 0) {
      log->critical("sigwait failed: {}", std::strerror(rc));
      stop();
      return exit_code::runtime_failure;
    }
    if (sig == SIGHUP) {
      log->warn("SIGHUP received: live reload is not supported yet; restart to apply changes");
      continue;
    }
    log->info("{} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    return stop() ? exit_code::ok : exit_code::runtime_failure;
  }
}

namespace {

struct cli_options {
  std::string config_path{default_config_path};
  bool check = false;
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kvlaned [--config PATH] [--check] [--version] [--help]\n"
               "  --config PATH  configuration file (default %s)\n"
               "  --check        validate the configuration and exit (0 valid, 1 invalid)\n"
               "  --version      print the version and exit\n",
               default_config_path.data());
}

} // namespace

int run_main(int argc, char** argv) {
  cli_options opts;
  for (int i = 1; i < argc; ++i) {
    std::string_view a{argv[i]};
    if (a == "--config" && i + 1 < argc) {
      opts.config_path = argv[++i];
    } else if (a.starts_with("--config=")) {
      opts.config_path = std::string{a.substr(9)};
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

  auto cfg = load(opts.config_path);
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
  auto a = app::create(std::move(*cfg));
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
