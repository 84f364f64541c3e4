// Embeddings on a real kvlaned (sim models): POST /v1/embeddings, /api/embed and the legacy
// /api/embeddings answer the same deterministic unit vectors in each API's shape; inputs
// over the context are refused (OpenAI, Ollama with truncate false) or cut (Ollama); errors
// come in each API's shape; requests are admitted like generations (an identity at its
// limit gets 429, a draining daemon 503); a qbruntime model answers 400 naming it.
#include "tests/integration/http_fixture.hpp"
#include "tests/support/qbr_fixture.hpp"
#include "tests/support/skip.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <thread>

using namespace kvlane::test::http;

namespace {

std::string embeddings_config(const std::string& run_dir) {
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
[http]
listen = "127.0.0.1:0"
[[http.keys]]
name = "alice"
key = "sk-alice"
max_requests = 1
[[http.keys]]
name = "bob"
key = "sk-bob"
)",
                     run_dir);
}

std::string bearer(std::string_view key) {
  return fmt::format("Authorization: Bearer {}\r\n", key);
}

reply post(http_fixture& d, std::string_view path, const json& body, std::string_view key = "sk-bob") {
  return d.request("POST", path, body.dump(), bearer(key), false);
}

json ok(const reply& r) {
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

using vec = std::vector<float>;

vec decode_base64_floats(const std::string& text) {
  static const std::string alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=')
      break;
    const auto v = alphabet.find(c);
    REQUIRE(v != std::string::npos);
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  REQUIRE(bytes.size() % 4 == 0);
  vec out;
  for (std::size_t i = 0; i < bytes.size(); i += 4) {
    std::uint32_t u = 0;
    for (int b = 0; b < 4; ++b)
      u |= std::uint32_t(static_cast<unsigned char>(bytes[i + b])) << (8 * b);
    out.push_back(std::bit_cast<float>(u));
  }
  return out;
}

double norm(const vec& v) {
  double s = 0;
  for (const float x : v)
    s += double(x) * x;
  return std::sqrt(s);
}

/// The tokens the model's tokenizer makes of `text` with its BOS (/tokenize, add_special).
std::size_t token_count(http_fixture& d, const std::string& text) {
  return ok(post(d, "/tokenize", {{"model", "tiny"}, {"content", text}, {"add_special", true}}))["tokens"]
    .size();
}

/// A long streamed completion on the slow model held open by `key`: a live request of that
/// identity until the socket closes. Returns once the response has begun.
std::unique_ptr<socket_fd> hold_stream(http_fixture& d, std::string_view key) {
  const auto text =
    json{{"model", "slow"}, {"prompt", "a long story"}, {"max_tokens", 3000}, {"stream", true}}.dump();
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

} // namespace

TEST_CASE("http embeddings: /v1/embeddings gives deterministic unit vectors, as floats or base64, with usage") {
  http_fixture d{embeddings_config};
  const std::string a = "kv caches park on the host";
  const std::string b = "the compute lane keeps stepping";
  auto r = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", {a, b}}, {"encoding_format", "float"}}));
  CHECK(r["object"] == "list");
  CHECK(r["model"] == "tiny");
  REQUIRE(r["data"].size() == 2);
  const auto va = r["data"][0]["embedding"].get<vec>();
  const auto vb = r["data"][1]["embedding"].get<vec>();
  CHECK(r["data"][0]["object"] == "embedding");
  CHECK(r["data"][1]["index"] == 1);
  CHECK(va.size() == 256); // the sim's documented dimension
  CHECK(norm(va) == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(norm(vb) == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(va != vb);
  const auto tokens = token_count(d, a) + token_count(d, b);
  CHECK(r["usage"]["prompt_tokens"] == tokens);
  CHECK(r["usage"]["total_tokens"] == tokens);

  // The same text again, alone and without encoding_format: the same vector.
  auto again = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", a}}));
  CHECK(again["data"][0]["embedding"].get<vec>() == va);
  auto packed = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", {a}}, {"encoding_format", "base64"}}));
  CHECK(decode_base64_floats(packed["data"][0]["embedding"].get<std::string>()) == va);

  // Token ids are embedded as they are: the text's own tokens give the text's vector.
  auto ids = ok(post(d, "/tokenize", {{"model", "tiny"}, {"content", a}, {"add_special", true}}))["tokens"];
  auto by_ids = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", {ids, ids}}, {"dimensions", 256}}));
  CHECK(by_ids["data"][1]["embedding"].get<vec>() == va);
}

TEST_CASE("http embeddings: /api/embed and /api/embeddings answer the vectors of /v1/embeddings in Ollama's shape") {
  http_fixture d{embeddings_config};
  const std::string a = "kv caches park on the host";
  const auto want = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", a}}))["data"][0]["embedding"].get<vec>();

  auto embed = ok(post(d, "/api/embed", {{"model", "tiny:latest"}, {"input", {a, "x"}}, {"keep_alive", "5m"}}));
  CHECK(embed["model"] == "tiny:latest");
  REQUIRE(embed["embeddings"].size() == 2);
  CHECK(embed["embeddings"][0].get<vec>() == want);
  CHECK(embed["prompt_eval_count"] == token_count(d, a) + token_count(d, "x"));
  CHECK(embed["total_duration"].get<std::int64_t>() > 0);
  CHECK(embed["load_duration"] == 0);

  auto legacy = ok(post(d, "/api/embeddings", {{"model", "tiny"}, {"prompt", a}}));
  CHECK(legacy.size() == 1);
  CHECK(legacy["embedding"].get<vec>() == want);

  // No input is how Ollama clients load a model: no vectors.
  CHECK(ok(post(d, "/api/embed", {{"model", "tiny"}}))["embeddings"] == json::array());
  CHECK(ok(post(d, "/api/show", {{"model", "tiny"}}))["capabilities"] == json{"completion", "embedding"});
  CHECK(ok(post(d, "/api/embeddings", {{"model", "tiny"}, {"prompt", ""}}))["embedding"] == json::array());
}

TEST_CASE("http embeddings: an input over the context is a 400 on /v1, cut by /api/embed unless truncate is false") {
  http_fixture d{embeddings_config};
  const std::string long_text(600, 'q'); // 601 tokens with BOS; tiny's context is 512
  auto openai = post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", {"short", long_text}}});
  REQUIRE(openai.status == 400);
  auto e = json::parse(openai.body)["error"];
  CHECK(e["code"] == "context_length_exceeded");
  CHECK(e["param"] == "input[1]");
  CHECK(e["message"] == "input[1] is 601 tokens; model 'tiny' embeds at most 512 tokens per input (its max_context)");

  auto strict = post(d, "/api/embed", {{"model", "tiny"}, {"input", long_text}, {"truncate", false}});
  REQUIRE(strict.status == 400);
  CHECK(json::parse(strict.body)
        == json{{"error", "input is 601 tokens; model 'tiny' embeds at most 512 tokens per input "
                          "(its max_context); truncate is false"}});

  // Cut to the context: the vector of the input's first 512 tokens.
  auto cut = ok(post(d, "/api/embed", {{"model", "tiny"}, {"input", long_text}}));
  CHECK(cut["prompt_eval_count"] == 512);
  const auto all = ok(post(d, "/tokenize", {{"model", "tiny"}, {"content", long_text}, {"add_special", true}}))["tokens"];
  const json ids(all.begin(), all.begin() + 512);
  const auto first_512 = ok(post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", ids}}))["data"][0]["embedding"];
  CHECK(cut["embeddings"][0] == first_512);
  // options.num_ctx cuts shorter.
  auto shorter = ok(post(d, "/api/embed", {{"model", "tiny"}, {"input", long_text}, {"options", {{"num_ctx", 100}}}}));
  CHECK(shorter["prompt_eval_count"] == 100);
}

TEST_CASE("http embeddings: errors come in each API's shape") {
  http_fixture d{embeddings_config};
  auto unknown = post(d, "/v1/embeddings", {{"model", "nope"}, {"input", "x"}});
  CHECK(unknown.status == 404);
  CHECK(json::parse(unknown.body)["error"]["code"] == "model_not_found");
  auto unknown_ollama = post(d, "/api/embed", {{"model", "nope"}, {"input", "x"}});
  CHECK(unknown_ollama.status == 404);
  CHECK(json::parse(unknown_ollama.body) == json{{"error", "model 'nope' not found"}});

  auto dims = post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", "x"}, {"dimensions", 64}});
  REQUIRE(dims.status == 400);
  auto e = json::parse(dims.body)["error"];
  CHECK(e["param"] == "dimensions");
  CHECK(e["code"] == "unsupported_parameter");
  CHECK(e["message"] == "'dimensions' is not supported by kvlane: model 'tiny' produces 256-dimensional "
                        "embeddings and cannot make them shorter or longer; leave 'dimensions' out "
                        "or set it to 256");
  CHECK(post(d, "/api/embed", {{"model", "tiny"}, {"input", "x"}, {"dimensions", 64}}).status == 400);

  auto vocab = post(d, "/v1/embeddings", {{"model", "tiny"}, {"input", {{1, 2}, {3, 999}}}});
  REQUIRE(vocab.status == 400);
  CHECK(json::parse(vocab.body)["error"]["param"] == "input[1][1]");
  CHECK(json::parse(vocab.body)["error"]["message"]
        == "token 999 is outside the vocabulary of model 'tiny' (size 258)");

  auto bad = post(d, "/api/embed", {{"model", "tiny"}, {"input", 3}});
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body) == json{{"error", "'input' must be a string or an array of strings, got number"}});

  auto get = d.request("GET", "/v1/embeddings", {}, bearer("sk-bob"), false);
  CHECK(get.status == 405);
  CHECK(get.head.find("Allow: POST") != std::string::npos);
  auto nokey = d.request("POST", "/api/embed", R"({"model":"tiny","input":"x"})", {}, false);
  CHECK(nokey.status == 401);
  CHECK(json::parse(nokey.body)["error"].is_string());
}

TEST_CASE("http embeddings: an identity at its request limit gets 429, others are served, and draining answers 503") {
  http_fixture d{embeddings_config};
  const json body{{"model", "tiny"}, {"input", "x"}};
  {
    auto held = hold_stream(d, "sk-alice"); // alice's one live request
    auto refused = post(d, "/v1/embeddings", body, "sk-alice");
    REQUIRE(refused.status == 429);
    CHECK(refused.head.find("Retry-After: ") != std::string::npos);
    auto e = json::parse(refused.body)["error"];
    CHECK(e["code"] == "rate_limit_exceeded");
    CHECK(e["message"].get<std::string>().find("HTTP identity 'alice' already has 1 live request(s) "
                                               "(http.keys[0].max_requests)")
          == 0);
    auto ollama = post(d, "/api/embed", body, "sk-alice");
    CHECK(ollama.status == 429);
    CHECK(json::parse(ollama.body)["error"].is_string());
    CHECK(post(d, "/v1/embeddings", body, "sk-bob").status == 200);
  }
  // The stream's socket closed: alice's sequence is cancelled and leaves; then she is served.
  reply r;
  for (int i = 0; i < 100; ++i) {
    r = post(d, "/v1/embeddings", body, "sk-alice");
    if (r.status != 429)
      break;
    std::this_thread::sleep_for(50ms); // the cancel is asynchronous; no event reaches the client
  }
  CHECK(r.status == 200);

  d.cli({"drain"});
  auto draining = post(d, "/v1/embeddings", body);
  CHECK(draining.status == 503);
  CHECK(json::parse(draining.body)["error"]["code"] == "draining");
  CHECK(post(d, "/api/embeddings", {{"model", "tiny"}, {"prompt", "x"}}).status == 503);
}

TEST_CASE("http embeddings: a qbruntime model answers 400 naming the model and its backend") {
  kvlane::test::qbr_model_dir npu("batch = true\nslots = 2\nmax_cache_size = 256\nmax_width = 64\n"
                                  "vocab = 300\nhidden = 12\nlayers = 2\nseed = 3\n",
                                  300, 12);
  temp_dir dir;
  const auto config = dir.write("kvlane.toml", fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}/run"
worker_threads = 2
[[model]]
name = "npu"
backend = "qbruntime"
[model.qbruntime]
model_dir = "{}"
tokenizer = "bytes"
[store]
max_bytes = "64MiB"
[http]
listen = "127.0.0.1:0"
)",
                                                           dir.path(), npu.dir.string()));
  auto proc = spawn(KVLANED_PATH, {"--config", config});
  if (!proc.wait_for_output("ready:", 30s)) {
    const auto out = proc.output();
    if (out.find("backend 'qbruntime' is not in this build") != std::string::npos) {
      kvlane::test::skip_test_case("this build has no qbruntime backend");
      return;
    }
    FAIL("kvlaned did not start: " << out);
  }
  std::smatch m;
  const auto out = proc.output();
  REQUIRE(std::regex_search(out, m, std::regex{R"(on http://127\.0\.0\.1:(\d+))"}));
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  const auto send = [&](std::string_view path, const json& body) {
    socket_fd s{port};
    const auto text = body.dump();
    s.send(fmt::format("POST {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: "
                       "{}\r\n\r\n{}",
                       path, text.size(), text));
    return parse_reply(s.read_all());
  };
  auto openai = send("/v1/embeddings", {{"model", "npu"}, {"input", "hello"}});
  REQUIRE(openai.status == 400);
  auto e = json::parse(openai.body)["error"];
  CHECK(e["type"] == "invalid_request_error");
  CHECK(e["param"] == "model");
  CHECK(e["message"] == "model 'npu' (backend qbruntime) cannot produce embeddings");
  auto ollama = send("/api/embed", {{"model", "npu"}, {"input", "hello"}});
  CHECK(ollama.status == 400);
  CHECK(json::parse(ollama.body) == json{{"error", "model 'npu' (backend qbruntime) cannot produce embeddings"}});
  CHECK(send("/api/embeddings", {{"model", "npu"}, {"prompt", "hello"}}).status == 400);
  // /api/show tells Ollama clients which models embed.
  CHECK(json::parse(send("/api/show", {{"model", "npu"}}).body)["capabilities"] == json{"completion"});
}
