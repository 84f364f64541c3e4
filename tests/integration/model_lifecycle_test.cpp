// Model lifecycle through the real daemon (docs/architecture.md "Model lifecycle"): models
// load on first use and unload after their keep_alive (per request, as Ollama clients send
// it), at most [models] max_loaded at once with the least recently used idle model going
// first, never one with a running request; `kvlane load|unload`; an unload parks the
// model's warm KV in the store and the reloaded model continues its conversations from it.
// State changes are observed by polling `kvlane ps --json` under a deadline, never by sleeping.

#include "tests/integration/http_fixture.hpp"

#include <kvlane/client.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

using namespace kvlane::test::http;

namespace {

template <int MaxLoaded>
std::string lifecycle_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "a"
load_at_start = false
[model.sim]
slots = 2
max_context = 1024
snapshot_bytes = "1MiB"
time_scale = 100
[[model]]
name = "b"
load_at_start = false
[model.sim]
slots = 2
max_context = 1024
snapshot_bytes = "1MiB"
time_scale = 100
[[model]]
name = "slow"
load_at_start = false
[model.sim]
slots = 2
max_context = 1024
snapshot_bytes = "1MiB"
time_scale = 1
[[model]]
name = "broken"
backend = "llamacpp"
load_at_start = false
[model.llamacpp]
gguf = "/nonexistent/kvlane-test/broken.gguf"
[models]
max_loaded = {}
[http]
listen = "127.0.0.1:0"
api_key = "{}"
)",
                     run_dir, MaxLoaded, api_key);
}

/// Every configured model's lifecycle, by name, from `kvlane ps --json`.
std::map<std::string, json> models_of(http_fixture& d) {
  std::map<std::string, json> out;
  const auto ps = d.ps();
  for (auto& m : ps["models"])
    out[m["name"].get<std::string>()] = m;
  return out;
}

std::string state_of(http_fixture& d, const std::string& model) {
  return models_of(d).at(model)["state"].get<std::string>();
}

/// Polls until `pred` holds (true) or 20 s pass (false).
template <class F>
bool eventually(F pred) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(20ms); // a poll interval, not a synchronisation
  }
  return false;
}

json generate(http_fixture& d, const std::string& model, json extra = json::object()) {
  json body{{"model", model}, {"prompt", "Why is the sky blue?"}, {"stream", false},
            {"options", {{"num_predict", 4}, {"temperature", 0}}}};
  body.update(extra);
  return d.post_json("/api/generate", body);
}

std::set<std::string> names_in(const json& list, const char* key) {
  std::set<std::string> out;
  for (auto& m : list)
    out.insert(m[key].get<std::string>());
  return out;
}

} // namespace

TEST_CASE("model lifecycle: a model loads on its first request; every configured model is listed") {
  http_fixture d{lifecycle_config<0>};
  for (auto& [name, m] : models_of(d))
    CHECK_MESSAGE(m["state"] == "unloaded", name);
  const std::set<std::string> all{"a", "b", "slow", "broken"};
  CHECK(names_in(json::parse(d.request("GET", "/api/tags").body)["models"], "name") == all);
  CHECK(names_in(json::parse(d.request("GET", "/v1/models").body)["data"], "id") == all);
  CHECK(json::parse(d.request("GET", "/api/ps").body)["models"].empty());

  const auto r = generate(d, "a");
  CHECK(r["done"] == true);
  CHECK(r["eval_count"] == 4);
  CHECK(r["load_duration"].get<std::int64_t>() > 0); // it waited for the load
  CHECK(r["total_duration"].get<std::int64_t>() > r["load_duration"].get<std::int64_t>());
  CHECK(generate(d, "a")["load_duration"] == 0); // loaded by now
  CHECK(state_of(d, "a") == "loaded");
  CHECK(state_of(d, "b") == "unloaded");
  const auto ps = json::parse(d.request("GET", "/api/ps").body)["models"];
  REQUIRE(ps.size() == 1);
  CHECK(ps[0]["name"] == "a");
  CHECK(ps[0]["size"].get<std::uint64_t>() == 2u * 1024 * 1024); // its two 1 MiB slots
  // The default keep_alive (5m) runs from the end of the request: an expiry, not a pin.
  const auto expires = ps[0]["expires_at"].get<std::string>();
  CHECK(expires.rfind("2318", 0) != 0);
  CHECK(expires > r["created_at"].get<std::string>());
  CHECK(models_of(d).at("a")["keep_alive"] == "5m");
}

