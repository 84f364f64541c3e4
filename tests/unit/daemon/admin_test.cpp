// The admin protocol: commands on a live engine, and the socket transport.
#include "daemon/admin_commands.hpp"
#include "daemon/admin_server.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace kvlane;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

struct admin_fixture {
  test::engine_fixture f;
  daemon::metrics registry{{"tiny"}};
  daemon::admin_services services;
  std::string last_level;

  explicit admin_fixture(
    const actors::engine_config& cfg = test::small_config(actors::scheduler_mode::overlap))
    : f(cfg) {
    services.engine = f.engine.get();
    services.registry = &registry;
    services.version = "test";
    services.mode = "overlap";
    services.set_log_level = [this](std::string_view logger, std::string_view level) {
      if (level != "debug" && level != "info")
        return std::string{"unknown log level '"} + std::string{level} + "'";
      last_level = std::string{logger} + "=" + std::string{level};
      return std::string{};
    };
  }

  json ask(std::string_view line) { return json::parse(daemon::handle_admin_request(line, services)); }
};

std::string error_code(const json& j) {
  return j.contains("error") ? j["error"]["code"].get<std::string>() : std::string{};
}

} // namespace

TEST_CASE("admin: status, ps, cancel, drain and resume act on the engine") {
  admin_fixture sut;
  actors::submit_request r;
  r.model = "tiny";
  r.client = "alice";
  r.prompt_tokens = {97, 98, 99};
  r.sampling.max_tokens = 400;
  auto s = *sut.f.engine->submit(r);
  REQUIRE(s->next(10s).has_value());

  auto status = sut.ask(R"({"cmd":"status"})");
  CHECK(error_code(status).empty());
  CHECK(status["version"] == "test");
  CHECK(status["mode"] == "overlap");
  CHECK(status["admitting"] == true);
  REQUIRE(status["models"].size() == 1);
  CHECK(status["models"][0]["name"] == "tiny");
  CHECK(status["models"][0]["slots"] == 4);
  CHECK(status["models"][0]["slots_busy"] == 1);
  CHECK(status["store"]["limit_bytes"] == 64u << 20);

  auto ps = sut.ask(R"({"cmd":"ps"})");
  REQUIRE(ps["sequences"].size() == 1);
  CHECK(ps["sequences"][0]["id"] == s->id());
  CHECK(ps["sequences"][0]["client"] == "alice");
  CHECK(ps["sequences"][0]["state"] == "resident");
  CHECK(ps["sequences"][0]["priority"] == "interactive");

  auto drained = sut.ask(R"({"cmd":"drain"})");
  CHECK(drained["admitting"] == false);
  CHECK(drained["active"] == 1);
  CHECK_FALSE(sut.f.engine->submit(r).has_value());
  CHECK(sut.ask(R"({"cmd":"resume"})")["admitting"] == true);

  auto cancelled = sut.ask(fmt::format(R"({{"cmd":"cancel","id":{}}})", s->id()));
  CHECK(cancelled["cancelled"] == s->id());
  auto c = s->collect(10s);
  REQUIRE(c.has_value());
  CHECK(c->end->reason == actors::end_reason::cancelled);
  CHECK(error_code(sut.ask(fmt::format(R"({{"cmd":"cancel","id":{}}})", s->id()))) == "not_found");
}

TEST_CASE("admin: status and metrics show a failing device, and healthy once it recovers") {
  admin_fixture sut;
  auto device = [&] { return sut.ask(R"({"cmd":"status"})")["models"][0]["device"]; };
  CHECK(device()["state"] == "healthy");
  CHECK(device()["step_failures"] == 0);

  sut.f.sim().inject(backends::sim_op::step, {.fail_rate = 1.0});
  actors::submit_request r;
  r.model = "tiny";
  r.client = "alice";
  r.prompt_tokens = {97, 98, 99};
  r.sampling.max_tokens = 8;
  auto s = *sut.f.engine->submit(r);
  // Its step fails, and its retry: one row alone, so the device is failing.
  // The scheduler has no event for this; ask again until it says so.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (device()["state"] != "failing" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  const auto d = device();
  REQUIRE(d["state"] == "failing");
  CHECK(d["backoff_ms"].get<double>() > 0);
  CHECK(d["step_failures"].get<std::uint64_t>() >= 2);
  CHECK(d["step_retries"] == 1);
  CHECK(d["backoffs"].get<std::uint64_t>() >= 1);
  const auto text = sut.ask(R"({"cmd":"metrics"})")["text"].get<std::string>();
  CHECK(text.find("kvlane_device_state{model=\"tiny\"} 2\n") != std::string::npos);

  sut.f.sim().inject(backends::sim_op::step, {});
  auto c = s->collect(30s);
  REQUIRE(c.has_value());
  CHECK(c->end->reason == actors::end_reason::length);
  CHECK(c->tokens.size() == 8);
  CHECK(device()["state"] == "healthy");
  CHECK(device()["backoff_ms"] == 0);
}

