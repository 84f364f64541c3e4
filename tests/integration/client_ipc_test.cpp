// The client IPC end to end: the real kvlaned as a child process, apps as
// child processes (kvlane_test_client) and in-test clients (the real client
// library, or raw sockets and rings for hostile input).
#include "actors/engine.hpp"
#include "backends/byte_tokenizer.hpp"
#include "daemon/config.hpp"
#include "ipc/control_codec.hpp"
#include "ipc/protocol.hpp"
#include "ipc/record_codec.hpp"
#include "ipc/utf8.hpp"
#include "ipc/spsc_ring.hpp"
#include "tests/integration/ipc_requests.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <kvlane/client.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <map>
#include <sstream>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using kvlane::test::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;
namespace proto = kvlane::ipc::proto;
namespace client = kvlane::client;
using clock_type = std::chrono::steady_clock;

namespace {

std::string ipc_config(const std::string& run_dir, double time_scale, std::string_view extra = "") {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
log_level = "warn"
shutdown_timeout_ms = 5000
[daemon.log_levels]
daemon = "info"
ipc = "info"

[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 256
snapshot_bytes = "1MiB"
time_scale = {}
{}
[http]
listen = ""
)",
                     run_dir, time_scale, extra);
}

/// A kvlaned child with its config in a temp dir that other users may traverse.
struct daemon_fixture {
  temp_dir dir;
  std::string run_dir;
  std::string socket;
  std::string config_text;
  std::unique_ptr<child_process> proc;

  explicit daemon_fixture(double time_scale = 1000, std::string_view extra = "",
                          std::string_view extra_model = "") {
    ::chmod(dir.path().c_str(), 0755);
    run_dir = dir.path() + "/run";
    socket = run_dir + "/kvlane.sock";
    config_text = ipc_config(run_dir, time_scale, extra_model);
    config_text += extra;
    auto cfg = dir.write("kvlane.toml", config_text);
    proc = std::make_unique<child_process>(spawn(KVLANED_PATH, {"--config", cfg}));
    REQUIRE(proc->wait_for_output("ready:", 20s));
    ::chmod(run_dir.c_str(), 0755);
  }

  std::unique_ptr<client::connection> connect(std::string name = "in-test") {
    client::connect_options o;
    o.socket_path = socket;
    o.client_name = std::move(name);
    auto c = client::connect(o);
    if (!c)
      FAIL("connect: " << c.error().message);
    return std::move(*c);
  }
};

struct outcome {
  std::string reason;
  std::vector<std::uint32_t> tokens;
  std::string text;
};

/// What each request yields when run in process on the same config.
std::vector<outcome> expected_outcomes(const std::string& config_text,
                                       const std::vector<client::request>& reqs) {
  auto cfg = kvlane::daemon::parse(config_text);
  REQUIRE(cfg);
  caf::actor_system_config sys_cfg;
  sys_cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system sys{sys_cfg};
  auto eng = kvlane::actors::engine::create(sys, *cfg);
  REQUIRE(eng);
  std::vector<std::shared_ptr<kvlane::actors::token_stream>> streams;
  for (const auto& r : reqs) {
    kvlane::actors::submit_request q;
    q.model = r.model;
    q.client = "expectation";
    q.priority = r.prio == client::priority::batch ? kvlane::actors::priority_class::batch
                                                  : kvlane::actors::priority_class::interactive;
    q.prompt_text = r.prompt;
    q.prompt_tokens = r.prompt_tokens;
    q.sampling.temperature = r.sampling.temperature;
    q.sampling.top_k = r.sampling.top_k;
    q.sampling.top_p = r.sampling.top_p;
    q.sampling.seed = r.sampling.seed;
    q.sampling.max_tokens = r.sampling.max_tokens;
    q.sampling.stop_tokens = r.sampling.stop_tokens;
    q.stop_at_eos = r.sampling.stop_at_eos;
    auto s = (*eng)->submit(std::move(q));
    REQUIRE(s);
    streams.push_back(*s);
  }
  std::vector<outcome> out;
  kvlane::backends::byte_tokenizer tok;
  for (auto& s : streams) {
    auto all = s->collect(60s);
    REQUIRE(all);
    REQUIRE(all->end);
    outcome o;
    o.reason = client::to_string(static_cast<client::end_reason>(all->end->reason));
    o.tokens = all->tokens;
    proto::utf8_stream u;
    o.text = u.feed(tok.decode(o.tokens)) + u.flush();
    out.push_back(std::move(o));
  }
  (*eng)->shutdown();
  return out;
}

std::string hex(std::string_view s) {
  std::string h;
  char buf[3];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    h += buf;
  }
  return h.empty() ? "-" : h;
}

std::string join(const std::vector<std::uint32_t>& t) {
  std::string s;
  for (auto x : t)
    s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "-" : s;
}

/// A hand-made client: raw control socket and rings, for hostile input.
struct raw_conn {
  int fd = -1;
  std::vector<int> fds;
  std::byte* map = nullptr;
  std::size_t map_size = 0;
  kvlane::ipc::ring_writer submit;
  kvlane::ipc::ring_reader events;

