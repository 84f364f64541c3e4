// A restart keeps the snapshot store: the test plays systemd's side of the
// file-descriptor store protocol (tools/bench/service_host, which the restart
// benchmark uses too). It binds the NOTIFY_SOCKET datagram socket, receives
// the arena and index memfds kvlaned sends with FDSTORE=1 (as SCM_RIGHTS),
// and starts the next kvlaned with them as LISTEN_FDS, LISTEN_PID (set in the
// child between fork and exec) and LISTEN_FDNAMES.
// A last test does the same under the real systemd where it is PID 1, and is
// skipped visibly elsewhere.

#include "tests/integration/http_fixture.hpp"
#include "tests/support/skip.hpp"
#include "tools/bench/service_host.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>

#include <signal.h>

using namespace kvlane::test::http;
namespace bench = kvlane::tools::bench;
using bench::notify_socket;

namespace {

using clock_type = std::chrono::steady_clock;

/// systemd's end of NOTIFY_SOCKET (tools/bench/service_host), bound at `path`.
notify_socket bind_notify(const std::string& path) {
  auto n = notify_socket::bind(path);
  REQUIRE_MESSAGE(n.has_value(), (n ? std::string{} : n.error()));
  return std::move(*n);
}

/// kvlaned started the way systemd starts it (tools/bench/service_host):
/// NOTIFY_SOCKET, and the stored descriptors unless `pass_fds` is false.
class service {
public:
  service(const std::string& config, const std::string& log, notify_socket& notify,
          bool pass_fds = true)
    : notify_(&notify) {
    auto s = bench::service::start({KVLANED_PATH, config, log, pass_fds}, notify);
    REQUIRE_MESSAGE(s.has_value(), (s ? std::string{} : s.error()));
    svc_.emplace(std::move(*s));
  }
  clock_type::time_point started() const { return svc_->started(); }

  /// Ends it with `sig` and returns its exit status (a killed process: 128 +
  /// signal); then reads what it sent while stopping, as systemd would before
  /// the next start.
  int stop(int sig = SIGTERM) {
    auto status = svc_->stop(sig, 60s);
    REQUIRE_MESSAGE(status.has_value(), (status ? std::string{} : status.error()));
    auto drained = notify_->drain();
    REQUIRE_MESSAGE(drained.has_value(), (drained ? std::string{} : drained.error()));
    return *status;
  }

private:
  notify_socket* notify_;
  std::optional<bench::service> svc_;
};

std::string read_file(const std::string& path) {
  return bench::read_text_file(path);
}

std::uint16_t port_in(const std::string& log) {
  std::smatch m;
  const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
  REQUIRE(std::regex_search(log, m, url));
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

std::string restart_config(const std::string& run_dir, std::uint64_t seed, int store_mib,
                           const std::string& snapshot) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 1
max_context = 512
snapshot_bytes = "{}"
time_scale = 1000
seed = {}
[store]
max_bytes = "{}MiB"
[reuse]
min_prefix_tokens = 16
store_share = 1.0
[http]
listen = "127.0.0.1:0"
)",
                     run_dir, snapshot, seed, store_mib);
}

/// The daemon under test: its config, log and HTTP port.
struct daemon_run {
  std::uint16_t port = 0;
  std::string run_dir;

  json complete(const std::vector<int>& prompt) {
    socket_fd s{port};
    const json body{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
    const auto text = body.dump();
    s.send(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       text.size(), text));
    auto r = parse_reply(s.read_all());
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  }
  /// `kvlane metrics` over the admin socket.
  std::string metrics() {
    auto p = spawn(KVLANE_CLI_PATH, {"metrics", "--socket", run_dir + "/kvlane-admin.sock"});
    REQUIRE(p.wait_exit(30s) == 0);
    return p.output();
  }
};

/// Conversation n's prompt: 100 letters, the first two naming n (up to 676).
std::vector<int> conversation(int n) {
  std::vector<int> out{65 + n % 26, 97 + n / 26 % 26};
  for (int i = 2; i < 100; ++i)
    out.push_back(65 + (n * 11 + i * 7) % 26);
  return out;
}

std::uint64_t cached_of(const json& r) {
  return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
}

/// The value of one sample of the Prometheus text, or -1 if absent.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

double discarded(const std::string& metrics, std::string_view reason) {
  return sample(metrics, fmt::format(R"(kvlane_store_discarded_total{{reason="{}"}})", reason));
}

/// Starts kvlaned and waits for READY=1 on the notify socket.
daemon_run start(service& svc, notify_socket& notify, const std::string& log,
                 const std::string& run_dir, double* ready_ms) {
  auto ready = notify.wait_for("READY=1", 30s);
  REQUIRE_MESSAGE(ready.has_value(), (ready ? std::string{} : ready.error()));
  REQUIRE(ready->has_value());
  if (ready_ms != nullptr)
    *ready_ms = std::chrono::duration<double, std::milli>(clock_type::now() - svc.started()).count();
  daemon_run d;
  d.run_dir = run_dir;
  d.port = port_in(read_file(log));
  return d;
}

