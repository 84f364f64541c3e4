// Operating kvlaned as a real process: the admin CLI, systemd notifications
// and watchdog, SIGTERM grace, SIGHUP reload, HTTP metrics.
#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <kvlane/client.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace std::chrono_literals;
using kvlane::test::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;
using json = nlohmann::json;
namespace client = kvlane::client;

namespace {

std::string ops_config(const std::string& run_dir, std::string_view extra = "",
                       std::string_view log_level = "info", std::uint32_t quantum = 64,
                       double time_scale = 20) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
log_level = "{}"
shutdown_timeout_ms = 5000
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 512
snapshot_bytes = "512KiB"
time_scale = {}
[scheduler]
quantum_steps = {}
{}
[http]
listen = ""
)",
                     run_dir, log_level, time_scale, quantum, extra);
}

struct daemon_fixture {
  temp_dir dir;
  std::string run_dir = dir.path() + "/run";
  std::string config_path;
  std::unique_ptr<child_process> proc;

  explicit daemon_fixture(std::string_view extra = "", std::vector<std::string> env = {},
                          double time_scale = 20) {
    config_path = dir.write("kvlane.toml", ops_config(run_dir, extra, "info", 64, time_scale));
    proc = std::make_unique<child_process>(
      spawn(KVLANED_PATH, {"--config", config_path}, std::move(env)));
    REQUIRE(proc->wait_for_output("ready:", 20s));
  }

  std::unique_ptr<client::connection> connect(std::string name) {
    client::connect_options o;
    o.socket_path = run_dir + "/kvlane.sock";
    o.client_name = std::move(name);
    auto c = client::connection::connect(o);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
    return std::move(*c);
  }

  /// Runs `kvlane <args> --socket <admin socket>`; returns exit code and output.
  std::pair<int, std::string> cli(std::vector<std::string> args) {
    args.push_back("--socket");
    args.push_back(run_dir + "/kvlane-admin.sock");
    auto p = spawn(KVLANE_CLI_PATH, args);
    auto rc = p.wait_exit(30s);
    REQUIRE(rc.has_value());
    return {*rc, p.output()};
  }

  json cli_json(std::vector<std::string> args) {
    args.push_back("--json");
    auto [rc, out] = cli(std::move(args));
    CAPTURE(out);
    REQUIRE(rc == 0);
    return json::parse(out);
  }
};

client::request long_request(std::uint32_t max_tokens, client::priority prio = client::priority::batch) {
  client::request r;
  r.model = "tiny";
  r.prompt = "an operations test prompt";
  r.sampling.max_tokens = max_tokens;
  r.prio = prio;
  return r;
}

} // namespace

