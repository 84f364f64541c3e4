// kvlaned's lifecycle, run as a real process: start-up, readiness, ordered
// shutdown on SIGTERM/SIGINT, --check, and exit codes.
#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using kvlane::test::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;

namespace {

std::string small_config(const temp_dir& dir, std::string_view extra_model = "") {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}/run"
worker_threads = 2
shutdown_timeout_ms = 3000

[[model]]
name = "tiny"
backend = "sim"
[model.sim]
slots = 4
max_context = 256
snapshot_bytes = "1MiB"
time_scale = 1000.0
{}
[http]
listen = ""
)",
                     dir.path(), extra_model);
}

} // namespace

TEST_CASE("kvlaned: starts, logs its models and slot counts, and stops cleanly on SIGTERM") {
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", small_config(dir, R"(
[[model]]
name = "second"
[model.sim]
slots = 2
max_context = 128
snapshot_bytes = "512KiB"
)"));
  auto sut = spawn(KVLANED_PATH, {"--config", cfg});
  REQUIRE(sut.wait_for_output("ready: 2 model(s)", 20s));
  CHECK(sut.output().find("model 'tiny' loaded on backend 'sim': 4 slots, max context 256")
        != std::string::npos);
  CHECK(sut.output().find("model 'second' loaded on backend 'sim': 2 slots, max context 128")
        != std::string::npos);
  struct stat st{};
  CHECK(::stat((dir.path() + "/run").c_str(), &st) == 0);

  sut.signal(SIGTERM);
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(sut.output().find("SIGTERM received") != std::string::npos);
  // Ordered shutdown: backends go before the actor system they were started after.
  auto unloaded = sut.output().find("model 'tiny' unloaded");
  auto stopped = sut.output().find("stopped in");
  CHECK(unloaded != std::string::npos);
  CHECK(stopped != std::string::npos);
  CHECK(unloaded < stopped);
}

namespace {

/// CPU time (user + system) the process has used so far, in clock ticks.
long cpu_ticks(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start past the last ')'.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14)
      utime = std::stol(field);
    if (i == 15)
      stime = std::stol(field);
  }
  return utime + stime;
}

} // namespace

// The actor system's workers block while there is no work: a polling scheduler
// (CAF's work stealing) kept ~17% of a core busy in an idle daemon, taken from
// the backend's compute threads while a model runs.
TEST_CASE("kvlaned: an idle daemon sleeps: its threads use under 5% of one core") {
  temp_dir dir;
  auto sut = spawn(KVLANED_PATH, {"--config", dir.write("kvlane.toml", small_config(dir))});
  REQUIRE(sut.wait_for_output("ready: 1 model(s)", 20s));
  const long hz = ::sysconf(_SC_CLK_TCK);
  const auto window = 3s;
  const long before = cpu_ticks(sut.pid());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(window); // the quantity measured is what happens in a window of time
  const double seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double share = static_cast<double>(cpu_ticks(sut.pid()) - before) / hz / seconds;
  INFO("idle CPU share of one core: " << share);
  CHECK(share < 0.05);
  sut.signal(SIGTERM);
  CHECK(sut.wait_exit(20s).value_or(-1) == 0);
}

TEST_CASE("kvlaned: SIGINT (Ctrl-C) stops it with exit code 0") {
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", small_config(dir));
  auto sut = spawn(KVLANED_PATH, {"--config", cfg});
  REQUIRE(sut.wait_for_output("ready:", 20s));
  sut.signal(SIGINT);
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(sut.output().find("SIGINT received") != std::string::npos);
}

TEST_CASE("kvlaned: a closed output pipe does not kill it, it still shuts down cleanly and removes its sockets") {
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", small_config(dir));
  auto sut = spawn(KVLANED_PATH, {"--config", cfg});
  REQUIRE(sut.wait_for_output("ready:", 20s));
  const auto socket = dir.path() + "/run/kvlane.sock";
  const auto admin_socket = dir.path() + "/run/kvlane-admin.sock";
  struct stat st{};
  REQUIRE(::stat(socket.c_str(), &st) == 0);
  REQUIRE(::stat(admin_socket.c_str(), &st) == 0);
  // The reader of its stdout/stderr goes away (a journal restart, a closed
  // terminal pipe); the daemon logs its whole shutdown into the broken pipe.
  sut.close_output();
  sut.signal(SIGTERM);
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0); // 141 (128 + SIGPIPE) before the daemon ignored SIGPIPE
  CHECK(::stat(socket.c_str(), &st) != 0);
  CHECK(::stat(admin_socket.c_str(), &st) != 0);
}

TEST_CASE("kvlaned: --check accepts a valid config with exit code 0") {
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", small_config(dir));
  auto sut = spawn(KVLANED_PATH, {"--config", cfg, "--check"});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(sut.output().find("ok (1 model(s))") != std::string::npos);
}

TEST_CASE("kvlaned: --check accepts the shipped etc/kvlane.toml") {
  auto sut = spawn(KVLANED_PATH, {"--config", KVLANE_SOURCE_DIR "/etc/kvlane.toml", "--check"});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
}

TEST_CASE("kvlaned: --check rejects a bad value with exit code 1, naming key and line") {
  temp_dir dir;
  auto text = small_config(dir);
  text.replace(text.find("slots = 4"), 9, "slots = 0");
  auto cfg = dir.write("kvlane.toml", text);
  auto sut = spawn(KVLANED_PATH, {"--config", cfg, "--check"});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  CHECK(sut.output().find("model[0].sim.slots") != std::string::npos);
  CHECK(sut.output().find("kvlane.toml:11:") != std::string::npos);
}

TEST_CASE("kvlaned: an invalid config at start-up exits with the config error code 78") {
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", "version = 2\n");
  auto sut = spawn(KVLANED_PATH, {"--config", cfg});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 78);
  CHECK(sut.output().find("version") != std::string::npos);
}

TEST_CASE("kvlaned: a missing config file exits 78 and names the path") {
  auto sut = spawn(KVLANED_PATH, {"--config", "/nonexistent/kvlane.toml"});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 78);
  CHECK(sut.output().find("/nonexistent/kvlane.toml") != std::string::npos);
}

TEST_CASE("kvlaned: a runtime failure at start-up exits 70, distinct from config errors") {
  temp_dir dir;
  // The runtime directory cannot be created below a regular file.
  dir.write("file", "x");
  auto text = small_config(dir);
  text.replace(text.find("/run\""), 5, "/file/run\"");
  auto cfg = dir.write("kvlane.toml", text);
  auto sut = spawn(KVLANED_PATH, {"--config", cfg});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 70);
  CHECK(sut.output().find("runtime directory") != std::string::npos);
}

TEST_CASE("kvlaned: an unknown command-line argument is a usage error (64)") {
  auto sut = spawn(KVLANED_PATH, {"--frobnicate"});
  auto rc = sut.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 64);
  CHECK(sut.output().find("--frobnicate") != std::string::npos);
}
