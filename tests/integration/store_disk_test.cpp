// The snapshot store's disk tier through the real daemon: retained KV comes
// back after a restart without systemd's fd store, a SIGKILL while writes
// are in flight loses only those, a damaged file is never used, `cache ls`
// shows each entry's tier and `cache drop` empties both tiers. The restart
// figure (time to serve with a full disk tier) is printed.

#include "tests/integration/http_fixture.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

using namespace kvlane::test::http;
namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

struct disk_options {
  std::string snapshot = "512KiB";
  int store_mib = 64;
  std::string write_rate = "256MiB";
  std::string disk_max = "1GiB";
};

std::string disk_config(const std::string& run_dir, const std::string& disk_dir,
                        const disk_options& o) {
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
seed = 1
[store]
max_bytes = "{}MiB"
[store.disk]
dir = "{}"
max_bytes = "{}"
write_bytes_per_s = "{}"
[reuse]
min_prefix_tokens = 16
store_share = 1.0
[http]
listen = "127.0.0.1:0"
)",
                     run_dir, o.snapshot, o.store_mib, disk_dir, o.disk_max, o.write_rate);
}

/// Conversation n's prompt: 100 letters, the first two naming n.
std::vector<int> conversation(int n) {
  std::vector<int> out{65 + n % 26, 97 + n / 26 % 26};
  for (int i = 2; i < 100; ++i)
    out.push_back(65 + (n * 11 + i * 7) % 26);
  return out;
}

std::uint64_t cached_of(const json& r) {
  return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
}

double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

double discarded(const std::string& metrics, std::string_view reason) {
  return sample(metrics, fmt::format(R"(kvlane_store_discarded_total{{reason="{}"}})", reason));
}

std::size_t kv_files(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& f : fs::directory_iterator(dir))
    n += f.path().extension() == ".kv";
  return n;
}

/// kvlaned without NOTIFY_SOCKET or LISTEN_FDS: no fd store, the disk tier only.
class daemon_run {
public:
  daemon_run(const temp_dir& dir, const std::string& name, const std::string& disk_dir,
             const disk_options& o = {})
    : run_dir_(dir.path() + "/" + name) {
    const auto config = dir.write(name + ".toml", disk_config(run_dir_, disk_dir, o));
    started_ = clock_type::now();
    proc_ = std::make_unique<child_process>(spawn(KVLANED_PATH, {"--config", config}));
    REQUIRE(proc_->wait_for_output("ready:", 30s));
    ready_ms_ = std::chrono::duration<double, std::milli>(clock_type::now() - started_).count();
    std::smatch m;
    const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
    const auto out = proc_->output();
    REQUIRE(std::regex_search(out, m, url));
    port_ = static_cast<std::uint16_t>(std::stoi(m[1]));
  }

  json complete(int n) {
    socket_fd s{port_};
    const json body{{"model", "tiny"},
                    {"prompt", conversation(n)},
                    {"max_tokens", 4},
                    {"temperature", 0}};
    const auto text = body.dump();
    s.send(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       text.size(), text));
    auto r = parse_reply(s.read_all());
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  }

  std::string cli(std::vector<std::string> args) {
    args.push_back("--socket");
    args.push_back(run_dir_ + "/kvlane-admin.sock");
    auto p = spawn(KVLANE_CLI_PATH, args);
    REQUIRE(p.wait_exit(30s) == 0);
    return p.output();
  }
  std::string metrics() { return cli({"metrics"}); }
  json cache_ls() { return json::parse(cli({"cache", "ls", "--json"}))["entries"]; }

  /// Tier of each entry by its token count's conversation: counts of "memory", "disk", "both".
  std::map<std::string, int> tiers() {
    std::map<std::string, int> out;
    for (const auto& e : cache_ls())
      ++out[e["tier"].get<std::string>().empty() ? "slot" : e["tier"].get<std::string>()];
    return out;
  }

  int stop(int sig = SIGTERM) {
    proc_->signal(sig);
    const auto status = proc_->wait_exit(60s);
    REQUIRE(status.has_value());
    return *status;
  }
  std::string log() const { return proc_->output(); }
  double ready_ms() const { return ready_ms_; }