  explicit raw_conn(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~raw_conn() {
    if (map)
      ::munmap(map, map_size);
    for (int f : fds)
      ::close(f);
    if (fd >= 0)
      ::close(fd);
  }
  void send(const std::vector<std::byte>& b) {
    REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
  }
  /// The next control message, or nullopt on EOF/timeout.
  std::optional<proto::control_message> receive(std::chrono::milliseconds timeout = 5s) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
      return std::nullopt;
    std::array<std::byte, 2048> buf{};
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))]{};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    auto n = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (n <= 0)
      return std::nullopt;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        fds.push_back(f);
      }
    auto d = proto::decode_control(std::span<const std::byte>{buf.data(), static_cast<std::size_t>(n)});
    REQUIRE(d);
    return *d;
  }
  /// True once the daemon closed the socket (within the timeout).
  bool closed_by_peer(std::chrono::milliseconds timeout = 5s) {
    const auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) == 1) {
        char b[2048];
        if (::recv(fd, b, sizeof b, MSG_DONTWAIT) == 0)
          return true;
      }
    }
    return false;
  }
  /// Handshake; maps the rings.
  proto::welcome_msg hello(const std::string& name = "raw") {
    send(proto::encode(proto::hello_msg{name}));
    auto m = receive();
    REQUIRE(m);
    REQUIRE(std::holds_alternative<proto::welcome_msg>(*m));
    auto w = std::get<proto::welcome_msg>(*m);
    REQUIRE(fds.size() == 3);
    map_size = w.memfd_size;
    map = static_cast<std::byte*>(::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
    REQUIRE(map != MAP_FAILED);
    submit = kvlane::ipc::ring_writer(map, {w.submit_offset, w.submit_capacity, 256}, false);
    events = kvlane::ipc::ring_reader(map, {w.events_offset, w.events_capacity, 256}, false);
    return w;
  }
  void push(const proto::record_bytes& r) {
    REQUIRE(submit.try_push(r) == kvlane::ipc::ring_status::ok);
    kvlane::ipc::eventfd_signal(fds[1]);
  }
  /// The next event record, waiting up to `timeout`.
  std::optional<proto::record> next_event(std::chrono::milliseconds timeout = 5s) {
    proto::record_bytes rec;
    if (!kvlane::ipc::wait_readable(events, fds[2], 0us, timeout))
      return std::nullopt;
    if (events.try_pop(rec) != kvlane::ipc::ring_status::ok)
      return std::nullopt;
    if (events.take_writer_waiting())
      kvlane::ipc::eventfd_signal(fds[1]);
    auto r = proto::decode_record(rec);
    REQUIRE(r);
    return *r;
  }
};

proto::refuse_msg expect_refusal(raw_conn& c) {
  auto m = c.receive();
  REQUIRE(m);
  REQUIRE(std::holds_alternative<proto::refuse_msg>(*m));
  return std::get<proto::refuse_msg>(*m);
}

proto::fatal_msg expect_fatal(raw_conn& c) {
  auto m = c.receive();
  REQUIRE(m);
  REQUIRE(std::holds_alternative<proto::fatal_msg>(*m));
  return std::get<proto::fatal_msg>(*m);
}

/// A well-behaved client still gets a full, correct answer.
void check_serving(daemon_fixture& d) {
  auto c = d.connect("bystander");
  auto r = kvlane::test::ipc_recipe(9, 1);
  auto s = c->submit(r);
  REQUIRE(s);
  std::vector<std::uint32_t> tokens;
  auto end = (*s)->wait(20s, nullptr, &tokens);
  REQUIRE(end);
  CHECK(end->reason == client::end_reason::length);
  CHECK(tokens.size() == r.sampling.max_tokens);
}

proto::submit_rec raw_submit(std::uint64_t id, std::uint32_t max_tokens = 8) {
  proto::submit_rec s;
  s.request_id = id;
  s.model = "tiny";
  s.max_tokens = max_tokens;
  s.prompt_bytes = 5;
  s.inline_data = "hello";
  return s;
}

} // namespace