TEST_CASE("admin: malformed requests get precise error codes") {
  admin_fixture sut;
  CHECK(error_code(sut.ask("{not json")) == "bad_json");
  CHECK(error_code(sut.ask("[1,2]")) == "bad_request");
  CHECK(error_code(sut.ask(R"({"command":"status"})")) == "missing_field");
  CHECK(error_code(sut.ask(R"({"cmd":7})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"frobnicate"})")) == "unknown_command");
  CHECK(error_code(sut.ask(R"({"cmd":"cancel"})")) == "missing_field");
  CHECK(error_code(sut.ask(R"({"cmd":"cancel","id":"7"})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"cancel","id":-1})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"log-level","logger":"scheduler"})")) == "missing_field");
  CHECK(error_code(sut.ask(R"({"cmd":"log-level","logger":"scheduler","level":"loud"})")) ==
        "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"reload"})")) == "failed"); // no reload hook here
  auto msg = sut.ask(R"({"cmd":"frobnicate"})")["error"]["message"].get<std::string>();
  CHECK(msg.find("frobnicate") != std::string::npos);
}

TEST_CASE("admin: log-level and metrics") {
  admin_fixture sut;
  auto r = sut.ask(R"({"cmd":"log-level","logger":"scheduler","level":"debug"})");
  CHECK(error_code(r).empty());
  CHECK(sut.last_level == "scheduler=debug");
  auto m = sut.ask(R"({"cmd":"metrics"})");
  auto text = m["text"].get<std::string>();
  CHECK(text.find("# TYPE kvlane_requests_total counter") != std::string::npos);
  CHECK(text.find("kvlane_slots{model=\"tiny\"} 4") != std::string::npos);
}

namespace {

actors::engine_config reuse_config() {
  auto c = test::small_config(actors::scheduler_mode::overlap);
  c.reuse.mode = actors::reuse_mode::store;
  c.reuse.min_prefix_tokens = 16;
  return c;
}

void run_prompt(actors::engine& e, std::vector<backends::token_id> prompt) {
  actors::submit_request r;
  r.model = "tiny";
  r.owner = 1000;
  r.prompt_tokens = std::move(prompt);
  r.sampling.max_tokens = 10;
  auto s = e.submit(r);
  REQUIRE(s.has_value());
  REQUIRE((*s)->collect(10s).has_value());
}

} // namespace

TEST_CASE("admin: cache-ls lists retained KV, metrics count its reuse, cache-drop frees it") {
  admin_fixture sut{reuse_config()};
  const std::vector<backends::token_id> prompt(40, 97);
  run_prompt(*sut.f.engine, prompt);
  run_prompt(*sut.f.engine, prompt); // reuses the first one's warm slot

  auto ls = sut.ask(R"({"cmd":"cache-ls"})");
  REQUIRE(ls["entries"].size() == 1);
  const auto e = ls["entries"][0];
  CHECK(e["model"] == "tiny");
  CHECK(e["owner"] == 1000);
  CHECK(e["tokens"] == 40 + 10 - 1);
  CHECK(e["where"] == "slot");
  CHECK(e["slot"].get<int>() >= 0);
  CHECK(e["hits"] == 0); // the entry the second request left, not the one it used
  CHECK(sut.ask(R"({"cmd":"cache-ls","model":"tiny"})")["entries"].size() == 1);

  const auto reuse = sut.ask(R"({"cmd":"status"})")["models"][0]["reuse"];
  CHECK(reuse["entries"] == 1);
  CHECK(reuse["warm"] == 1);
  CHECK(reuse["hits_warm"] == 1);
  CHECK(reuse["reused_tokens"] == 39);
  CHECK(reuse["evictions"]["superseded"] == 0);
  // Free text computes no token mask.
  const auto masks = sut.ask(R"({"cmd":"status"})")["models"][0]["masks"];
  CHECK(masks["during_step"] == 0);
  CHECK(masks["at_sampling"] == 0);
  CHECK(masks["total_ms"] == 0.0);
  const auto ps = sut.ask(R"({"cmd":"ps"})");
  REQUIRE(ps["retained"].size() == 1);
  CHECK(ps["retained"][0]["model"] == "tiny");
  CHECK(ps["retained"][0]["entries"] == 1);
  CHECK(ps["retained"][0]["warm"] == 1);
  CHECK(ps["retained"][0]["warm_bytes"] == e["bytes"]);

  const auto text = sut.ask(R"({"cmd":"metrics"})")["text"].get<std::string>();
  CHECK(text.find("# HELP kvlane_reuse_total ") != std::string::npos);
  CHECK(text.find("kvlane_reuse_total{model=\"tiny\",outcome=\"warm\"} 1\n") != std::string::npos);
  CHECK(text.find("kvlane_reuse_total{model=\"tiny\",outcome=\"load\"} 0\n") != std::string::npos);
  CHECK(text.find("kvlane_reused_tokens_total{model=\"tiny\"} 39\n") != std::string::npos);
  CHECK(text.find("kvlane_retained_entries{model=\"tiny\",where=\"slot\"} 1\n") != std::string::npos);
  CHECK(text.find("kvlane_retained_entries{model=\"tiny\",where=\"store\"} 0\n") != std::string::npos);

  auto dropped = sut.ask(fmt::format(R"({{"cmd":"cache-drop","id":{}}})", e["id"].get<std::uint64_t>()));
  CHECK(error_code(dropped).empty());
  CHECK(dropped["entries"] == 1);
  CHECK(dropped["slots"] == 1);
  CHECK(dropped["tokens"] == 49);
  CHECK(dropped["dropped"][0]["model"] == "tiny");
  CHECK(sut.ask(R"({"cmd":"cache-ls"})")["entries"].empty());
  CHECK(sut.ask(R"({"cmd":"cache-drop","all":true})")["entries"] == 0);
  const auto after = sut.ask(R"({"cmd":"metrics"})")["text"].get<std::string>();
  CHECK(after.find("kvlane_retained_evictions_total{model=\"tiny\",reason=\"admin\"} 1\n")
        != std::string::npos);
}

