// Sessions end to end: the real kvlaned, the real client library, `kvlane
// chat` and `kvlane cache drop --session` as child processes. A session's
// turns must yield what a stateless request carrying the whole history
// yields, reuse the previous turn's retained KV, stay private to their user
// and name, and be forgotten when dropped.
#include "tests/support/child_process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

#include <kvlane/client.hpp>
#include <kvlane/kvlane.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

using namespace std::chrono_literals;
using kvlane::test::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;
using json = nlohmann::json;
namespace client = kvlane::client;
using tokens = std::vector<std::uint32_t>;

namespace {

std::string session_config(const std::string& run_dir, double time_scale) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
log_level = "warn"
shutdown_timeout_ms = 5000
[daemon.log_levels]
daemon = "info"
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 512
snapshot_bytes = "512KiB"
time_scale = {}
[reuse]
min_prefix_tokens = 16
[sessions]
max_per_user = 8
[http]
listen = ""
)",
                     run_dir, time_scale);
}

struct daemon_fixture {
  temp_dir dir;
  std::string run_dir = dir.path() + "/run";
  std::string socket = run_dir + "/kvlane.sock";
  std::unique_ptr<child_process> proc;

  /// time_scale: simulated ms per wall ms (the sim's speed).
  explicit daemon_fixture(double time_scale = 1000) {
    ::chmod(dir.path().c_str(), 0755); // another uid must reach the socket
    auto cfg = dir.write("kvlane.toml", session_config(run_dir, time_scale));
    proc = std::make_unique<child_process>(spawn(KVLANED_PATH, {"--config", cfg}));
    REQUIRE(proc->wait_for_output("ready:", 20s));
    ::chmod(run_dir.c_str(), 0755);
  }

  std::unique_ptr<client::connection> connect() {
    client::connect_options o;
    o.socket_path = socket;
    o.client_name = "session-test";
    auto c = client::connect(o);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
    return std::move(*c);
  }

  std::pair<int, std::string> run(const std::string& path, std::vector<std::string> args) {
    auto p = spawn(path, std::move(args));
    auto rc = p.wait_exit(60s);
    REQUIRE(rc.has_value());
    return {*rc, p.output()};
  }

  json status() {
    auto [rc, out] = run(KVLANE_CLI_PATH,
                         {"status", "--json", "--socket", run_dir + "/kvlane-admin.sock"});
    CAPTURE(out);
    REQUIRE(rc == 0);
    return json::parse(out);
  }
};

/// n byte tokens (the sim's vocabulary is the 256 bytes and two specials),
/// counting up from `first` and wrapping within 32..231.
tokens byte_tokens(std::size_t n, std::uint32_t first) {
  tokens t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = 32 + static_cast<std::uint32_t>((first + i) % 200);
  return t;
}

struct turn_result {
  tokens generated;
  client::end_info end;
};

turn_result ask(client::connection& c, const tokens& prompt, const std::string& session,
                std::uint32_t max_tokens = 16) {
  client::request r;
  r.model = "tiny";
  r.prompt_tokens = prompt;
  r.session = session;
  r.sampling.max_tokens = max_tokens;
  r.sampling.stop_at_eos = false; // every turn generates exactly max_tokens
  auto s = c.submit(r);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().message));
  turn_result out;
  auto end = (*s)->wait(60s, nullptr, &out.generated);
  REQUIRE_MESSAGE(end, (end ? "" : end.error().message));
  out.end = *end;
  REQUIRE(out.end.reason == client::end_reason::length);
  return out;
}

tokens concat(std::initializer_list<const tokens*> parts) {
  tokens out;
  for (auto* p : parts)
    out.insert(out.end(), p->begin(), p->end());
  return out;
}

std::uint64_t reused_tokens(const json& status) {
  return status["models"][0]["reuse"]["reused_tokens"].get<std::uint64_t>();
}

} // namespace

