// Per-key identities on a real kvlaned: each key of [[http.keys]] is admitted against its
// own limit (over it: 429 with Retry-After, in the API's error shape) while other keys are
// served; HTTP requests also count toward [clients] max_live_sequences; one key's retained
// KV never serves another key's prompt unless both have scope = "all"; kvlane ps and the
// metrics name the key; the class cap applies.
#include "tests/integration/http_fixture.hpp"

#include <set>

using namespace kvlane::test::http;

namespace {

std::string identity_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 4
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 1000
[[model]]
name = "slow"
[model.sim]
slots = 2
max_context = 4096
max_prefill_chunk = 128
snapshot_bytes = "4MiB"
time_scale = 1
[reuse]
min_prefix_tokens = 16
[http]
listen = "127.0.0.1:0"
[[http.keys]]
name = "alice"
key = "sk-alice"
max_requests = 1
[[http.keys]]
name = "bob"
key = "sk-bob"
max_requests = 1
max_priority = "batch"
[[http.keys]]
name = "carol"
key = "sk-carol"
scope = "all"
[[http.keys]]
name = "dave"
key = "sk-dave"
scope = "all"
)",
                     run_dir);
}

std::string bearer(std::string_view key) {
  return fmt::format("Authorization: Bearer {}\r\n", key);
}

reply post_as(http_fixture& d, std::string_view key, std::string_view path, const json& body) {
  return d.request("POST", path, body.dump(), bearer(key), false);
}

/// A long streamed completion on the slow model, held open: it stays a live sequence
/// until the socket closes. Returns once the response has begun (the request is admitted).
std::unique_ptr<socket_fd> hold_stream(http_fixture& d, std::string_view key,
                                       json extra = json::object()) {
  json body{{"model", "slow"}, {"prompt", "a long story"}, {"max_tokens", 3000}, {"stream", true}};
  body.update(extra);
  const auto text = body.dump();
  auto s = std::make_unique<socket_fd>(d.port);
  s->send(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n{}Content-Type: "
                      "application/json\r\nContent-Length: {}\r\n\r\n{}",
                      bearer(key), text.size(), text));
  std::string got;
  while (got.find("\r\n\r\n") == std::string::npos)
    REQUIRE(s->read_some(got, 20'000));
  REQUIRE(got.starts_with("HTTP/1.1 200"));
  return s;
}

json completion_ids(std::vector<int> ids) {
  return {{"model", "tiny"}, {"prompt", std::move(ids)}, {"max_tokens", 8}, {"temperature", 0}};
}

std::vector<int> ids(int n, int first) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    out.push_back(65 + (first + i * 7) % 26);
  return out;
}

std::uint64_t cached_of(const reply& r) {
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
}

/// Requests of `identity` that ended by themselves (length or stop), from the metrics text.
double finished(const std::string& metrics, std::string_view identity) {
  double sum = 0;
  for (const std::string_view outcome : {"length", "stop"}) {
    const auto series = fmt::format("\nkvlane_http_requests_total{{identity=\"{}\",outcome=\"{}\"}} ",
                                    identity, outcome);
    const auto at = metrics.find(series);
    REQUIRE(at != std::string::npos);
    sum += std::stod(metrics.substr(at + series.size()));
  }
  return sum;
}

const json* find_client(const json& ps, std::string_view client) {
  for (const auto& s : ps["sequences"])
    if (s["client"] == client)
      return &s;
  return nullptr;
}

} // namespace

TEST_CASE("http identity: a key over its max_requests gets 429 with Retry-After while another key "
          "is served") {
  http_fixture d{identity_config};
  auto held = hold_stream(d, "sk-alice", {{"session", "s1"}});

  // ps names the key (and the session the request gave).
  const auto ps = d.ps();
  CAPTURE(ps.dump());
  const auto* alice = find_client(ps, "http:alice/s1");
  REQUIRE(alice != nullptr);
  CHECK((*alice)["priority"] == "interactive");

  const json small{{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 2}};
  const auto over = post_as(d, "sk-alice", "/v1/completions", small);
  CHECK(over.status == 429);
  CHECK(over.head.find("Retry-After: 1\r\n") != std::string::npos); // busy_retry_ms 200, rounded up
  const auto e = json::parse(over.body)["error"];
  CHECK(e["code"] == "rate_limit_exceeded");
  CHECK(e["type"] == "requests");
  CHECK(e["message"] == "HTTP identity 'alice' already has 1 live request(s) "
                        "(http.keys[0].max_requests); retry after 200 ms");

  // The Ollama API answers in its own shape.
  const json gen{{"model", "tiny"}, {"prompt", "hi"}, {"stream", false}};
  const auto over_ollama = post_as(d, "sk-alice", "/api/generate", gen);
  CHECK(over_ollama.status == 429);
  CHECK(over_ollama.head.find("Retry-After: 1\r\n") != std::string::npos);
  CHECK(json::parse(over_ollama.body)["error"].get<std::string>().starts_with(
    "HTTP identity 'alice' already has 1 live request(s)"));

  // Bob is admitted against his own limit, twice in a row: a finished request is released
  // by the time its answer arrives.
  CHECK(post_as(d, "sk-bob", "/v1/completions", small).status == 200);
  CHECK(post_as(d, "sk-bob", "/v1/completions", small).status == 200);
  CHECK(find_client(d.ps(), "http:alice/s1") != nullptr); // alice's stream still runs
}