TEST_CASE("model lifecycle: an empty request loads and returns; with keep_alive 0 it unloads") {
  http_fixture d{lifecycle_config<0>};
  auto r = d.post_json("/api/generate", {{"model", "a"}});
  CHECK(r["done_reason"] == "load");
  CHECK(r["response"] == "");
  CHECK(state_of(d, "a") == "loaded");
  r = d.post_json("/api/chat", {{"model", "b"}, {"messages", json::array()}});
  CHECK(r["done_reason"] == "load");
  CHECK(state_of(d, "b") == "loaded");

  r = d.post_json("/api/generate", {{"model", "a"}, {"keep_alive", 0}});
  CHECK(r["done_reason"] == "unload");
  CHECK(eventually([&] { return state_of(d, "a") == "unloaded"; }));
  CHECK(state_of(d, "b") == "loaded");
  // A model that is not loaded is not loaded just to be unloaded.
  r = d.post_json("/api/generate", {{"model", "a"}, {"keep_alive", "0s"}});
  CHECK(r["done_reason"] == "unload");
  CHECK(state_of(d, "a") == "unloaded");
}

TEST_CASE("model lifecycle: keep_alive 0 on a request unloads the model once it ends") {
  http_fixture d{lifecycle_config<0>};
  const auto r = generate(d, "a", {{"keep_alive", 0}});
  CHECK(r["eval_count"] == 4); // served in full first
  CHECK(eventually([&] { return state_of(d, "a") == "unloaded"; }));
}

TEST_CASE("model lifecycle: an idle model unloads when its keep_alive runs out, a pinned one stays") {
  http_fixture d{lifecycle_config<0>};
  generate(d, "a", {{"keep_alive", "1s"}});
  generate(d, "b", {{"keep_alive", -1}});
  CHECK(models_of(d).at("b")["keep_alive"] == "pinned");
  CHECK(models_of(d).at("b")["expires_at"].is_null());
  CHECK(eventually([&] { return state_of(d, "a") == "unloaded"; }));
  CHECK(state_of(d, "b") == "loaded"); // the same wait, and b is still there
  const auto ps = json::parse(d.request("GET", "/api/ps").body)["models"];
  REQUIRE(ps.size() == 1);
  CHECK(ps[0]["expires_at"].get<std::string>().rfind("2318", 0) == 0);
}

TEST_CASE("model lifecycle: at max_loaded the least recently used idle model unloads first") {
  http_fixture d{lifecycle_config<2>};
  generate(d, "a");
  generate(d, "b");
  generate(d, "a"); // a is now the more recently used
  generate(d, "slow");
  auto m = models_of(d);
  CHECK(m.at("b")["state"] == "unloaded");
  CHECK(m.at("a")["state"] == "loaded");
  CHECK(m.at("slow")["state"] == "loaded");
  generate(d, "b"); // a was used before slow: a goes
  m = models_of(d);
  CHECK(m.at("a")["state"] == "unloaded");
  CHECK(m.at("slow")["state"] == "loaded");
  CHECK(m.at("b")["state"] == "loaded");
}

TEST_CASE("model lifecycle: a model running a request is never unloaded; the other request waits") {
  http_fixture d{lifecycle_config<1>};
  json long_answer;
  std::thread running([&] {
    // ~100 steps of the slow sim (31 ms + 1.7 ms per token each): seconds of work.
    long_answer = generate(d, "slow", {{"options", {{"num_predict", 100}, {"temperature", 0}}}});
  });
  REQUIRE(eventually([&] {
    const auto ps = d.ps();
    for (auto& q : ps["sequences"])
      if (q["model"] == "slow" && q["tokens_out"].get<int>() > 0)
        return true;
    return false;
  }));
  std::atomic<bool> answered{false};
  json other;
  std::thread waiting([&] {
    other = generate(d, "a");
    answered = true;
  });
  // The request for a waits for room: slow is busy, so it stays loaded.
  CHECK(eventually([&] { return models_of(d).at("a")["waiting"] == 1; }));
  auto m = models_of(d);
  CHECK(m.at("slow")["state"] == "loaded");
  CHECK(m.at("slow")["in_use"].get<int>() >= 1);
  CHECK(m.at("a")["state"] == "unloaded");
  CHECK_FALSE(answered.load());
  running.join();
  waiting.join();
  CHECK(long_answer["done_reason"] == "length"); // ran to its end, not cut by an unload
  CHECK(long_answer["eval_count"] == 100);
  CHECK(other["eval_count"] == 4);
  m = models_of(d);
  CHECK(m.at("slow")["state"] == "unloaded");
  CHECK(m.at("a")["state"] == "loaded");
}