TEST_CASE("admin: cache-drop needs exactly one valid selector") {
  admin_fixture sut{reuse_config()};
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop"})")) == "bad_request");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","all":true,"id":1})")) == "bad_request");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","all":false})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","id":"1"})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","id":99})")) == "not_found");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","all":true,"model":"nope"})")) == "not_found");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-drop","all":true,"model":7})")) == "bad_field");
  CHECK(error_code(sut.ask(R"({"cmd":"cache-ls","model":"nope"})")) == "not_found");
}

namespace {

int connect_to(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

std::string read_line(int fd) {
  std::string line;
  char c;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    auto n = ::read(fd, &c, 1);
    if (n <= 0 || c == '\n')
      return line;
    line.push_back(c);
  }
}

struct server_fixture {
  test::temp_dir dir;
  std::unique_ptr<daemon::admin_server> sut;
  server_fixture(std::shared_ptr<const ipc::access_policy> policy) {
    daemon::admin_server::options o;
    o.path = dir.path() + "/admin.sock";
    o.max_line = 1024;
    auto s = daemon::admin_server::create(o, std::move(policy), [](std::string_view line) {
      return std::string{"echo:"} + std::string{line};
    });
    REQUIRE(s.has_value());
    sut = std::move(*s);
  }
};

std::shared_ptr<const ipc::access_policy> closed_policy() {
  return std::make_shared<const ipc::access_policy>(*ipc::access_policy::create({}, {}, false));
}

} // namespace

TEST_CASE("admin_server: answers each line, survives an over-long line, keeps the connection") {
  server_fixture f{closed_policy()};
  struct stat st{};
  REQUIRE(::stat(f.sut->path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  int fd = connect_to(f.sut->path());
  std::string two = "first\nsecond\n";
  REQUIRE(::write(fd, two.data(), two.size()) == ssize_t(two.size()));
  CHECK(read_line(fd) == "echo:first");
  CHECK(read_line(fd) == "echo:second");
  std::string huge(5000, 'x');
  huge += "\nafter\n";
  REQUIRE(::write(fd, huge.data(), huge.size()) == ssize_t(huge.size()));
  auto err = json::parse(read_line(fd));
  CHECK(err["error"]["code"] == "too_long");
  CHECK(read_line(fd) == "echo:after");
  ::close(fd);
}

TEST_CASE("admin_server: refuses a user outside the admin policy") {
  KVLANE_SKIP_UNLESS_ROOT("connects as another user");
  server_fixture f{closed_policy()};
  ::chmod(f.dir.path().c_str(), 0755);
  ::chmod(f.sut->path().c_str(), 0666); // let the socket open, so the policy decides
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0)
      ::_exit(3);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, f.sut->path().c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      ::_exit(4);
    char buf[512] = {};
    auto n = ::read(fd, buf, sizeof buf - 1);
    ::_exit(n > 0 && std::strstr(buf, "not_allowed") ? 0 : 5);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The daemon's own user (root here) is always allowed.
  int fd = connect_to(f.sut->path());
  REQUIRE(::write(fd, "hi\n", 3) == 3);
  CHECK(read_line(fd) == "echo:hi");
  ::close(fd);
}