TEST_CASE("operations: kvlane status, ps, cancel, metrics, log-level, drain and resume") {
  // The sim at time_scale 2 (a step ~17 ms of wall time): the 400-token
  // request runs ~7 s, so it is still live when `kvlane cancel` names it
  // after three CLI runs, even sanitizer-built on a loaded machine.
  daemon_fixture d{"", {}, 2};
  auto c = d.connect("ops-app");
  auto a = c->submit(long_request(400));
  auto b = c->submit(long_request(300));
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE((*a)->next(10s));

  auto status = d.cli_json({"status"});
  CHECK(status["mode"] == "overlap");
  CHECK(status["clients"] == 1);
  REQUIRE(status["models"].size() == 1);
  CHECK(status["models"][0]["slots"] == 4);
  CHECK(status["models"][0]["slots_busy"].get<int>() >= 1);

  auto ps = d.cli_json({"ps"});
  REQUIRE(ps["sequences"].size() == 2);
  // The gateway numbers connections: "<name>#<connection>".
  CHECK(ps["sequences"][0]["client"].get<std::string>().starts_with("ops-app"));
  CHECK(ps["sequences"][0]["priority"] == "batch");
  auto first = ps["sequences"][0]["id"].get<std::uint64_t>();

  auto [rc, human] = d.cli({"ps"});
  CHECK(rc == 0);
  CHECK(human.find("ops-app") != std::string::npos);
  CHECK(human.find("CLIENT") != std::string::npos);

  // Cancel the long one by its id; the app sees the end.
  auto cancelled = d.cli_json({"cancel", std::to_string(first)});
  CHECK(cancelled["cancelled"] == first);
  auto end = (*a)->wait(10s);
  REQUIRE(end);
  CHECK(end->reason == client::end_reason::cancelled);
  auto [missing_rc, missing] = d.cli({"cancel", "99999999"});
  CHECK(missing_rc == 1);
  CHECK(missing.find("not_found") != std::string::npos);

  auto [mrc, metrics] = d.cli({"metrics"});
  CHECK(mrc == 0);
  CHECK(metrics.find("kvlane_requests_total{model=\"tiny\",outcome=\"cancelled\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("kvlane_clients_connected 1") != std::string::npos);

  CHECK(d.cli({"log-level", "scheduler", "debug"}).first == 0);
  auto [bad_rc, bad] = d.cli({"log-level", "scheduler", "shouty"});
  CHECK(bad_rc == 1);
  CHECK(bad.find("shouty") != std::string::npos);

  // Drain waits for the running request, then new requests are refused.
  auto [drc, drained] = d.cli({"drain"});
  CHECK(drc == 0);
  CHECK(drained.find("drained: ") != std::string::npos);
  auto b_end = (*b)->wait(1s);
  REQUIRE(b_end);
  CHECK(b_end->reason == client::end_reason::length);
  auto refused = c->submit(long_request(5));
  if (refused) {
    auto r = (*refused)->wait(10s);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == client::errc::shutting_down);
  } else {
    CHECK(refused.error().code == client::errc::shutting_down);
  }
  CHECK(d.cli({"resume"}).first == 0);
  auto again = c->submit(long_request(5));
  REQUIRE(again);
  auto again_end = (*again)->wait(10s);
  REQUIRE(again_end);
  CHECK(again_end->reason == client::end_reason::length);

  // Malformed use of the CLI and a missing daemon are explained.
  CHECK(d.cli({"cancel", "abc"}).first == 64);
  auto none = spawn(KVLANE_CLI_PATH, {"status", "--socket", d.dir.path() + "/nope.sock"});
  auto none_rc = none.wait_exit(10s);
  REQUIRE(none_rc);
  CHECK(*none_rc == 2);
  CHECK(none.output().find("kvlaned is not running") != std::string::npos);

  d.proc->signal(SIGTERM);
  CHECK(d.proc->wait_exit(20s) == 0);
}

TEST_CASE("operations: systemd sees READY after the sockets accept, watchdog pings, STOPPING") {
  temp_dir notify_dir;
  auto notify_path = notify_dir.path() + "/notify.sock";
  int ns = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(ns, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto receive = [&](std::chrono::milliseconds timeout) -> std::string {
    pollfd p{ns, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
      return {};
    char buf[4096];
    auto n = ::recv(ns, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string{};
  };

  temp_dir dir;
  auto run_dir = dir.path() + "/run";
  auto cfg = dir.write("kvlane.toml", ops_config(run_dir));
  auto d = spawn(KVLANED_PATH, {"--config", cfg},
                 {"NOTIFY_SOCKET=" + notify_path, "WATCHDOG_USEC=400000"});
  std::string msg;
  do {
    msg = receive(20s);
    REQUIRE_FALSE(msg.empty());
  } while (msg.find("READY=1") == std::string::npos);
  CHECK(msg.find("STATUS=") != std::string::npos);
  // At READY, both sockets already accept.
  client::connect_options o;
  o.socket_path = run_dir + "/kvlane.sock";
  CHECK(client::connection::connect(o));
  struct stat st{};
  CHECK(::stat((run_dir + "/kvlane-admin.sock").c_str(), &st) == 0);

  int pings = 0;
  while (pings < 3) {
    msg = receive(5s);
    REQUIRE_FALSE(msg.empty());
    pings += msg == "WATCHDOG=1";
  }
  d.signal(SIGTERM);
  bool stopping = false;
  while (!stopping) {
    msg = receive(10s);
    REQUIRE_FALSE(msg.empty());
    stopping = msg.find("STOPPING=1") != std::string::npos;
  }
  CHECK(d.wait_exit(20s) == 0);
  ::close(ns);
}

TEST_CASE("operations: SIGTERM lets running requests finish within the grace, then exits 0") {
  daemon_fixture d; // the grace stays at its default (10 s)
  auto c = d.connect("graceful");
  std::vector<std::shared_ptr<client::stream>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = c->submit(long_request(40, i % 2 ? client::priority::interactive : client::priority::batch));
    REQUIRE(s);
    streams.push_back(*s);
  }
  REQUIRE(streams[0]->next(10s));
  d.proc->signal(SIGTERM);
  REQUIRE(d.proc->wait_for_output("SIGTERM received", 10s));
  // New work is refused while the old finishes.
  for (auto& s : streams) {
    auto end = s->wait(20s);
    REQUIRE(end);
    CHECK(end->reason == client::end_reason::length);
    CHECK(end->generated_tokens == 40);
  }
  CHECK(d.proc->wait_exit(20s) == 0);
  CHECK(d.proc->output().find("every running sequence finished") != std::string::npos);
}

TEST_CASE("operations: SIGTERM under heavy load exits within the grace and tells every client") {
  temp_dir dir;
  auto run_dir = dir.path() + "/run";
  auto text = ops_config(run_dir);
  text.replace(text.find("shutdown_timeout_ms = 5000"), 26,
               "shutdown_timeout_ms = 5000\nshutdown_grace_ms = 300");
  auto cfg = dir.write("kvlane.toml", text);
  auto d = spawn(KVLANED_PATH, {"--config", cfg});
  REQUIRE(d.wait_for_output("ready:", 20s));
  std::vector<std::unique_ptr<client::connection>> conns;
  std::vector<std::shared_ptr<client::stream>> streams;
  for (int c = 0; c < 3; ++c) {
    client::connect_options o;
    o.socket_path = run_dir + "/kvlane.sock";
    o.client_name = "load-" + std::to_string(c);
    auto conn = client::connection::connect(o);
    REQUIRE(conn);
    for (int i = 0; i < 8; ++i) {
      auto s = (*conn)->submit(long_request(400));
      REQUIRE(s);
      streams.push_back(*s);
    }
    conns.push_back(std::move(*conn));
  }
  REQUIRE(streams[0]->next(10s));
  auto sent = std::chrono::steady_clock::now();
  d.signal(SIGTERM);
  REQUIRE(d.wait_exit(20s) == 0);
  auto took = std::chrono::steady_clock::now() - sent;
  CHECK(took < 10s); // the grace (300 ms) plus the bounded shutdown, far below the default grace
  for (auto& s : streams) {
    // Every stream ends: finished, cancelled, or told the daemon is shutting down.
    for (;;) {
      auto ch = s->next(10s);
      if (!ch) {
        // Told why: the connection ended because the daemon is shutting down,
        // or (a request still in the submit ring at SIGTERM) it was refused.
        auto code = ch.error().code;
        CHECK((code == client::errc::connection_lost || code == client::errc::shutting_down));
        if (code == client::errc::connection_lost)
          CHECK(ch.error().message.find("shutting down") != std::string::npos);
        break;
      }
      if (ch->end) {
        CHECK(ch->end->reason == client::end_reason::cancelled);
        break;
      }
    }
  }
  CHECK(d.output().find("shutdown grace of 300 ms is over") != std::string::npos);
}

TEST_CASE("operations: reload applies log level and scheduler knobs while clients stream") {
  daemon_fixture d;
  auto c = d.connect("reloading");
  std::vector<std::shared_ptr<client::stream>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = c->submit(long_request(120));
    REQUIRE(s);
    streams.push_back(*s);
  }
  REQUIRE(streams[0]->next(10s));

  // New log level and quantum via SIGHUP ...
  d.dir.write("kvlane.toml", ops_config(d.run_dir, "", "debug", 8));
  d.proc->signal(SIGHUP);
  // The schedulers confirm before the daemon reports the reload.
  REQUIRE(d.proc->wait_for_output("policy updated: quantum 8", 10s));
  REQUIRE(d.proc->wait_for_output("reloaded", 10s));
  // ... and a change that needs a restart, via kvlane reload.
  auto text = ops_config(d.run_dir, "", "debug", 8);
  text.replace(text.find("slots = 4"), 9, "slots = 8");
  d.dir.write("kvlane.toml", text);
  auto r = d.cli_json({"reload"});
  CHECK(r["applied"].empty());
  REQUIRE(r["needs_restart"].size() == 1);
  CHECK(r["needs_restart"][0].get<std::string>().find("model") != std::string::npos);
  // A broken file is rejected and changes nothing.
  d.dir.write("kvlane.toml", ops_config(d.run_dir, "", "debug", 0));
  auto [rc, out] = d.cli({"reload"});
  CHECK(rc == 1);
  CHECK(out.find("quantum_steps") != std::string::npos);

  for (auto& s : streams) {
    auto end = s->wait(30s);
    REQUIRE(end);
    CHECK(end->reason == client::end_reason::length);
    CHECK(end->generated_tokens == 120);
  }
  d.proc->signal(SIGTERM);
  CHECK(d.proc->wait_exit(20s) == 0);
}

TEST_CASE("operations: HTTP metrics on loopback parse and count requests") {
  // Port 0 is not a valid config value; pick a port from the process id.
  auto port = 20000 + ::getpid() % 20000;
  daemon_fixture d{fmt::format("[metrics]\nlisten = \"127.0.0.1:{}\"\n", port)};
  auto c = d.connect("http-metrics");
  auto s = c->submit(long_request(5));
  REQUIRE(s);
  REQUIRE((*s)->wait(10s));
  auto curl = spawn("/usr/bin/env",
                    {"bash", "-c",
                     fmt::format("exec 3<>/dev/tcp/127.0.0.1/{} && printf 'GET /metrics "
                                 "HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3",
                                 port)});
  auto rc = curl.wait_exit(10s);
  REQUIRE(rc);
  CHECK(*rc == 0);
  const auto& body = curl.output();
  CHECK(body.find("HTTP/1.0 200 OK") != std::string::npos);
  CHECK(body.find("text/plain; version=0.0.4") != std::string::npos);
  CHECK(body.find("kvlane_requests_total{model=\"tiny\",outcome=\"length\"} 1") != std::string::npos);
  d.proc->signal(SIGTERM);
  CHECK(d.proc->wait_exit(20s) == 0);
}

TEST_CASE("operations: a model whose lane crashes fails visibly, the others finish, and kvlaned exits 70") {
  daemon_fixture d{R"([[model]]
name = "crashy"
[model.sim]
slots = 2
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 20
[model.sim.faults.step]
crash_nth = 40
[[model]]
name = "slow"
[model.sim]
slots = 2
max_context = 512
snapshot_bytes = "512KiB"
)"};
  auto c = d.connect("ops-app");
  auto slow_request = long_request(100); // 100 steps of 31 ms: still running during the checks
  slow_request.model = "slow";
  auto survivor = c->submit(slow_request);
  REQUIRE(survivor);
  auto crash_request = long_request(200);
  crash_request.model = "crashy";
  auto victim = c->submit(crash_request);
  REQUIRE(victim);

  auto end = (*victim)->wait(20s);
  REQUIRE(end);
  CHECK(end->reason == client::end_reason::error);
  CAPTURE(end->message);
  CHECK(end->message.find("model 'crashy' failed") != std::string::npos);
  CHECK(end->message.find("sim: injected crash on step call 40") != std::string::npos);

  auto refused_request = long_request(5);
  refused_request.model = "crashy";
  auto refused = c->submit(refused_request);
  REQUIRE(refused);
  auto refused_end = (*refused)->wait(10s);
  REQUIRE_FALSE(refused_end);
  CHECK(refused_end.error().code == client::errc::model_failed);
  CHECK(refused_end.error().message.find("model 'crashy' failed and accepts no requests")
        != std::string::npos);

  auto status = d.cli_json({"status"});
  REQUIRE(status["models"].size() == 3);
  for (auto& m : status["models"]) {
    CAPTURE(m.dump());
    if (m["name"] == "crashy") {
      CHECK(m["state"] == "failed");
      CHECK(m["error"].get<std::string>().find("injected crash") != std::string::npos);
    } else {
      CHECK(m["state"] == "serving");
    }
  }
  auto [hrc, human] = d.cli({"status"});
  CHECK(hrc == 0);
  CHECK(human.find("FAILED") != std::string::npos);
  auto [mrc, metrics] = d.cli({"metrics"});
  CHECK(mrc == 0);
  CHECK(metrics.find("kvlane_model_up{model=\"crashy\"} 0") != std::string::npos);
  CHECK(metrics.find("kvlane_model_up{model=\"slow\"} 1") != std::string::npos);

  // The other model's running request gets the shutdown grace and finishes;
  // then the daemon exits 70 for its service manager to restart it.
  std::vector<std::uint32_t> tokens;
  auto survivor_end = (*survivor)->wait(30s, nullptr, &tokens);
  REQUIRE(survivor_end);
  CHECK(survivor_end->reason == client::end_reason::length);
  CHECK(tokens.size() == 100);
  auto rc = d.proc->wait_exit(30s);
  REQUIRE(rc);
  CHECK(*rc == 70);
  CHECK(d.proc->output().find("model 'crashy' failed") != std::string::npos);
  CHECK(d.proc->output().find("withholding watchdog pings, draining, then exiting 70") != std::string::npos);
}