TEST_CASE("client ipc: 8 client processes x 20 mixed requests each get exactly their expected streams") {
  daemon_fixture d{1000};
  std::vector<std::unique_ptr<child_process>> apps;
  for (int c = 0; c < 8; ++c)
    apps.push_back(std::make_unique<child_process>(spawn(
      KVLANE_TEST_CLIENT_PATH,
      std::vector<std::string>{"--socket", d.socket, "--client", std::to_string(c), "--mode", "mixed",
                               "--requests", "20"})));
  std::vector<client::request> reqs;
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 20; ++i)
      reqs.push_back(kvlane::test::ipc_recipe(c, i));
  const auto expect = expected_outcomes(d.config_text, reqs);

  for (int c = 0; c < 8; ++c) {
    CAPTURE(c);
    auto& app = *apps[static_cast<std::size_t>(c)];
    auto rc = app.wait_exit(90s);
    REQUIRE(rc.has_value());
    CAPTURE(app.output());
    REQUIRE(*rc == 0);
    std::map<int, std::string> lines;
    std::istringstream in{app.output()};
    std::string line;
    while (std::getline(in, line)) {
      if (!line.starts_with("R "))
        continue;
      const int i = std::stoi(line.substr(2));
      CHECK_MESSAGE(lines.count(i) == 0, "request " << i << " reported twice");
      lines[i] = line;
    }
    REQUIRE(lines.size() == 20);
    for (int i = 0; i < 20; ++i) {
      const auto& e = expect[static_cast<std::size_t>(c * 20 + i)];
      CHECK(lines[i] == fmt::format("R {} {} {} {}", i, e.reason, join(e.tokens), hex(e.text)));
    }
  }
  auto watcher = d.connect("watcher");
  auto st = watcher->stats();
  REQUIRE(st);
  CHECK(st->violations == 0);
  CHECK(st->requests_live == 0);
  CHECK(st->clients_total == 9);
}

TEST_CASE("client ipc: kill -9 of a client mid-stream frees its sequences and store within a generous 2 s") {
  // A generous bound, not a latency target: the cleanup runs when the kernel closes the dead
  // client's socket, and wall times on a shared machine are too noisy for a tight one. The
  // measured time is reported below.
  constexpr auto generous_cleanup_bound = 2s;
  // Slow enough that every stream is still running when the victim dies.
  daemon_fixture d{10};
  auto watcher = d.connect("watcher");
  auto victim = spawn(KVLANE_TEST_CLIENT_PATH,
                      {"--socket", d.socket, "--client", "7", "--mode", "hang", "--requests", "6",
                       "--max-tokens", "200"});
  REQUIRE(victim.wait_for_output("STREAMING", 20s));

  // Another client's two interactive streams outrank the victim's batch ones:
  // the victim's resident sequences get parked in the store.
  std::vector<client::request> mine{kvlane::test::ipc_recipe(3, 1, 220), kvlane::test::ipc_recipe(3, 2, 220)};
  std::vector<std::shared_ptr<client::stream>> streams;
  for (auto& r : mine) {
    auto s = watcher->submit(r);
    REQUIRE(s);
    streams.push_back(*s);
  }
  const auto parked_by = clock_type::now() + 10s;
  client::daemon_stats before;
  for (;;) {
    auto st = watcher->stats();
    REQUIRE(st);
    before = *st;
    if (st->store_used_bytes > 0 && st->engine_live == 8)
      break;
    REQUIRE(clock_type::now() < parked_by);
    std::this_thread::sleep_for(5ms);
  }
  CHECK(before.requests_live == 8);

  victim.signal(SIGKILL);
  const auto killed = clock_type::now();
  client::daemon_stats after;
  for (;;) {
    auto st = watcher->stats();
    REQUIRE(st);
    after = *st;
    if (st->engine_live <= 2 && st->store_used_bytes == 0 && st->clients == 1)
      break;
    REQUIRE_MESSAGE(clock_type::now() - killed < generous_cleanup_bound,
                    "sequences not freed: engine_live " << st->engine_live << ", store "
                                                        << st->store_used_bytes);
    std::this_thread::sleep_for(2ms);
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed);
  MESSAGE("victim's sequences and store freed in " << took.count() << " ms");
  CHECK(after.disconnect_cancels >= 6);
  CHECK(after.requests_live <= 2);

  // The other client's streams are untouched.
  const auto expect = expected_outcomes(d.config_text, mine);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    std::string text;
    std::vector<std::uint32_t> tokens;
    auto end = streams[i]->wait(30s, &text, &tokens);
    REQUIRE(end);
    CHECK(client::to_string(end->reason) == expect[i].reason);
    CHECK(tokens == expect[i].tokens);
    CHECK(text == expect[i].text);
  }
}