TEST_CASE("sessions: three turns equal stateless requests with the whole history and reuse "
          "its KV") {
  daemon_fixture d;
  auto c = d.connect();
  const auto p1 = byte_tokens(40, 0), p2 = byte_tokens(20, 60), p3 = byte_tokens(20, 90);

  auto t1 = ask(*c, p1, "conv");
  CHECK(t1.end.prompt_tokens == p1.size());
  const auto before2 = reused_tokens(d.status());
  auto t2 = ask(*c, p2, "conv");
  const auto history2 = concat({&p1, &t1.generated, &p2});
  CHECK(t2.end.prompt_tokens == history2.size());
  const auto before3 = reused_tokens(d.status());
  auto t3 = ask(*c, p3, "conv");
  const auto history3 = concat({&history2, &t2.generated, &p3});
  CHECK(t3.end.prompt_tokens == history3.size());
  const auto after3 = reused_tokens(d.status());

  // (b) each later turn started from the previous turn's retained KV: at
  // least the whole 16-token blocks of the history it extends.
  CHECK(before3 - before2 >= 48); // of p1 + g1: 56 tokens
  CHECK(after3 - before3 >= 80);  // of history2 + g2: 92 tokens

  // (a) the same tokens as stateless requests carrying the whole history.
  CHECK(ask(*c, history2, "").generated == t2.generated);
  CHECK(ask(*c, history3, "").generated == t3.generated);
}

TEST_CASE("sessions: another session name or another user does not see the history") {
  KVLANE_SKIP_UNLESS_ROOT("runs a client as uid 65534");
  daemon_fixture d;
  auto c = d.connect();
  const auto p1 = byte_tokens(40, 0), p2 = byte_tokens(20, 60);
  ask(*c, p1, "private");

  auto other_name = ask(*c, p2, "elsewhere");
  CHECK(other_name.end.prompt_tokens == p2.size());

  // The same session name, asked by uid 65534: a conversation of its own.
  auto [rc, out] = d.run(KVLANE_TEST_CLIENT_PATH,
                         {"--socket", d.socket, "--mode", "session", "--session", "private",
                          "--uid", "65534"});
  CAPTURE(out);
  REQUIRE(rc == 0);
  // kvlane_test_client sends 20 prompt tokens and prints the end's prompt count:
  // nothing of uid 0's session came before them.
  CHECK(out.find("PROMPT_TOKENS 20\n") != std::string::npos);

  // And the owner's history is intact.
  auto again = ask(*c, p2, "private");
  CHECK(again.end.prompt_tokens == p1.size() + 16 + p2.size());
}

TEST_CASE("sessions: a drop from the app or the admin empties the history and drops the KV its "
          "turns left") {
  daemon_fixture d;
  auto c = d.connect();
  const auto p1 = byte_tokens(40, 0), p2 = byte_tokens(20, 60);
  ask(*c, p1, "conv");
  auto retained = [&] { return d.status()["models"][0]["reuse"]["entries"].get<std::uint64_t>(); };
  REQUIRE(retained() == 1);

  auto dropped = c->drop_session("conv");
  REQUIRE(dropped);
  CHECK(*dropped);
  CHECK(retained() == 0);
  auto none = c->drop_session("conv");
  REQUIRE(none);
  CHECK_FALSE(*none);
  CHECK(ask(*c, p2, "conv").end.prompt_tokens == p2.size());
  REQUIRE(retained() == 1);

  auto bad = c->drop_session("no spaces");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == client::errc::invalid_argument);

  // kvlane cache drop --session (the admin socket), for this user (uid of the test).
  const auto admin = d.run_dir + "/kvlane-admin.sock";
  auto [rc, out] = d.run(KVLANE_CLI_PATH, {"cache", "drop", "--session", "conv", "--uid",
                                           std::to_string(::getuid()), "--socket", admin});
  CAPTURE(out);
  CHECK(rc == 0);
  CHECK(out.find("dropped session 'conv'") != std::string::npos);
  CHECK(out.find("its history, 1 retained entries") != std::string::npos);
  CHECK(retained() == 0);
  CHECK(ask(*c, p2, "conv").end.prompt_tokens == p2.size());
  auto [rc2, out2] = d.run(KVLANE_CLI_PATH, {"cache", "drop", "--session", "missing", "--uid",
                                             std::to_string(::getuid()), "--socket", admin});
  CHECK(rc2 == 1);
  CHECK(out2.find("not_found") != std::string::npos);
}

TEST_CASE("sessions: a turn while the session's last one runs is refused, the session goes on") {
  daemon_fixture d{5}; // slow enough that 400 tokens outlast the second submit by far
  auto c = d.connect();
  client::request r;
  r.model = "tiny";
  r.prompt_tokens = byte_tokens(20, 100);
  r.session = "busy";
  r.sampling.max_tokens = 400;
  r.sampling.stop_at_eos = false;
  auto first = c->submit(r);
  REQUIRE(first);
  auto second = c->submit(r);
  REQUIRE(second);
  auto refused = (*second)->wait(60s);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == client::errc::session_busy);
  CHECK(refused.error().message.find("still answering its last turn") != std::string::npos);
  // A cancelled turn keeps what was streamed.
  tokens streamed;
  REQUIRE((*first)->cancel());
  auto end = (*first)->wait(60s, nullptr, &streamed);
  REQUIRE(end);
  auto next = ask(*c, byte_tokens(4, 500), "busy", 4);
  CHECK(next.end.prompt_tokens == 20 + streamed.size() + 4);
}