private:
  std::string run_dir_;
  std::unique_ptr<child_process> proc_;
  std::uint16_t port_ = 0;
  clock_type::time_point started_;
  double ready_ms_ = 0;
};

} // namespace

TEST_CASE("store disk: without the fd store, retained KV comes back from disk after a restart, "
          "lazily, and cache ls shows where each entry is") {
  temp_dir dir;
  const auto disk_dir = dir.path() + "/kv";
  {
    daemon_run d(dir, "first", disk_dir);
    for (int c = 0; c < 3; ++c)
      CHECK(cached_of(d.complete(c)) == 0);
    CHECK(d.stop() == 0);
    CHECK(d.log().find("disk tier: 3 snapshots written back") != std::string::npos);
  }
  CHECK(kv_files(disk_dir) == 3);

  daemon_run d(dir, "second", disk_dir);
  CHECK(d.log().find("3 snapshots") != std::string::npos);
  // Listed from the journal, nothing read yet: every entry is on disk only.
  auto tiers = d.tiers();
  CHECK(tiers["disk"] == 3);
  CHECK(sample(d.metrics(), R"(kvlane_store_bytes{state="used"})") == 0);
  for (int c = 0; c < 3; ++c)
    CHECK(cached_of(d.complete(c)) == 99);
  const auto m = d.metrics();
  CHECK(sample(m, "kvlane_store_restored_snapshots_total") == 3);
  CHECK(sample(m, "kvlane_store_disk_reads_total") == 3);
  const auto status = json::parse(d.cli({"status", "--json"}));
  CHECK(status["store"]["disk"]["reads"] == 3);
  for (const auto* reason : {"disk_corrupt", "checksum", "model_changed", "tokens_mismatch"})
    CHECK(discarded(m, reason) == 0);
  // Each was read back and then superseded by its longer next turn: none is
  // left on disk only.
  tiers = d.tiers();
  CHECK(tiers["disk"] == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("store disk: a file damaged between two runs is never used; it is deleted and counted") {
  temp_dir dir;
  const auto disk_dir = dir.path() + "/kv";
  {
    daemon_run d(dir, "first", disk_dir);
    for (int c = 0; c < 2; ++c)
      d.complete(c);
    CHECK(d.stop() == 0);
  }
  REQUIRE(kv_files(disk_dir) == 2);
  // Flip one byte in the middle of the oldest file's KV.
  fs::path oldest;
  for (const auto& f : fs::directory_iterator(disk_dir))
    if (f.path().extension() == ".kv" && (oldest.empty() || f.path() < oldest))
      oldest = f.path();
  {
    std::fstream io(oldest, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1000, std::ios::end);
    const char c = static_cast<char>(io.get());
    io.seekp(-1000, std::ios::end);
    io.put(static_cast<char>(c ^ 0x5a));
  }
  daemon_run d(dir, "second", disk_dir);
  CHECK(cached_of(d.complete(0)) == 0); // conversation 0 was written first
  CHECK(cached_of(d.complete(1)) == 99);
  const auto m = d.metrics();
  CHECK(discarded(m, "disk_corrupt") == 1);
  CHECK_FALSE(fs::exists(oldest));
  CHECK(d.stop() == 0);
}

TEST_CASE("store disk: a SIGKILL while writes are in flight loses only those; the written entries "
          "are reused and nothing torn is used") {
  temp_dir dir;
  const auto disk_dir = dir.path() + "/kv";
  // 4 MiB snapshots written back at 1 MiB/s after an 8 MiB burst: the first
  // two go at once, every later one takes about 4 s.
  disk_options o;
  o.snapshot = "4MiB";
  o.write_rate = "1MiB";
  constexpr int conversations = 6;
  std::map<std::string, int> at_kill;
  {
    daemon_run d(dir, "first", disk_dir, o);
    for (int c = 0; c < conversations; ++c)
      d.complete(c);
    // Conversations 0..4 are sealed in the store (5 is warm in the slot).
    for (const auto& e : d.cache_ls())
      ++at_kill[e["tier"].get<std::string>()];
    CHECK(d.stop(SIGKILL) == 128 + SIGKILL);
  }
  CAPTURE(at_kill);
  const int written = at_kill["both"];
  CHECK(written >= 1);
  CHECK(at_kill["memory"] >= 1); // at least one write was in flight or queued at the kill
  // The one in flight left its temporary file: never listed, deleted at the next start.
  std::size_t torn = 0;
  for (const auto& f : fs::directory_iterator(disk_dir))
    torn += f.path().extension() == ".tmp";
  CHECK(torn == 1);

  daemon_run d(dir, "second", disk_dir, o);
  // Written in seal order: conversations 0, 1, ... The one being written at
  // the kill may have finished in the moment between the listing and the kill.
  int reused = 0;
  for (int c = 0; c < conversations; ++c) {
    const auto cached = cached_of(d.complete(c));
    CAPTURE(c);
    CHECK((cached == 0 || cached == 99));
    if (cached == 99) {
      CHECK(c == reused); // a prefix of the conversations, none skipped
      ++reused;
    }
  }
  CHECK(reused >= written);
  CHECK(reused <= written + 1);
  CHECK(reused < conversations - 1);
  CHECK(d.log().find("1 unlisted files (writes cut short)") != std::string::npos);
  const auto m = d.metrics();
  CHECK(discarded(m, "disk_corrupt") == 0);
  CHECK(discarded(m, "checksum") == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("store disk: cache drop empties both tiers") {
  temp_dir dir;
  const auto disk_dir = dir.path() + "/kv";
  {
    daemon_run d(dir, "first", disk_dir);
    for (int c = 0; c < 3; ++c)
      d.complete(c);
    CHECK(d.stop() == 0);
  }
  REQUIRE(kv_files(disk_dir) == 3);
  daemon_run d(dir, "second", disk_dir);
  CHECK(cached_of(d.complete(0)) == 99);
  d.cli({"cache", "drop", "--all"});
  CHECK(d.cache_ls().empty());
  CHECK(d.stop() == 0); // the deletions queued by the drop are done by the stop
  CHECK(kv_files(disk_dir) == 0);
}

TEST_CASE("store disk: a restart with a full disk tier serves again quickly (figures printed)") {
  temp_dir dir;
  const auto disk_dir = dir.path() + "/kv";
  disk_options o;
  o.snapshot = "8MiB";
  o.store_mib = 256;
  constexpr int conversations = 32;
  std::string first_log;
  {
    daemon_run d(dir, "first", disk_dir, o);
    for (int c = 0; c < conversations; ++c)
      d.complete(c);
    CHECK(d.stop() == 0);
    first_log = d.log();
  }
  std::smatch written;
  const std::regex summary{R"(disk tier: (\d+) snapshots written back \(([^)]*)\))"};
  REQUIRE(std::regex_search(first_log, written, summary));
  CHECK(std::stoi(written[1]) == conversations);
  CHECK(kv_files(disk_dir) == conversations);
  // Out of the page cache, so the read back below comes from the disk itself.
  for (const auto& f : fs::directory_iterator(disk_dir)) {
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }

  daemon_run d(dir, "second", disk_dir, o);
  const auto t = clock_type::now();
  const auto r = d.complete(conversations - 2);
  const double first_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
  CHECK(cached_of(r) == 99);
  MESSAGE(fmt::format("disk tier, {} snapshots of 8 MiB on disk: restart to ready {:.0f} ms, "
                      "first reply reading one back (not in the page cache) {:.0f} ms later; "
                      "write-back at a bound of 256 MiB/s: {} snapshots, {}",
                      conversations, d.ready_ms(), first_ms, written[1].str(), written[2].str()));
  CHECK(d.stop() == 0);
}
