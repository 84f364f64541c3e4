// The HTTP API of a real kvlaned: OpenAI and Ollama endpoints, SSE and NDJSON
// framing, stop strings, errors, API keys and cancel on disconnect. The
// daemon listens on a free port (listen = "127.0.0.1:0") and logs its URL.
#include "tests/integration/http_fixture.hpp"

#include <algorithm>

using namespace kvlane::test::http;

TEST_CASE("http api: health, models, and the Ollama listing endpoints answer") {
  http_fixture d;
  auto health = d.request("GET", "/health", {}, {}, false);
  CHECK(health.status == 200);
  CHECK(json::parse(health.body)["status"] == "ok");
  auto root = d.request("GET", "/", {}, {}, false);
  CHECK(root.status == 200);
  CHECK(root.body == "kvlane is running");

  auto models = d.request("GET", "/v1/models");
  REQUIRE(models.status == 200);
  auto list = json::parse(models.body);
  CHECK(list["object"] == "list");
  REQUIRE(list["data"].size() == 2);
  CHECK(list["data"][0]["id"] == "tiny");
  CHECK(list["data"][1]["id"] == "slow");

  CHECK(json::parse(d.request("GET", "/api/version").body)["version"] == KVLANE_VERSION);
  auto tags = json::parse(d.request("GET", "/api/tags").body);
  CHECK(tags["models"][0]["name"] == "tiny");
  auto ps = json::parse(d.request("GET", "/api/ps").body);
  CHECK(ps["models"].size() == 2);
}

TEST_CASE("http api: the API key is required, compared exactly, and /health stays open") {
  http_fixture d;
  auto none = d.request("GET", "/v1/models", {}, {}, false);
  CHECK(none.status == 401);
  auto e = json::parse(none.body)["error"];
  CHECK(e["code"] == "invalid_api_key");
  CHECK(e.contains("message"));
  CHECK(e.contains("type"));
  CHECK(e.contains("param"));
  auto wrong = d.request("GET", "/v1/models", {}, "Authorization: Bearer test-key-7f3b\r\n", false);
  CHECK(wrong.status == 401);
  auto ollama = d.request("GET", "/api/tags", {}, {}, false);
  CHECK(ollama.status == 401);
  CHECK(json::parse(ollama.body)["error"].is_string()); // Ollama's shape on /api/*
}