TEST_CASE("sessions: a turn that would outgrow the context is refused and the history kept") {
  daemon_fixture d;
  auto c = d.connect();
  ask(*c, byte_tokens(200, 100), "long", 16);
  client::request r;
  r.model = "tiny";
  r.prompt_tokens = byte_tokens(250, 100);
  r.session = "long";
  r.sampling.max_tokens = 100; // 216 + 250 + 100 > 512
  auto s = c->submit(r);
  REQUIRE(s);
  auto end = (*s)->wait(60s);
  REQUIRE_FALSE(end);
  CHECK(end.error().code == client::errc::too_long);
  CHECK(end.error().message.find("holds 216 tokens") != std::string::npos);
  CHECK(ask(*c, byte_tokens(4, 500), "long", 4).end.prompt_tokens == 216 + 4);
}

TEST_CASE("sessions: kvlane chat reads turns from a pipe and keeps them in its session") {
  daemon_fixture d;
  // Two turns (the first spans two lines), then leave: the session stays.
  auto input = d.dir.write("turns.txt", "\"\"\"first line\nsecond line\"\"\"\n\nhello again\n/bye\n");
  auto [rc, out] = d.run("/bin/sh", {"-c", fmt::format("'{}' chat --socket '{}' --session piped "
                                                        "--max-tokens 4 < '{}'",
                                                        KVLANE_CLI_PATH, d.socket, input)});
  CAPTURE(out);
  REQUIRE(rc == 0);
  CHECK(out.find(">>>") == std::string::npos); // no prompt when stdin is not a terminal

  // The history: BOS, both turns' bytes and at most 4 generated tokens each.
  auto c = d.connect();
  const std::size_t turns = std::string{"first line\nsecond line"}.size() + std::string{"hello again"}.size();
  const auto kept = ask(*c, byte_tokens(4, 500), "piped", 4).end.prompt_tokens - 4;
  CHECK(kept >= 1 + turns);
  CHECK(kept <= 1 + turns + 8);

  // /clear forgets it.
  auto clear = d.dir.write("clear.txt", "/clear\n/bye\n");
  auto [rc2, out2] = d.run("/bin/sh", {"-c", fmt::format("'{}' chat --socket '{}' --session piped "
                                                          "< '{}'",
                                                          KVLANE_CLI_PATH, d.socket, clear)});
  CAPTURE(out2);
  REQUIRE(rc2 == 0);
  CHECK(out2.find("Cleared session context.") != std::string::npos);
  CHECK(ask(*c, byte_tokens(4, 500), "piped", 4).end.prompt_tokens == 4);
}

TEST_CASE("sessions: the C API carries a session name and drops the session") {
  daemon_fixture d;
  kvlane_client* c = nullptr;
  REQUIRE(kvlane_connect(d.socket.c_str(), "c-api", 5000, &c) == KVLANE_OK);
  const auto prompt = byte_tokens(10, 0);
  auto turn = [&](const char* session) {
    kvlane_request r;
    kvlane_request_init(&r);
    r.prompt_tokens = prompt.data();
    r.n_prompt_tokens = prompt.size();
    r.max_tokens = 4;
    r.stop_at_eos = 0;
    r.session = session;
    kvlane_stream* s = nullptr;
    REQUIRE(kvlane_submit(c, &r, 5000, &s) == KVLANE_OK);
    kvlane_chunk ch{};
    while (kvlane_next(s, 60000, &ch) == KVLANE_OK && !ch.ended) {
    }
    REQUIRE(ch.ended);
    const auto prompt_tokens = ch.prompt_tokens; // (the chunk is valid until the free)
    kvlane_stream_free(s);
    return prompt_tokens;
  };
  CHECK(turn("c-conv") == 10);
  CHECK(turn("c-conv") == 10 + 4 + 10);
  int existed = -1;
  REQUIRE(kvlane_drop_session(c, "c-conv", nullptr, 5000, &existed) == KVLANE_OK);
  CHECK(existed == 1);
  CHECK(turn("c-conv") == 10);
  CHECK(kvlane_drop_session(c, "bad name", nullptr, 5000, &existed) == KVLANE_INVALID_ARGUMENT);
  CHECK(std::string{kvlane_last_error()}.find("session name") != std::string::npos);
  kvlane_close(c);
}