TEST_CASE("model lifecycle: after kvlane unload and load the next turn reuses the KV of the "
          "previous turn's prompt and answer") {
  http_fixture d{lifecycle_config<0>};
  const std::string question = "Tell me about the lighthouse keeper and the storms of the north.";
  const auto chat = [&](const std::string& model,
                        std::vector<std::pair<std::string, std::string>> turns) {
    json messages = json::array();
    for (auto& [role, content] : turns)
      messages.push_back({{"role", role}, {"content", content}});
    return d.post_json("/v1/chat/completions", {{"model", model},
                                                {"messages", messages},
                                                {"max_tokens", 16},
                                                {"temperature", 0}});
  };
  const auto cached_of = [](const json& r) {
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
  };
  // Two turns of one conversation; `between` runs after the first.
  const auto two_turns = [&](const std::string& model, auto between) {
    const auto r1 = chat(model, {{"user", question}});
    const auto answer = r1["choices"][0]["message"]["content"].get<std::string>();
    // The sim's tokenizer is byte-level: an ASCII answer's bytes are its tokens.
    REQUIRE(std::all_of(answer.begin(), answer.end(), [](char c) { return c > 0x1f && c < 0x7f; }));
    CHECK(r1["usage"]["completion_tokens"] == answer.size());
    const auto ls = json::parse(d.cli({"cache", "ls", "--model", model, "--json"}));
    REQUIRE(ls["entries"].size() == 1);
    const auto retained = ls["entries"][0]["tokens"].get<std::uint64_t>();
    // The turn ended at its token limit: every token has its KV but the last one
    // generated, which was never fed back.
    CHECK(retained == r1["usage"]["prompt_tokens"].get<std::uint64_t>() + answer.size() - 1);
    between();
    const auto r2 = chat(model, {{"user", question}, {"assistant", answer}, {"user", "And then?"}});
    CHECK(cached_of(r2) == retained);
    return cached_of(r2);
  };

  // Model b keeps its conversation warm in a slot: the reference.
  const auto warm = two_turns("b", [] {});
  // Model a is unloaded between the turns, and loaded again.
  const auto reloaded = two_turns("a", [&] {
    const auto unloaded = d.cli({"unload", "a"});
    CHECK_MESSAGE(unloaded.find("model 'a' unloaded") != std::string::npos, unloaded);
    CHECK(state_of(d, "a") == "unloaded");
    const auto loaded = d.cli({"load", "a"});
    CHECK_MESSAGE(loaded.find("model 'a' loaded") != std::string::npos, loaded);
    CHECK(state_of(d, "a") == "loaded");
  });
  CHECK(reloaded == warm);
  CHECK(reloaded > 80);
  const auto st = d.status(); // a range-for over a member of a temporary would outlive it
  for (const auto& m : st["models"])
    if (m["name"] == "a") {
      CHECK(m["reuse"]["hits_load"] == 1); // from the store: the model's slots were new
      CHECK(m["reuse"]["hits_warm"] == 0);
    }
}

TEST_CASE("model lifecycle: a bad keep_alive is a 400 that names the field") {
  http_fixture d{lifecycle_config<0>};
  for (const auto& bad : {json("5 minutes"), json("300"), json(true), json("1y")}) {
    const auto r = d.request("POST", "/api/generate",
                             json{{"model", "a"}, {"prompt", "x"}, {"keep_alive", bad}}.dump());
    CAPTURE(r.body);
    CHECK(r.status == 400);
    CHECK(r.body.find("keep_alive") != std::string::npos);
  }
  // The embedding endpoints read it the same way.
  const auto r = d.request("POST", "/api/embed",
                           json{{"model", "a"}, {"input", "x"}, {"keep_alive", "5 minutes"}}.dump());
  CAPTURE(r.body);
  CHECK(r.status == 400);
  CHECK(r.body.find("keep_alive") != std::string::npos);
  CHECK(state_of(d, "a") == "unloaded"); // nothing was loaded for them
}

