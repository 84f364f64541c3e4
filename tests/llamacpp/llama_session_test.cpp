// Sessions on a real transformer: the real kvlaned serving the tiny GGUF, driven through the
// real client library. A session's turns equal stateless requests carrying the whole
// history, token for token, and each turn starts from the previous turn's retained KV
// (parked llama.cpp state, or the warm slot).
#include "tests/llamacpp/llama_daemon.hpp"

#include <kvlane/client.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

using namespace std::chrono_literals;
using kvlane::test::spawn;
using json = nlohmann::json;
namespace client = kvlane::client;
using tokens = std::vector<std::uint32_t>;

namespace {

/// Ordinary Llama-3 vocabulary ids, varied by `salt`.
tokens words(std::size_t n, std::size_t salt) {
  tokens t(n);
  for (std::size_t k = 0; k < n; ++k)
    t[k] = static_cast<std::uint32_t>(1000 + (salt * 7919 + k * 104729) % 8000);
  return t;
}

tokens concat(std::initializer_list<const tokens*> parts) {
  tokens out;
  for (auto* p : parts)
    out.insert(out.end(), p->begin(), p->end());
  return out;
}

struct turn {
  tokens generated;
  client::end_info end;
};

turn ask(client::connection& c, const tokens& prompt, const std::string& session) {
  client::request r;
  r.model = "tiny";
  r.prompt_tokens = prompt;
  r.session = session;
  r.sampling.max_tokens = 12;
  r.sampling.stop_at_eos = false;
  auto s = c.submit(r);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().message));
  turn out;
  auto end = (*s)->wait(120s, nullptr, &out.generated);
  REQUIRE_MESSAGE(end, (end ? "" : end.error().message));
  out.end = *end;
  REQUIRE(out.end.reason == client::end_reason::length);
  return out;
}

} // namespace

TEST_CASE("llamacpp sessions: turns equal stateless requests with the whole history and reuse "
          "the previous turn's KV") {
  kvlane::test::llama_daemon d("", "[reuse]\nmin_prefix_tokens = 16");
  const auto& run_dir = d.run_dir;
  client::connect_options o;
  o.socket_path = run_dir + "/kvlane.sock";
  o.client_name = "llama-session-test";
  auto c = client::connect(o);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message));

  auto reused = [&] {
    auto p = spawn(KVLANE_CLI_PATH, {"status", "--json", "--socket", run_dir + "/kvlane-admin.sock"});
    REQUIRE(p.wait_exit(30s) == 0);
    return json::parse(p.output())["models"][0]["reuse"]["reused_tokens"].get<std::uint64_t>();
  };

  const auto p1 = words(40, 1), p2 = words(20, 2), p3 = words(20, 3);
  const auto t1 = ask(**c, p1, "conv");
  const auto before2 = reused();
  const auto t2 = ask(**c, p2, "conv");
  const auto history2 = concat({&p1, &t1.generated, &p2});
  CHECK(t2.end.prompt_tokens == history2.size());
  const auto before3 = reused();
  const auto t3 = ask(**c, p3, "conv");
  const auto history3 = concat({&history2, &t2.generated, &p3});
  CHECK(t3.end.prompt_tokens == history3.size());
  const auto after3 = reused();
  CHECK(before3 - before2 >= 48); // whole 16-token blocks of p1 + g1 (52 tokens)
  CHECK(after3 - before3 >= 80);  // of history2 + g2 (84 tokens)

  CHECK(ask(**c, history2, "").generated == t2.generated);
  CHECK(ask(**c, history3, "").generated == t3.generated);
}