TEST_CASE("client ipc: hostile handshakes get precise refusals and the daemon keeps serving") {
  daemon_fixture d{1000, "[clients]\nhello_timeout_ms = 300\n"};
  {
    raw_conn c{d.socket};
    auto hello = proto::encode(proto::hello_msg{"old"});
    hello[4] = std::byte{99}; // protocol version 99
    c.send(hello);
    auto r = expect_refusal(c);
    CHECK(r.code == proto::errc::version_mismatch);
    CHECK(r.message.find("protocol version 99") != std::string::npos);
    CHECK(c.closed_by_peer());
  }
  {
    raw_conn c{d.socket};
    c.send({std::byte{'K'}, std::byte{'V'}, std::byte{'L'}});
    auto r = expect_refusal(c);
    CHECK(r.code == proto::errc::bad_message);
    CHECK(r.message.find("shorter than") != std::string::npos);
  }
  {
    raw_conn c{d.socket};
    c.send(std::vector<std::byte>(4000, std::byte{0x41}));
    auto r = expect_refusal(c);
    CHECK(r.message.find("4000 bytes exceeds the limit") != std::string::npos);
  }
  {
    raw_conn c{d.socket};
    c.send(std::vector<std::byte>(40, std::byte{0x5A}));
    CHECK(expect_refusal(c).message.find("bad magic") != std::string::npos);
  }
  {
    raw_conn c{d.socket};
    c.send(proto::encode(proto::stats_request_msg{}));
    CHECK(expect_refusal(c).message.find("first message must be a hello") != std::string::npos);
  }
  {
    raw_conn c{d.socket}; // says nothing
    auto r = expect_refusal(c);
    CHECK(r.code == proto::errc::timeout);
    CHECK(r.message.find("no hello within 300 ms") != std::string::npos);
  }
  {
    client::connect_options o;
    o.socket_path = d.run_dir + "/nothing.sock";
    auto c = client::connect(o);
    REQUIRE_FALSE(c);
    CHECK(c.error().code == client::errc::daemon_not_running);
    CHECK(c.error().message == "kvlaned is not running (no socket at " + o.socket_path + ")");
  }
  check_serving(d);
}