TEST_CASE("model lifecycle: a model that fails to load fails every waiting request with the cause") {
  http_fixture d{lifecycle_config<0>};
  std::vector<reply> replies(3);
  std::vector<std::thread> clients;
  for (auto& r : replies)
    clients.emplace_back([&d, &r] {
      r = d.request("POST", "/api/generate",
                    json{{"model", "broken"}, {"prompt", "x"}, {"stream", false}}.dump());
    });
  for (auto& c : clients)
    c.join();
  for (const auto& r : replies) {
    CAPTURE(r.body);
    CHECK(r.status == 503);
    CHECK(r.body.find("broken") != std::string::npos);
    CHECK(r.body.find("/nonexistent/kvlane-test/broken.gguf") != std::string::npos);
  }
  const auto m = models_of(d).at("broken");
  CHECK(m["state"] == "unloaded");
  CHECK(m["error"].get<std::string>().find("broken.gguf") != std::string::npos);
  // The daemon serves on.
  CHECK(generate(d, "a")["eval_count"] == 4);
}

TEST_CASE("model lifecycle: through the client library a request loads its model, and a model "
          "that fails to load ends the stream with the cause") {
  http_fixture d{lifecycle_config<0>};
  kvlane::client::connect_options o;
  o.socket_path = d.run_dir + "/kvlane.sock";
  o.client_name = "lifecycle";
  auto c = kvlane::client::connect(o);
  REQUIRE_MESSAGE(c, (c ? std::string{} : c.error().message));
  kvlane::client::request r;
  r.model = "a";
  r.prompt = "tell me a story";
  r.sampling.max_tokens = 6;
  auto s = (*c)->submit(r);
  REQUIRE(s);
  std::string text;
  auto end = (*s)->wait(20s, &text);
  REQUIRE(end);
  CHECK(end->reason == kvlane::client::end_reason::length);
  CHECK(end->generated_tokens == 6);
  CHECK(state_of(d, "a") == "loaded");

  r.model = "broken";
  s = (*c)->submit(r);
  REQUIRE(s);
  end = (*s)->wait(20s);
  REQUIRE(end);
  CHECK(end->reason == kvlane::client::end_reason::error);
  CHECK_MESSAGE(end->message.find("broken.gguf") != std::string::npos, end->message);
}

TEST_CASE("model lifecycle: a client-library session turn for a model that is not loaded waits for "
          "the load, and a failed load ends the turn with the cause") {
  http_fixture d{lifecycle_config<0>};
  kvlane::client::connect_options o;
  o.socket_path = d.run_dir + "/kvlane.sock";
  o.client_name = "lifecycle-session";
  auto c = kvlane::client::connect(o);
  REQUIRE_MESSAGE(c, (c ? std::string{} : c.error().message));
  REQUIRE(state_of(d, "a") == "unloaded");
  kvlane::client::request r;
  r.model = "a";
  r.session = "chat";
  r.prompt = "tell me a story";
  r.sampling.max_tokens = 6;
  auto s = (*c)->submit(r);
  REQUIRE(s);
  auto end = (*s)->wait(20s);
  REQUIRE_MESSAGE(end, (end ? std::string{} : end.error().message));
  CHECK(end->reason == kvlane::client::end_reason::length);
  CHECK(end->generated_tokens == 6);
  CHECK(state_of(d, "a") == "loaded");
  // The turn joined the session: the next one is submitted with it as history.
  r.prompt = "and then?";
  s = (*c)->submit(r);
  REQUIRE(s);
  end = (*s)->wait(20s);
  REQUIRE_MESSAGE(end, (end ? std::string{} : end.error().message));
  CHECK(end->prompt_tokens > 6 + 3);

  r.model = "broken";
  s = (*c)->submit(r);
  REQUIRE(s);
  end = (*s)->wait(20s);
  REQUIRE_MESSAGE(end, (end ? std::string{} : end.error().message));
  CHECK(end->reason == kvlane::client::end_reason::error);
  CHECK_MESSAGE(end->message.find("broken.gguf") != std::string::npos, end->message);
}