/// A first daemon on a fresh store: `conversations` requests on one slot, so
/// each pushes the previous one's retained KV into the store (the last one's
/// goes there at a clean stop); then a clean stop (SIGTERM) or a crash
/// (SIGKILL). `max_stored`: how many the store holds.
void first_run(const temp_dir& dir, notify_socket& notify, int conversations, int stop_signal,
               const std::string& snapshot = "512KiB", int store_mib = 64,
               int max_stored = 1000) {
  const auto config =
    dir.write("first.toml", restart_config(dir.path() + "/run1", 1, store_mib, snapshot));
  const auto log = dir.path() + "/first.log";
  service svc(config, log, notify);
  auto d = start(svc, notify, log, dir.path() + "/run1", nullptr);
  for (int c = 0; c < conversations; ++c)
    CHECK(cached_of(d.complete(conversation(c))) == 0);
  CHECK(notify.store().count("kvlane-store") == 1);
  CHECK(notify.store().count("kvlane-store-index") == 1);
  const int status = svc.stop(stop_signal);
  if (stop_signal == SIGTERM) {
    CAPTURE(read_file(log));
    CHECK(status == 0);
    // Every conversation is stored: those pushed out of the slot, and the last,
    // still warm at the stop, dumped before the index was written.
    const int stored = std::min(conversations, max_stored);
    CHECK(read_file(log).find("index of " + std::to_string(stored)
                              + " retained snapshots written")
          != std::string::npos);
  }
}

} // namespace

TEST_CASE("store restart: retained KV survives a restart through the fd store, and the next turn "
          "of a conversation reuses it") {
  temp_dir dir;
  auto notify = bind_notify(dir.path() + "/notify");
  first_run(dir, notify, 3, SIGTERM);

  const auto config = dir.write("second.toml", restart_config(dir.path() + "/run2", 1, 64, "512KiB"));
  const auto log = dir.path() + "/second.log";
  service svc(config, log, notify);
  double ready_ms = 0;
  auto d = start(svc, notify, log, dir.path() + "/run2", &ready_ms);
  const auto text = read_file(log);
  CAPTURE(text);
  CHECK(text.find("inherited descriptor 3 'kvlane-") != std::string::npos);
  CHECK(text.find("3 retained snapshots taken back") != std::string::npos);
  MESSAGE(fmt::format("restart to READY=1: {:.0f} ms", ready_ms));

  // Conversations 0 and 1 were pushed into the store while the first daemon
  // ran, conversation 2 was warm in the slot and dumped at the stop: all come back.
  for (int c = 0; c < 3; ++c)
    CHECK(cached_of(d.complete(conversation(c))) == 99);
  const auto m = d.metrics();
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == 3);
  for (const auto* reason : {"model_changed", "tokenizer_changed", "tokens_mismatch", "checksum",
                             "index_corrupt", "index_unclean", "arena_changed"})
    CHECK(discarded(m, reason) == 0);
  CHECK(svc.stop() == 0);
}

TEST_CASE("store restart: KV kept under another model is never used, and is counted") {
  temp_dir dir;
  auto notify = bind_notify(dir.path() + "/notify");
  first_run(dir, notify, 2, SIGTERM);

  // The same model name, other weights (the sim's seed is its model identity).
  const auto config = dir.write("second.toml", restart_config(dir.path() + "/run2", 2, 64, "512KiB"));
  const auto log = dir.path() + "/second.log";
  service svc(config, log, notify);
  auto d = start(svc, notify, log, dir.path() + "/run2", nullptr);
  CHECK(cached_of(d.complete(conversation(0))) == 0);
  const auto m = d.metrics();
  CHECK(discarded(m, "model_changed") == 2); // both conversations, none used
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == 0);
  CHECK(svc.stop() == 0);
}

TEST_CASE("store restart: after a crash the index is still open, so nothing is trusted") {
  temp_dir dir;
  auto notify = bind_notify(dir.path() + "/notify");
  first_run(dir, notify, 2, SIGKILL);

  const auto config = dir.write("second.toml", restart_config(dir.path() + "/run2", 1, 64, "512KiB"));
  const auto log = dir.path() + "/second.log";
  service svc(config, log, notify);
  auto d = start(svc, notify, log, dir.path() + "/run2", nullptr);
  CHECK(cached_of(d.complete(conversation(0))) == 0);
  const auto m = d.metrics();
  CHECK(discarded(m, "index_unclean") == 1);
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == 0);
  CHECK(svc.stop() == 0);
}