TEST_CASE("client ipc: malformed records end only that client's connection, with a clear error") {
  daemon_fixture d{1000};
  SUBCASE("garbage record") {
    raw_conn c{d.socket};
    c.hello();
    proto::record_bytes junk;
    junk.fill(std::byte{0xEE});
    c.push(junk);
    auto f = expect_fatal(c);
    CHECK(f.code == proto::errc::bad_message);
    CHECK(f.message.find("unknown record type 238") != std::string::npos);
    auto ev = c.next_event();
    REQUIRE(ev);
    REQUIRE(std::holds_alternative<proto::error_rec>(*ev));
    CHECK(std::get<proto::error_rec>(*ev).message == f.message);
    CHECK(c.closed_by_peer());
  }
  SUBCASE("scribbled ring index") {
    raw_conn c{d.socket};
    auto w = c.hello();
    auto* tail = reinterpret_cast<std::atomic<std::uint64_t>*>(c.map + w.submit_offset + 64);
    tail->store(1'000'000);
    kvlane::ipc::eventfd_signal(c.fds[1]);
    auto f = expect_fatal(c);
    CHECK(f.code == proto::errc::ring_corrupt);
    CHECK(f.message.find("tail index") != std::string::npos);
  }
  SUBCASE("an app that clears O_NONBLOCK on its wake-up socket is woken and served") {
    raw_conn c{d.socket};
    c.hello();
    const int wake = c.fds[2]; // [memfd, submit eventfd, events wake-up socket]
    struct stat st{};
    REQUIRE(::fstat(wake, &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    REQUIRE(::fcntl(wake, F_SETFL, ::fcntl(wake, F_GETFL) & ~O_NONBLOCK) == 0);
    c.events.prepare_sleep(); // ask to be woken, so the daemon signals the socket
    proto::record_bytes r;
    proto::encode(raw_submit(7, 20), r);
    c.push(r);
    bool ended = false;
    while (auto ev = c.next_event())
      if (auto* e = std::get_if<proto::end_rec>(&*ev)) {
        CHECK(e->reason == proto::end_reason::length);
        ended = true;
        break;
      }
    CHECK(ended);
  }
  SUBCASE("duplicate request id") {
    raw_conn c{d.socket};
    c.hello();
    proto::record_bytes r;
    proto::encode(raw_submit(5, 200), r);
    c.push(r);
    c.push(r);
    auto f = expect_fatal(c);
    CHECK(f.code == proto::errc::duplicate_request);
    CHECK(f.request_id == 5);
  }
  SUBCASE("chunks out of order, and a chunk past the announced length") {
    raw_conn c{d.socket};
    c.hello();
    std::vector<proto::record_bytes> recs;
    proto::pack_submit(raw_submit(6), std::string(400, 'x'), recs);
    c.push(recs[0]);
    c.push(recs[2]); // skips recs[1]
    auto f = expect_fatal(c);
    CHECK(f.message.find("gap or out of order") != std::string::npos);
  }
  SUBCASE("invalid UTF-8 prompt") {
    raw_conn c{d.socket};
    c.hello();
    auto s = raw_submit(7);
    s.inline_data = "he\xFFlo";
    proto::record_bytes r;
    proto::encode(s, r);
    c.push(r);
    CHECK(expect_fatal(c).message.find("not valid UTF-8") != std::string::npos);
  }
  SUBCASE("an unknown model is a request error; the connection stays usable") {
    auto c = d.connect();
    auto r = kvlane::test::ipc_recipe(1, 1);
    r.model = "no-such-model";
    auto s = c->submit(r);
    REQUIRE(s);
    auto ch = (*s)->next(10s);
    REQUIRE_FALSE(ch);
    CHECK(ch.error().code == client::errc::unknown_model);
    CHECK(ch.error().message.find("unknown model 'no-such-model'") != std::string::npos);
    auto ok = c->submit(kvlane::test::ipc_recipe(1, 2));
    REQUIRE(ok);
    REQUIRE((*ok)->wait(20s));
  }
  check_serving(d);
  auto w = d.connect("watcher");
  auto st = w->stats();
  REQUIRE(st);
  CHECK(st->clients == 1);
}

TEST_CASE("client ipc: a client that stops reading is cancelled with reason backlog, others go on") {
  daemon_fixture d{50, "[clients]\nevents_ring_records = 16\nmax_backlog_records = 64\n"};
  raw_conn slow{d.socket};
  slow.hello("slow");
  for (std::uint64_t id = 1; id <= 4; ++id) {
    proto::record_bytes r;
    proto::encode(raw_submit(id, 200), r);
    slow.push(r);
  }
  auto fast = d.connect("fast");
  std::vector<client::request> mine{kvlane::test::ipc_recipe(4, 1, 100), kvlane::test::ipc_recipe(4, 2, 100)};
  std::vector<std::shared_ptr<client::stream>> streams;
  for (auto& r : mine)
    streams.push_back(*fast->submit(r));
  const auto expect = expected_outcomes(d.config_text, mine);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    std::vector<std::uint32_t> tokens;
    auto end = streams[i]->wait(30s, nullptr, &tokens);
    REQUIRE(end);
    CHECK(tokens == expect[i].tokens);
  }
  const auto by = clock_type::now() + 20s;
  for (;;) {
    auto st = fast->stats();
    REQUIRE(st);
    if (st->backlog_cancels >= 4 && st->engine_live == 0)
      break;
    REQUIRE(clock_type::now() < by);
    std::this_thread::sleep_for(10ms);
  }
  // Reading again, the slow client gets every end, each saying why.
  std::map<std::uint64_t, proto::end_rec> ends;
  while (ends.size() < 4) {
    auto ev = slow.next_event(5s);
    REQUIRE(ev);
    if (auto* e = std::get_if<proto::end_rec>(&*ev))
      ends[e->request_id] = *e;
  }
  for (auto& [id, e] : ends) {
    CAPTURE(id);
    CHECK(e.reason == proto::end_reason::backlog);
    CHECK(e.message.find("stopped reading") != std::string::npos);
  }
}

TEST_CASE("client ipc: users outside allow_users are refused, a closed socket mode denies access") {
  KVLANE_SKIP_UNLESS_ROOT("runs a client under another uid");
  SUBCASE("not allowed") {
    daemon_fixture d{1000, "[clients]\nallow_users = [\"root\"]\n"};
    auto app = spawn(KVLANE_TEST_CLIENT_PATH,
                     {"--socket", d.socket, "--mode", "connect", "--uid", "65534"});
    auto rc = app.wait_exit(20s);
    REQUIRE(rc);
    CAPTURE(app.output());
    CHECK(*rc == static_cast<int>(client::errc::not_allowed));
    CHECK(app.output().find("(uid 65534) is not allowed to use kvlaned") != std::string::npos);
    check_serving(d);
  }
  SUBCASE("socket mode 0600") {
    daemon_fixture d{1000, "[clients]\nsocket_mode = 0o600\n"};
    auto app = spawn(KVLANE_TEST_CLIENT_PATH,
                     {"--socket", d.socket, "--mode", "connect", "--uid", "65534"});
    auto rc = app.wait_exit(20s);
    REQUIRE(rc);
    CAPTURE(app.output());
    CHECK(*rc == static_cast<int>(client::errc::permission_denied));
    check_serving(d);
  }
}

TEST_CASE("client ipc: when the daemon stops, open streams end with connection_lost") {
  daemon_fixture d{10};
  auto c = d.connect();
  auto s = c->submit(kvlane::test::ipc_recipe(2, 1, 220));
  REQUIRE(s);
  REQUIRE((*s)->next(10s));
  // The first SIGTERM starts the shutdown grace (running streams may finish);
  // the second one stops the daemon at once.
  d.proc->signal(SIGTERM);
  REQUIRE(d.proc->wait_for_output("SIGTERM received", 10s));
  d.proc->signal(SIGTERM);
  for (;;) {
    auto ch = (*s)->next(10s);
    REQUIRE(((ch && !ch->end) || !ch));
    if (!ch) {
      CHECK(ch.error().code == client::errc::connection_lost);
      CHECK(ch.error().message.find("shutting down") != std::string::npos);
      break;
    }
  }
  CHECK_FALSE(c->connected());
  REQUIRE(d.proc->wait_exit(20s) == 0);
  client::connect_options o;
  o.socket_path = d.socket;
  auto again = client::connect(o);
  REQUIRE_FALSE(again);
  CHECK(again.error().code == client::errc::daemon_not_running);
}

TEST_CASE("client ipc: kvlane run streams the answer and explains a missing daemon") {
  daemon_fixture d{1000};
  const auto r = kvlane::test::ipc_recipe(0, 2, 20);
  const auto expect = expected_outcomes(d.config_text, {r});
  auto run = spawn(KVLANE_CLI_PATH,
                   {"run", "--socket", d.socket, "--model", "tiny", "--max-tokens", "20", r.prompt});
  auto rc = run.wait_exit(20s);
  REQUIRE(rc);
  CHECK(*rc == 0);
  CHECK(run.output() == expect[0].text + "\n");

  auto none = spawn(KVLANE_CLI_PATH, {"run", "--socket", d.run_dir + "/gone.sock", "hi"});
  rc = none.wait_exit(20s);
  REQUIRE(rc);
  CHECK(*rc == 69);
  CHECK(none.output().find("kvlaned is not running (no socket at " + d.run_dir + "/gone.sock)")
        != std::string::npos);
}

TEST_CASE("client ipc: the C and C++ examples stream an answer through the default socket") {
  daemon_fixture d{1000};
  client::request r;
  r.model = "tiny";
  r.prompt = "Hello";
  r.sampling.max_tokens = 32;
  const auto expect = expected_outcomes(d.config_text, {r});
  ::setenv("KVLANE_SOCKET", d.socket.c_str(), 1);
  for (const char* exe : {KVLANE_EXAMPLE_C_PATH, KVLANE_EXAMPLE_CPP_PATH}) {
    CAPTURE(exe);
    auto app = spawn(exe, {"Hello"});
    auto rc = app.wait_exit(20s);
    REQUIRE(rc);
    CHECK(*rc == 0);
    CHECK(app.output() == expect[0].text + "\n");
  }
  ::setenv("KVLANE_SOCKET", (d.run_dir + "/absent.sock").c_str(), 1);
  auto app = spawn(KVLANE_EXAMPLE_C_PATH, {});
  auto rc = app.wait_exit(20s);
  ::unsetenv("KVLANE_SOCKET");
  REQUIRE(rc);
  CHECK(*rc == 1);
  CHECK(app.output() == "connect: kvlaned is not running (no socket at " + d.run_dir + "/absent.sock)\n");
}

namespace {

/// One hostile app: keeps requests streaming and races the daemon's wake-up of
/// its events ring. Each round it drains the wake-up fd with O_NONBLOCK set,
/// asks to be woken, waits until the daemon claims the wake-up (it is then
/// about to signal), saturates the fd and clears O_NONBLOCK. A daemon that
/// checks the flags, then the fd's room, then writes, can be caught between
/// the check and the write: its thread then blocks for good. The app notices
/// (its ring stops moving while its requests are live) and holds the fd in
/// that state.
struct hostile_app {
  raw_conn conn;
  proto::welcome_msg welcome{};
  std::uint64_t next_id = 1;
  std::size_t live = 0;
  bool caught_daemon = false;

  explicit hostile_app(const std::string& socket) : conn(socket) { welcome = conn.hello("hostile"); }

  void submit_one() {
    proto::record_bytes r;
    proto::encode(raw_submit(next_id++, 200), r);
    if (conn.submit.try_push(r) == kvlane::ipc::ring_status::ok) {
      kvlane::ipc::eventfd_signal(conn.fds[1]);
      ++live;
    }
  }

  void consume() {
    proto::record_bytes rec;
    while (conn.events.try_pop(rec) == kvlane::ipc::ring_status::ok) {
      auto r = proto::decode_record(rec);
      if (r && (std::holds_alternative<proto::end_rec>(*r) || std::holds_alternative<proto::error_rec>(*r)))
        live = live > 0 ? live - 1 : 0;
    }
    if (conn.events.take_writer_waiting())
      kvlane::ipc::eventfd_signal(conn.fds[1]);
  }

  void race(clock_type::time_point until, std::uint32_t seed) {
    const int wake = conn.fds[2];
    const int flags = ::fcntl(wake, F_GETFL);
    auto* reader_waiting = reinterpret_cast<std::atomic<std::uint32_t>*>(
      conn.map + welcome.events_offset + kvlane::ipc::ring_layout::reader_waiting);
    auto* tail = reinterpret_cast<std::atomic<std::uint64_t>*>(
      conn.map + welcome.events_offset + kvlane::ipc::ring_layout::tail);
    while (clock_type::now() < until) {
      consume();
      while (live < 4)
        submit_one();
      ::fcntl(wake, F_SETFL, flags | O_NONBLOCK);
      std::uint64_t drained = 0;
      (void)!::read(wake, &drained, sizeof drained);
      reader_waiting->store(1);
      const auto claim_deadline = clock_type::now() + 2ms;
      while (reader_waiting->load() != 0 && clock_type::now() < claim_deadline) {
      }
      reader_waiting->store(0); // no later wake-up: only the one in flight is raced
      // A random 0..3 us, so that the saturation lands inside the daemon's
      // check-then-write window on some rounds.
      seed = seed * 1103515245u + 12345u;
      const auto spin_until = clock_type::now() + std::chrono::nanoseconds((seed >> 16) % 3000);
      while (clock_type::now() < spin_until) {
      }
      const std::uint64_t saturate = 0xfffffffffffffffeull;
      // (A socket end gets the same bytes; MSG_NOSIGNAL: the daemon's end refuses them.)
      if (::send(wake, &saturate, sizeof saturate, MSG_NOSIGNAL) < 0 && errno == ENOTSOCK)
        (void)!::write(wake, &saturate, sizeof saturate);
      ::fcntl(wake, F_SETFL, flags & ~O_NONBLOCK);
      // Tokens arrive every few tens of microseconds: a ring that stays still
      // for 3 ms with requests live means the daemon's writer is stuck.
      const auto before = tail->load();
      const auto watch_until = clock_type::now() + 3ms;
      while (tail->load() == before && clock_type::now() < watch_until) {
      }
      if (tail->load() == before && live > 0) {
        caught_daemon = true; // a daemon thread is blocked in its write (or it closed us)
        return;
      }
    }
    ::fcntl(wake, F_SETFL, flags | O_NONBLOCK);
  }
};

} // namespace

TEST_CASE("client ipc: an app that races O_NONBLOCK and saturates its wake-up fd blocks no daemon thread") {
  daemon_fixture d{1000};
  constexpr int hostile_count = 3; // more than the daemon's 2 worker threads
  std::vector<std::unique_ptr<hostile_app>> apps;
  for (int i = 0; i < hostile_count; ++i) {
    apps.push_back(std::make_unique<hostile_app>(d.socket));
  }
  std::vector<std::thread> racers;
  const auto until = clock_type::now() + 4s;
  for (int i = 0; i < hostile_count; ++i)
    racers.emplace_back([&, i] { apps[static_cast<std::size_t>(i)]->race(until, 17u + static_cast<std::uint32_t>(i)); });
  for (auto& t : racers)
    t.join();
  int caught = 0;
  for (auto& a : apps)
    caught += a->caught_daemon ? 1 : 0;
  MESSAGE("hostile apps that saw their ring stall: " << caught << " of " << hostile_count);

  // Other apps keep streaming, and the admin socket answers, while the hostile
  // apps hold their fds blocking and saturated.
  check_serving(d);
  auto status = spawn(KVLANE_CLI_PATH, {"status", "--socket", d.run_dir + "/kvlane-admin.sock"});
  auto rc = status.wait_exit(20s);
  REQUIRE(rc);
  CAPTURE(status.output());
  CHECK(*rc == 0);
}

TEST_CASE("client ipc: an app that keeps its submit ring full of cancels does not hold the loop from another app") {
  daemon_fixture d{1000};
  raw_conn flood{d.socket};
  const auto w = flood.hello("flood");
  // Fill every slot with a cancel of an id that was never submitted (it costs
  // the daemon a decode and a lookup, nothing else), then keep the ring full
  // by moving the tail up to head + capacity whenever the daemon consumed:
  // the app republishes the same records at no cost, faster than any loop
  // can decode them.
  proto::record_bytes r;
  proto::encode(proto::cancel_rec{1'000'000}, r);
  for (std::uint32_t i = 0; i < w.submit_capacity; ++i)
    (void)flood.submit.try_push(r); // (the daemon may consume meanwhile: fill each slot once)
  kvlane::ipc::eventfd_signal(flood.fds[1]);
  auto* head = reinterpret_cast<std::atomic<std::uint64_t>*>(flood.map + w.submit_offset);
  auto* tail = reinterpret_cast<std::atomic<std::uint64_t>*>(flood.map + w.submit_offset + 64);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> republished{0};
  std::thread flooder{[&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const auto h = head->load(std::memory_order_acquire);
      const auto t = tail->load(std::memory_order_relaxed);
      if (h + w.submit_capacity != t) {
        tail->store(h + w.submit_capacity, std::memory_order_release);
        republished.fetch_add(h + w.submit_capacity - t, std::memory_order_relaxed);
        kvlane::ipc::eventfd_signal(flood.fds[1]);
      }
    }
  }};
  // The flood is under way once the daemon has consumed a few rings' worth.
  const auto flood_deadline = clock_type::now() + 10s;
  while (head->load() < 16ull * w.submit_capacity && clock_type::now() < flood_deadline)
    std::this_thread::yield();

  client::connect_options o;
  o.socket_path = d.socket;
  o.client_name = "bystander";
  o.timeout = 20s;
  auto c = client::connect(o);
  int completed = 0;
  std::optional<client::daemon_stats> st;
  if (c) {
    std::vector<std::shared_ptr<client::stream>> streams;
    for (int i = 0; i < 4; ++i)
      if (auto s = (*c)->submit(kvlane::test::ipc_recipe(3, i)))
        streams.push_back(*s);
    for (auto& s : streams)
      if (s->wait(20s))
        ++completed;
    if (auto x = (*c)->stats(5s))
      st = *x;
  }
  stop = true;
  flooder.join();
  MESSAGE("flood records republished: " << republished.load() << ", consumed by the daemon: "
                                        << head->load());
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
  CHECK(completed == 4);
  CHECK(st.has_value());
}