TEST_CASE("http identity: a key with max_priority batch runs its requests in the batch class") {
  http_fixture d{identity_config};
  auto held = hold_stream(d, "sk-bob", {{"priority", "interactive"}});
  const auto ps = d.ps();
  CAPTURE(ps.dump());
  const auto* bob = find_client(ps, "http:bob");
  REQUIRE(bob != nullptr);
  CHECK((*bob)["priority"] == "batch");
  auto other = hold_stream(d, "sk-carol", {{"priority", "interactive"}});
  const auto ps2 = d.ps();
  const auto* carol = find_client(ps2, "http:carol");
  REQUIRE(carol != nullptr);
  CHECK((*carol)["priority"] == "interactive");
}

TEST_CASE("http identity: one key's retained KV does not serve another key's prompt, its own next "
          "request reuses it") {
  http_fixture d{identity_config};
  const auto prompt = ids(100, 0);
  CHECK(cached_of(post_as(d, "sk-alice", "/v1/completions", completion_ids(prompt))) == 0);
  CHECK(cached_of(post_as(d, "sk-bob", "/v1/completions", completion_ids(prompt))) == 0);
  CHECK(cached_of(post_as(d, "sk-alice", "/v1/completions", completion_ids(prompt))) == 99);
  CHECK(cached_of(post_as(d, "sk-bob", "/v1/completions", completion_ids(prompt))) == 99);

  // kvlane cache ls names each entry's identity.
  const auto cache = json::parse(d.cli({"cache", "ls", "--json"}));
  CAPTURE(cache.dump());
  std::set<std::string> owners;
  for (const auto& e : cache["entries"])
    owners.insert(e["owner"].get<std::string>());
  CHECK(owners == std::set<std::string>{"http:alice", "http:bob"});

  // The metrics count each identity's finished requests under its name.
  const auto metrics = d.cli({"metrics"});
  CAPTURE(metrics);
  for (const auto* name : {"alice", "bob"})
    CHECK(finished(metrics, name) == 2);
  CHECK(finished(metrics, "carol") == 0);
}

TEST_CASE("http identity: keys with scope all reuse each other's KV, never a scope-user key's") {
  http_fixture d{identity_config};
  const auto prompt = ids(100, 3);
  CHECK(cached_of(post_as(d, "sk-carol", "/v1/completions", completion_ids(prompt))) == 0);
  CHECK(cached_of(post_as(d, "sk-dave", "/v1/completions", completion_ids(prompt))) == 99);
  CHECK(cached_of(post_as(d, "sk-alice", "/v1/completions", completion_ids(prompt))) == 0);
}

namespace {

std::string one_live_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "slow"
[model.sim]
slots = 2
max_context = 4096
max_prefill_chunk = 128
snapshot_bytes = "4MiB"
time_scale = 1
[clients]
max_live_sequences = 1
busy_retry_ms = 2500
[http]
listen = "127.0.0.1:0"
api_key = "{}"
)",
                     run_dir, api_key);
}

} // namespace

TEST_CASE("http identity: HTTP requests count toward [clients] max_live_sequences") {
  http_fixture d{one_live_config};
  auto held = hold_stream(d, api_key);
  CHECK(find_client(d.ps(), "http:default") != nullptr); // api_key is the identity "default"
  const json small{{"model", "slow"}, {"prompt", "hi"}, {"max_tokens", 2}};
  const auto r = d.request("POST", "/v1/completions", small.dump());
  CHECK(r.status == 429);
  CHECK(r.head.find("Retry-After: 3\r\n") != std::string::npos); // 2500 ms, rounded up
  CHECK(json::parse(r.body)["error"]["message"]
        == "kvlaned already runs 1 live sequence(s) ([clients] max_live_sequences); retry after "
           "2500 ms");
}