TEST_CASE("store restart: a restart with a full store serves again quickly (figure printed)") {
  temp_dir dir;
  auto notify = bind_notify(dir.path() + "/notify");
  // 8 MiB full-slot snapshots into a 256 MiB store: 33 conversations fill it
  // (32 stored; the oldest is evicted for the last).
  constexpr int conversations = 33;
  first_run(dir, notify, conversations, SIGTERM, "8MiB", 256, conversations - 1);

  const auto config = dir.write("second.toml", restart_config(dir.path() + "/run2", 1, 256, "8MiB"));
  const auto log = dir.path() + "/second.log";
  service svc(config, log, notify);
  double ready_ms = 0;
  auto d = start(svc, notify, log, dir.path() + "/run2", &ready_ms);
  // Every stored conversation came back: the store is as full as it was.
  const auto m = d.metrics();
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == conversations - 1);
  CHECK(sample(m, R"(kvlane_store_bytes{state="used"})") == 256.0 * 1024 * 1024);
  const auto t = clock_type::now();
  const auto r = d.complete(conversation(conversations - 2));
  const double first_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
  CHECK(cached_of(r) == 99);
  MESSAGE(fmt::format("restart with a full store ({} snapshots, 256 MiB): READY=1 after {:.0f} ms, "
                      "first reused reply {:.0f} ms later",
                      conversations - 1, ready_ms, first_ms));
  CHECK(svc.stop() == 0);
}

TEST_CASE("store restart: under systemd, systemctl restart keeps the store") {
  std::ifstream comm("/proc/1/comm");
  std::string init;
  std::getline(comm, init);
  if (init != "systemd") {
    kvlane::test::skip_test_case("needs systemd as PID 1 (PID 1 is '" + init + "')");
    return;
  }
  if (!kvlane::test::running_as_root()) {
    kvlane::test::skip_test_case("needs root to start a transient systemd service");
    return;
  }
  temp_dir dir;
  const auto config = dir.write("kvlane.toml", restart_config(dir.path() + "/run", 1, 64, "512KiB"));
  const std::string unit = fmt::format("kvlane-store-restart-test-{}", ::getpid());
  auto run = [](std::vector<std::string> args) {
    auto p = spawn(args[0], std::vector<std::string>(args.begin() + 1, args.end()));
    const auto rc = p.wait_exit(60s);
    CAPTURE(p.output());
    REQUIRE(rc == 0);
    return p.output();
  };
  run({"/usr/bin/systemd-run", "--unit=" + unit, "-p", "Type=notify", "-p",
       "FileDescriptorStoreMax=4", "-p", "NotifyAccess=main", KVLANED_PATH, "--config", config});
  auto port_of_unit = [&] {
    const auto journal = run({"/usr/bin/journalctl", "-u", unit, "-o", "cat", "--no-pager"});
    std::smatch m;
    const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
    std::string last;
    for (auto it = std::sregex_iterator(journal.begin(), journal.end(), url);
         it != std::sregex_iterator(); ++it)
      last = (*it)[1];
    REQUIRE(!last.empty());
    return static_cast<std::uint16_t>(std::stoi(last));
  };
  daemon_run d{port_of_unit(), dir.path() + "/run"};
  d.complete(conversation(0));
  d.complete(conversation(1));
  run({"/usr/bin/systemctl", "restart", unit}); // Type=notify: returns once READY=1 came
  d.port = port_of_unit();
  CHECK(cached_of(d.complete(conversation(0))) == 99);
  run({"/usr/bin/systemctl", "stop", unit});
}

TEST_CASE("store restart: with the disk tier as well, the fd store's arena is used first and each "
          "snapshot stays one entry, in both tiers") {
  temp_dir dir;
  auto notify = bind_notify(dir.path() + "/notify");
  const auto disk = fmt::format("[store.disk]\ndir = \"{}/kv\"\n", dir.path());
  {
    const auto config = dir.write(
      "first.toml", restart_config(dir.path() + "/run1", 1, 64, "512KiB") + disk);
    const auto log = dir.path() + "/first.log";
    service svc(config, log, notify);
    auto d = start(svc, notify, log, dir.path() + "/run1", nullptr);
    for (int c = 0; c < 3; ++c)
      CHECK(cached_of(d.complete(conversation(c))) == 0);
    CHECK(svc.stop() == 0);
  }
  const auto config = dir.write(
    "second.toml", restart_config(dir.path() + "/run2", 1, 64, "512KiB") + disk);
  const auto log = dir.path() + "/second.log";
  service svc(config, log, notify);
  auto d = start(svc, notify, log, dir.path() + "/run2", nullptr);
  auto m = d.metrics();
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == 3); // not 3 from each tier
  CHECK(sample(m, R"(kvlane_store_disk_snapshots{tier="both"})") == 3);
  CHECK(sample(m, R"(kvlane_store_disk_snapshots{tier="disk"})") == 0);
  for (int c = 0; c < 3; ++c)
    CHECK(cached_of(d.complete(conversation(c))) == 99);
  m = d.metrics();
  CHECK(sample(m, "kvlane_store_disk_reads_total") == 0); // the arena had every byte
  CHECK(discarded(m, "disk_corrupt") == 0);
  CHECK(svc.stop() == 0);
}