TEST_CASE("http api: a chat completion, streamed or not, gives the same text and usage") {
  http_fixture d;
  auto whole = d.post_json("/v1/chat/completions", chat_body("hello", 12));
  CHECK(whole["object"] == "chat.completion");
  CHECK(whole["model"] == "tiny");
  CHECK(whole["id"].get<std::string>().starts_with("chatcmpl-"));
  const auto& choice = whole["choices"][0];
  CHECK(choice["finish_reason"] == "length");
  CHECK(choice["message"]["role"] == "assistant");
  const auto text = choice["message"]["content"].get<std::string>();
  CHECK(whole["usage"]["completion_tokens"] == 12);
  CHECK(whole["usage"]["prompt_tokens"].get<int>() > 0);
  CHECK(whole["usage"]["total_tokens"] == whole["usage"]["prompt_tokens"].get<int>() + 12);
  CHECK(whole["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  CHECK(whole["kvlane"]["ttft_ms"].get<double>() > 0);

  auto body = chat_body("hello", 12);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = d.request("POST", "/v1/chat/completions", body.dump());
  REQUIRE(r.status == 200);
  CHECK(r.head.find("Content-Type: text/event-stream") != std::string::npos);
  auto events = sse_payloads(r.body);
  REQUIRE(events.size() >= 4);
  CHECK(events.back() == "[DONE]");
  std::string streamed;
  std::string finish;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    auto c = json::parse(events[i]);
    CHECK(c["object"] == "chat.completion.chunk");
    CHECK(c["id"] == json::parse(events[0])["id"]);
    const auto& delta = c["choices"][0]["delta"];
    if (delta.contains("content"))
      streamed += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null())
      finish = c["choices"][0]["finish_reason"];
  }
  CHECK(json::parse(events[0])["choices"][0]["delta"]["role"] == "assistant");
  CHECK(streamed == text);
  CHECK(finish == "length");
  auto usage = json::parse(events[events.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"] == 12);
}

TEST_CASE("http api: a stop string ends the text just before it, streamed or not") {
  http_fixture d;
  auto body = chat_body("stop strings", 40);
  const auto full = d.post_json("/v1/chat/completions", body)["choices"][0]["message"]["content"]
                      .get<std::string>();
  // The first printable ASCII character that does not occur earlier serves as the stop.
  std::size_t at = std::string::npos;
  for (std::size_t i = 1; i < full.size() && at == std::string::npos; ++i) {
    const auto c = static_cast<unsigned char>(full[i]);
    if (c > 0x20 && c < 0x7f && c != '\\' && full.find(full[i]) == i)
      at = i;
  }
  REQUIRE_MESSAGE(at != std::string::npos, "no usable stop character in: " << full);
  body["stop"] = std::string(1, full[at]);

  auto stopped = d.post_json("/v1/chat/completions", body);
  CHECK(stopped["choices"][0]["finish_reason"] == "stop");
  CHECK(stopped["choices"][0]["message"]["content"] == full.substr(0, at));

  body["stream"] = true;
  auto r = d.request("POST", "/v1/chat/completions", body.dump());
  REQUIRE(r.status == 200);
  auto events = sse_payloads(r.body);
  REQUIRE(events.back() == "[DONE]");
  std::string streamed, finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto c = json::parse(events[i]);
    if (c["choices"][0]["delta"].contains("content"))
      streamed += c["choices"][0]["delta"]["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null())
      finish = c["choices"][0]["finish_reason"];
  }
  CHECK(streamed == full.substr(0, at));
  CHECK(finish == "stop");
}

TEST_CASE("http api: text completions take a prompt and default to 16 tokens") {
  http_fixture d;
  auto r = d.post_json("/v1/completions", {{"model", "tiny"}, {"prompt", "Once upon"}});
  CHECK(r["object"] == "text_completion");
  CHECK(r["choices"][0]["finish_reason"] == "length");
  CHECK(r["usage"]["completion_tokens"] == 16);
  CHECK(r["usage"]["prompt_tokens"] == 10); // BOS + 9 bytes with the byte tokenizer
  CHECK(r["choices"][0].contains("text"));
}

/// The bytes a logprobs entry lists, as a string.
std::string bytes_text(const json& entry) {
  std::string out;
  for (const auto& b : entry["bytes"])
    out.push_back(static_cast<char>(b.get<int>()));
  return out;
}

TEST_CASE("http api: chat logprobs list each token with its top alternatives, streamed or not") {
  http_fixture d;
  auto body = chat_body("logprobs please", 10);
  body["temperature"] = 0.9;
  body["seed"] = 5;
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  const auto whole = d.post_json("/v1/chat/completions", body);
  const auto& choice = whole["choices"][0];
  REQUIRE(choice["logprobs"].is_object());
  const auto content = choice["logprobs"]["content"];
  REQUIRE(content.size() == 10); // one entry per generated token
  CHECK(whole["usage"]["completion_tokens"] == 10);
  std::string joined;
  for (const auto& e : content) {
    CAPTURE(e.dump());
    joined += bytes_text(e);
    CHECK(e["logprob"].get<double>() <= 0.0);
    const auto& top = e["top_logprobs"];
    REQUIRE(top.size() == 3);
    for (std::size_t i = 0; i < top.size(); ++i) {
      CHECK(top[i]["logprob"].get<double>() <= 0.0);
      if (i > 0)
        CHECK(top[i - 1]["logprob"].get<double>() >= top[i]["logprob"].get<double>());
      if (top[i]["token"] == e["token"])
        CHECK(top[i]["logprob"] == e["logprob"]);
    }
  }
  CHECK(joined == choice["message"]["content"].get<std::string>());

  body["stream"] = true;
  auto r = d.request("POST", "/v1/chat/completions", body.dump());
  REQUIRE(r.status == 200);
  const auto events = sse_payloads(r.body);
  REQUIRE(events.back() == "[DONE]");
  json streamed = json::array();
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const auto c = json::parse(events[i]);
    const auto& lp = c["choices"][0]["logprobs"];
    if (c["choices"][0]["delta"].contains("content")
        && !c["choices"][0]["delta"]["content"].get<std::string>().empty())
      CHECK_FALSE(lp.is_null()); // a text chunk carries its tokens' logprobs
    if (!lp.is_null())
      for (const auto& e : lp["content"])
        streamed.push_back(e);
  }
  CHECK(streamed == content); // the same tokens and the same values both ways
}

TEST_CASE("http api: completions logprobs give tokens, token_logprobs, top_logprobs and offsets") {
  http_fixture d;
  const auto r = d.post_json("/v1/completions", {{"model", "tiny"},
                                                 {"prompt", "Once upon"},
                                                 {"max_tokens", 8},
                                                 {"temperature", 0},
                                                 {"logprobs", 2}});
  const auto& choice = r["choices"][0];
  const auto& lp = choice["logprobs"];
  REQUIRE(lp["tokens"].size() == 8);
  REQUIRE(lp["token_logprobs"].size() == 8);
  REQUIRE(lp["top_logprobs"].size() == 8);
  REQUIRE(lp["text_offset"].size() == 8);
  std::string joined;
  for (std::size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    const auto token = lp["tokens"][i].get<std::string>();
    const auto logprob = lp["token_logprobs"][i].get<double>();
    const auto& top = lp["top_logprobs"][i];
    CHECK(lp["text_offset"][i] == joined.size()); // ASCII: code points are bytes
    joined += token;
    CHECK(logprob <= 0.0);
    CHECK(top.size() >= 1);
    CHECK(top.size() <= 3); // two alternatives plus the sampled token
    REQUIRE(top.contains(token));
    CHECK(top[token].get<double>() == logprob);
    double best = -1e9;
    for (const auto& [t, v] : top.items())
      best = std::max(best, v.get<double>());
    CHECK(logprob == best); // greedy: the sampled token is the most likely
  }
  CHECK(joined == choice["text"].get<std::string>());
}

TEST_CASE("http api: logprobs out of range are a 400 naming the field") {
  http_fixture d;
  auto body = chat_body("x", 2);
  body["logprobs"] = true;
  body["top_logprobs"] = 21;
  auto e = d.post_json("/v1/chat/completions", body, 400)["error"];
  CHECK(e["param"] == "top_logprobs");
  CHECK(e["message"].get<std::string>().find("top_logprobs") != std::string::npos);
  e = d.post_json("/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"logprobs", 6}}, 400)["error"];
  CHECK(e["param"] == "logprobs");
}

TEST_CASE("http api: errors come in OpenAI's shape with the right status") {
  http_fixture d;
  auto bad_json = d.request("POST", "/v1/chat/completions", "{\"model\": ");
  CHECK(bad_json.status == 400);
  CHECK(json::parse(bad_json.body)["error"]["code"] == "invalid_json");

  auto unknown = d.post_json("/v1/chat/completions",
                             {{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}},
                             404);
  CHECK(unknown["error"]["code"] == "model_not_found");
  CHECK(unknown["error"]["type"] == "invalid_request_error");

  auto n2 = chat_body("x", 4);
  n2["n"] = 2;
  CHECK(d.post_json("/v1/chat/completions", n2, 400)["error"]["param"] == "n");
  auto tools = chat_body("x", 4);
  tools["tools"] = json::array();
  CHECK(d.post_json("/v1/chat/completions", tools, 400)["error"]["param"] == "tools");

  auto too_long = d.post_json("/v1/chat/completions", chat_body(std::string(600, 'a'), 4), 400);
  CHECK(too_long["error"]["code"] == "context_length_exceeded");
  CHECK(too_long["error"]["message"].get<std::string>().find("512") != std::string::npos);
  auto over = d.post_json("/v1/chat/completions", chat_body("x", 1000), 400);
  CHECK(over["error"]["param"] == "max_tokens");

  auto missing = d.request("GET", "/v1/nothing");
  CHECK(missing.status == 404);
  auto method = d.request("GET", "/v1/chat/completions");
  CHECK(method.status == 405);
}

TEST_CASE("http api: Ollama generate streams NDJSON and chat answers in one object") {
  http_fixture d;
  auto r = d.request("POST", "/api/generate",
                     json{{"model", "tiny"}, {"prompt", "hi"}, {"options", {{"num_predict", 6}}}}.dump());
  REQUIRE(r.status == 200);
  CHECK(r.head.find("Content-Type: application/x-ndjson") != std::string::npos);
  std::vector<json> lines;
  std::string_view rest = r.body;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    REQUIRE(nl != std::string_view::npos);
    lines.push_back(json::parse(rest.substr(0, nl)));
    rest.remove_prefix(nl + 1);
  }
  REQUIRE(lines.size() >= 2);
  for (std::size_t i = 0; i + 1 < lines.size(); ++i)
    CHECK(lines[i]["done"] == false);
  const auto& last = lines.back();
  CHECK(last["done"] == true);
  CHECK(last["done_reason"] == "length");
  CHECK(last["eval_count"] == 6);
  CHECK(last["prompt_eval_count"].get<int>() > 0);
  CHECK(last["total_duration"].get<std::int64_t>() >= last["eval_duration"].get<std::int64_t>());

  auto chat = d.post_json("/api/chat", {{"model", "tiny:latest"},
                                        {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                        {"stream", false},
                                        {"options", {{"num_predict", 3}, {"temperature", 0}}}});
  CHECK(chat["done"] == true);
  CHECK(chat["message"]["role"] == "assistant");
  CHECK(chat["eval_count"] == 3);

  auto missing = d.request("POST", "/api/chat",
                           json{{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}
                             .dump());
  CHECK(missing.status == 404);
  CHECK(json::parse(missing.body)["error"].is_string());
}

TEST_CASE("http api: tokenize and detokenize round-trip") {
  http_fixture d;
  auto t = d.post_json("/tokenize", {{"content", "ab"}});
  CHECK(t["tokens"] == json::array({97, 98}));
  auto back = d.post_json("/detokenize", {{"tokens", t["tokens"]}});
  CHECK(back["content"] == "ab");
}

TEST_CASE("http api: CORS headers only for listed origins") {
  http_fixture d;
  auto listed = d.request("GET", "/v1/models", {}, "Origin: http://localhost:3000\r\n");
  CHECK(listed.status == 200);
  CHECK(listed.head.find("Access-Control-Allow-Origin: http://localhost:3000") != std::string::npos);
  auto other = d.request("GET", "/v1/models", {}, "Origin: http://evil.example\r\n");
  CHECK(other.status == 403);
  CHECK(other.head.find("Access-Control-Allow-Origin") == std::string::npos);
  auto preflight = d.request("OPTIONS", "/v1/chat/completions", {},
                             "Origin: http://localhost:3000\r\n"
                             "Access-Control-Request-Headers: authorization, content-type\r\n",
                             false);
  CHECK(preflight.status == 204);
  CHECK(preflight.head.find("Access-Control-Allow-Headers: authorization, content-type")
        != std::string::npos);
  auto refused = d.request("OPTIONS", "/v1/chat/completions", {}, "Origin: http://evil.example\r\n",
                           false);
  CHECK(refused.status == 403);
}

TEST_CASE("http api: oversized headers get 431") {
  http_fixture d;
  auto big = d.request("GET", "/v1/models", {}, "X-Filler: " + std::string(20000, 'x') + "\r\n");
  CHECK(big.status == 431);
  // A request whose headers stall: http_limits_test.cpp.
}

TEST_CASE("http api: a client that disconnects mid-prefill has its sequence cancelled") {
  http_fixture d;
  // About 4,000 prompt tokens at the real time scale: a prefill of many seconds.
  auto body = json{{"model", "slow"},
                   {"messages", {{{"role", "user"}, {"content", std::string(3950, 'p')}}}},
                   {"max_tokens", 8},
                   {"stream", true}};
  {
    socket_fd s{d.port};
    s.send(fmt::format("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n"
                       "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       api_key, body.dump().size(), body.dump()));
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos)
      REQUIRE(s.read_some(head, 20'000)); // the stream started: the sequence is submitted
    CHECK(head.starts_with("HTTP/1.1 200"));
    REQUIRE(d.ps()["sequences"].size() == 1);
  } // closes the connection
  REQUIRE(d.proc->wait_for_output("ended: cancelled", 20s));
  CHECK(d.proc->output().find("0 generated tokens") != std::string::npos); // still in prefill
  CHECK(d.ps()["sequences"].empty());
}

TEST_CASE("http api: while draining, requests and /health get 503 with Retry-After") {
  http_fixture d;
  d.cli({"drain", "--no-wait"});
  auto health = d.request("GET", "/health", {}, {}, false);
  CHECK(health.status == 503);
  CHECK(health.head.find("Retry-After: ") != std::string::npos);
  auto r = d.request("POST", "/v1/chat/completions", chat_body("x", 4).dump());
  CHECK(r.status == 503);
  CHECK(r.head.find("Retry-After: 5") != std::string::npos);
  CHECK(json::parse(r.body)["error"]["code"] == "draining");
  d.cli({"resume"});
  CHECK(d.request("GET", "/health", {}, {}, false).status == 200);
}

namespace {

/// One slot, so that a request of another prefix pushes the warm KV into the
/// store; a slower sim, so that loading a snapshot clearly beats a prefill.
std::string one_slot_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
[model.sim]
slots = 1
max_context = 512
snapshot_bytes = "512KiB"
time_scale = 100
[reuse]
min_prefix_tokens = 16
[http]
listen = "127.0.0.1:0"
)",
                     run_dir);
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

std::uint64_t cached_of(const json& r) {
  return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
}

/// The value of one sample line of the Prometheus text, or -1 if absent.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

} // namespace

TEST_CASE("http api: cached_tokens is the prefix the engine reused, warm or loaded, and matches "
          "status, metrics and the Ollama counts") {
  http_fixture d{one_slot_config};
  const auto prompt = ids(100, 0);
  auto r1 = d.post_json("/v1/completions", completion_ids(prompt));
  CHECK(cached_of(r1) == 0);
  CHECK(r1["usage"]["prompt_tokens"] == 100);

  // The same prompt: all but its last token come from the warm slot.
  auto r2 = d.post_json("/v1/completions", completion_ids(prompt));
  CHECK(r2["usage"]["prompt_tokens"] == 100);
  CHECK(cached_of(r2) == 99);
  auto reuse = d.status()["models"][0]["reuse"];
  CHECK(reuse["hits_warm"] == 1);
  CHECK(reuse["reused_tokens"] == 99);

  // Ollama counts the whole prompt and reports the cached part beside it.
  const json gen{{"model", "tiny"}, {"prompt", std::string(70, 'q')}, {"stream", false},
                 {"options", {{"num_predict", 4}, {"temperature", 0}}}};
  auto o1 = d.post_json("/api/generate", gen);
  CHECK(o1["prompt_eval_cached_count"] == 0);
  auto o2 = d.post_json("/api/generate", gen);
  const auto prompt_len = o2["prompt_eval_count"].get<std::uint64_t>();
  CHECK(prompt_len == o1["prompt_eval_count"].get<std::uint64_t>());
  CHECK(prompt_len > 70);
  CHECK(o2["prompt_eval_cached_count"] == prompt_len - 1);

  // The completion's KV went to the store when the Ollama requests needed the
  // slot; a prompt that extends it loads the snapshot and prefills the rest.
  reuse = d.status()["models"][0]["reuse"];
  CHECK(reuse["stored"] == 1);
  const auto reused_before = reuse["reused_tokens"].get<std::uint64_t>();
  auto longer = prompt;
  for (int extra : ids(20, 3))
    longer.push_back(extra);
  auto r3 = d.post_json("/v1/completions", completion_ids(longer));
  reuse = d.status()["models"][0]["reuse"];
  CAPTURE(reuse.dump());
  CHECK(reuse["hits_load"] == 1);
  CHECK(cached_of(r3) >= 100); // the whole first prompt, and its output as far as it matches
  CHECK(cached_of(r3) == reuse["reused_tokens"].get<std::uint64_t>() - reused_before);

  const auto metrics = d.cli({"metrics"});
  CHECK(sample(metrics, R"(kvlane_reuse_total{model="tiny",outcome="warm"})") == 2);
  CHECK(sample(metrics, R"(kvlane_reuse_total{model="tiny",outcome="load"})") == 1);
  CHECK(sample(metrics, R"(kvlane_reused_tokens_total{model="tiny"})")
        == double(99 + (prompt_len - 1) + cached_of(r3)));
  CHECK(sample(metrics, R"(kvlane_retained_entries{model="tiny",where="slot"})") == 1);
  CHECK(metrics.find("# HELP kvlane_retained_evictions_total ") != std::string::npos);
  CHECK(sample(metrics, R"(kvlane_store_retained_bytes)") > 0);
}

TEST_CASE("http api: kvlane cache ls lists retained KV and cache drop frees its slot and store "
          "bytes") {
  http_fixture d{one_slot_config};
  d.post_json("/v1/completions", completion_ids(ids(60, 0)));
  d.post_json("/v1/completions", completion_ids(ids(60, 5))); // pushes the first into the store

  auto ls = json::parse(d.cli({"cache", "ls", "--json"}));
  REQUIRE(ls["entries"].size() == 2);
  const auto& stored = ls["entries"][0];
  CHECK(stored["model"] == "tiny");
  CHECK(stored["owner"] == "http");
  CHECK(stored["where"] == "store");
  CHECK(stored["tokens"] == 60 + 8 - 1);
  CHECK(stored["bytes"].get<std::uint64_t>() > 0);
  CHECK(stored["hits"] == 0);
  CHECK(ls["entries"][1]["where"] == "slot");
  CHECK(ls["entries"][1]["slot"] == 0);
  const auto text = d.cli({"cache", "ls", "--model", "tiny"});
  CHECK(text.find("store") != std::string::npos);
  CHECK(text.find("slot 0") != std::string::npos);

  auto status = d.status();
  CHECK(status["store"]["retained_bytes"] == stored["bytes"]);
  CHECK(status["models"][0]["reuse"]["store_bytes"] == stored["bytes"]);

  auto one = json::parse(d.cli({"cache", "drop", "--id", std::to_string(stored["id"].get<std::uint64_t>()),
                                "--json"}));
  CHECK(one["entries"] == 1);
  CHECK(one["snapshots"] == 1);
  CHECK(one["store_bytes"] == stored["bytes"]);

  const auto all = d.cli({"cache", "drop", "--all"});
  CHECK(all.find("dropped 1 retained entries") != std::string::npos);
  CHECK(all.find("freed 1 slots") != std::string::npos);

  status = d.status();
  CHECK(status["models"][0]["reuse"]["entries"] == 0);
  CHECK(status["models"][0]["reuse"]["evictions"]["admin"] == 2);
  CHECK(status["store"]["retained_bytes"] == 0);
  CHECK(status["store"]["used_bytes"] == 0);
  CHECK(json::parse(d.cli({"cache", "ls", "--json"}))["entries"].empty());

  // Bad selectors are usage errors (64); an unknown id is the daemon's not_found (1).
  const auto sock = d.run_dir + "/kvlane-admin.sock";
  CHECK(spawn(KVLANE_CLI_PATH, {"cache", "drop", "--socket", sock}).wait_exit(30s) == 64);
  CHECK(spawn(KVLANE_CLI_PATH, {"cache", "drop", "--all", "--id", "3", "--socket", sock})
          .wait_exit(30s)
        == 64);
  CHECK(spawn(KVLANE_CLI_PATH, {"cache", "drop", "--id", "999", "--socket", sock}).wait_exit(30s)
        == 1);
}

TEST_CASE("http api: an HTTP request never reuses the KV a local user's request left") {
  http_fixture d{one_slot_config};
  const std::string prompt(80, 'p');
  auto run = spawn(KVLANE_CLI_PATH, {"run", "--socket", d.run_dir + "/kvlane.sock", "--model", "tiny",
                                     "--max-tokens", "4", prompt});
  REQUIRE(run.wait_exit(30s) == 0);
  const json body{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  auto first = d.post_json("/v1/completions", body);
  CHECK(cached_of(first) == 0);
  auto second = d.post_json("/v1/completions", body);
  CHECK(cached_of(second) == second["usage"]["prompt_tokens"].get<std::uint64_t>() - 1);
  const auto ls = json::parse(d.cli({"cache", "ls", "--json"}));
  REQUIRE(ls["entries"].size() == 2);
  CHECK(ls["entries"][0]["owner"] == getuid());
  CHECK(ls["entries"][1]["owner"] == "http");
}