namespace {

client::request long_batch(int i, std::uint32_t max_tokens = 100) {
  auto r = kvlane::test::ipc_recipe(5, i, max_tokens);
  r.prompt = "admission request " + std::to_string(i);
  r.prompt_tokens.clear();
  r.prio = client::priority::batch;
  return r;
}

/// The error a stream ends with (nullopt if it ended normally or timed out).
std::optional<client::error> stream_error(client::stream& s) {
  auto first = s.next(20s);
  if (!first)
    return first.error();
  return std::nullopt;
}

} // namespace

TEST_CASE("client ipc: admission limits answer busy with a retry hint and disturb nothing admitted") {
  SUBCASE("connections of one user, then a live reload raises the limit") {
    daemon_fixture d{20, "[clients]\nmax_clients_per_user = 2\nbusy_retry_ms = 150\n"};
    auto a = d.connect("a");
    auto b = d.connect("b");
    client::connect_options o;
    o.socket_path = d.socket;
    o.client_name = "c";
    auto c = client::connect(o);
    REQUIRE_FALSE(c);
    CHECK(c.error().code == client::errc::busy);
    CAPTURE(c.error().message);
    CHECK(c.error().message.find("max_clients_per_user") != std::string::npos);
    CHECK(c.error().message.find("retry after 150 ms") != std::string::npos);
    // The admitted connections are untouched.
    for (auto* conn : {a.get(), b.get()}) {
      auto s = conn->submit(long_batch(1, 10));
      REQUIRE(s);
      auto end = (*s)->wait(20s);
      REQUIRE(end);
      CHECK(end->reason == client::end_reason::length);
    }
    auto text = d.config_text;
    text.replace(text.find("max_clients_per_user = 2"), 24, "max_clients_per_user = 3");
    d.dir.write("kvlane.toml", text);
    auto reload = spawn(KVLANE_CLI_PATH, {"reload", "--socket", d.run_dir + "/kvlane-admin.sock"});
    REQUIRE(reload.wait_exit(20s) == 0);
    auto again = client::connect(o);
    CHECK(again.has_value());
  }
  SUBCASE("live requests of one user") {
    daemon_fixture d{20, "[clients]\nmax_requests_per_user = 3\nbusy_retry_ms = 150\n"};
    auto a = d.connect("a");
    auto b = d.connect("b");
    std::vector<std::shared_ptr<client::stream>> running;
    for (int i = 0; i < 2; ++i)
      running.push_back(*a->submit(long_batch(i)));
    running.push_back(*b->submit(long_batch(2)));
    auto over = b->submit(long_batch(3));
    REQUIRE(over);
    auto err = stream_error(**over);
    REQUIRE(err);
    CHECK(err->code == client::errc::busy);
    CAPTURE(err->message);
    CHECK(err->message.find("max_requests_per_user") != std::string::npos);
    CHECK(err->message.find("retry after 150 ms") != std::string::npos);
    for (auto& s : running) {
      std::vector<std::uint32_t> tokens;
      auto end = s->wait(30s, nullptr, &tokens);
      REQUIRE(end);
      CHECK(end->reason == client::end_reason::length);
      CHECK(tokens.size() == 100);
    }
    // Released at their ends: the connection that was told busy is admitted now.
    auto later = b->submit(long_batch(4, 10));
    REQUIRE(later);
    auto end = (*later)->wait(20s);
    REQUIRE(end);
    CHECK(end->reason == client::end_reason::length);
  }
  SUBCASE("live sequences of all apps together") {
    daemon_fixture d{20, "[clients]\nmax_live_sequences = 3\n"};
    auto a = d.connect("a");
    auto b = d.connect("b");
    std::vector<std::shared_ptr<client::stream>> running;
    for (int i = 0; i < 2; ++i)
      running.push_back(*a->submit(long_batch(i)));
    running.push_back(*b->submit(long_batch(2)));
    auto over = b->submit(long_batch(3));
    REQUIRE(over);
    auto err = stream_error(**over);
    REQUIRE(err);
    CHECK(err->code == client::errc::busy);
    CAPTURE(err->message);
    CHECK(err->message.find("max_live_sequences") != std::string::npos);
    CHECK(err->message.find("retry after 200 ms") != std::string::npos);
    for (auto& s : running) {
      auto end = s->wait(30s);
      REQUIRE(end);
      CHECK(end->reason == client::end_reason::length);
    }
  }
  SUBCASE("connections that have not said hello yet") {
    daemon_fixture d{20, "[clients]\nmax_pending = 2\n"};
    raw_conn first{d.socket};
    raw_conn second{d.socket};
    raw_conn third{d.socket};
    auto r = expect_refusal(third);
    CHECK(r.code == proto::errc::busy);
    CAPTURE(r.message);
    CHECK(r.message.find("max_pending") != std::string::npos);
    CHECK(r.message.find("retry after 200 ms") != std::string::npos);
    first.hello("first");
    second.hello("second");
    check_serving(d);
  }
}
