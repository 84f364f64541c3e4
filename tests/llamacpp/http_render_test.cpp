// Prompts are rendered and tokenized off the HTTP thread: while one connection's prompt of
// several megabytes goes through the GGUF's chat template and Llama-3 tokenizer (seconds),
// a small chat request on another connection gets its first token about as fast as alone.
// With rendering on the HTTP thread the small request would wait for the whole big render.
#include "tests/integration/http_fixture.hpp"
#include "tests/llamacpp/llama_model.hpp"

#include <algorithm>
#include <chrono>
#include <random>

using namespace kvlane::test::http;

namespace {

using clock_type = std::chrono::steady_clock;

/// The tiny GGUF with bodies up to 16 MiB.
std::string big_body_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
backend = "llamacpp"
[model.llamacpp]
gguf = "{}"
slots = 2
context = 512
threads = 2
batch = 64
[http]
listen = "127.0.0.1:0"
api_key = "{}"
max_body_bytes = "16MiB"
)",
                     run_dir, KVLANE_TEST_GGUF, api_key);
}

std::string chat_request(const std::string& content, int max_tokens) {
  const auto body = json{{"model", "tiny"},
                         {"messages", {{{"role", "user"}, {"content", content}}}},
                         {"max_tokens", max_tokens},
                         {"temperature", 0}}
                      .dump();
  return fmt::format("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                     "Connection: close\r\nAuthorization: Bearer {}\r\n"
                     "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                     api_key, body.size(), body);
}

/// Seconds from sending a one-token chat request to its answer: its time to first token.
double small_ttft(std::uint16_t port) {
  socket_fd s{port};
  const auto start = clock_type::now();
  s.send(chat_request("Say hello to the lighthouse keeper.", 1));
  const auto r = parse_reply(s.read_all());
  const auto seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  return seconds;
}

/// Whether `raw` holds a whole response with a Content-Length.
bool complete(const std::string& raw) {
  const auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos)
    return false;
  const auto at = raw.find("Content-Length: ");
  if (at == std::string::npos || at > end)
    return false;
  return raw.size() >= end + 4 + std::stoul(raw.substr(at + 16));
}

/// About `bytes` of English-like words.
std::string words(std::size_t bytes) {
  static const char* pool[] = {"the",   "lighthouse", "keeper", "storm",  "northern",
                               "sea",   "ships",      "letters", "never", "arrived",
                               "quiet", "harbour",    "waves",  "night", "lamp"};
  std::mt19937 rng{7};
  std::string out;
  while (out.size() < bytes) {
    out += pool[rng() % std::size(pool)];
    out += ' ';
  }
  return out;
}

} // namespace

TEST_CASE("http render: a small request's time to first token does not move while another "
          "connection's 12 MB prompt is rendered and tokenized") {
  http_fixture d{big_body_config};
  small_ttft(d.port); // warm-up: the first request starts the render threads
  std::vector<double> alone;
  for (int i = 0; i < 5; ++i)
    alone.push_back(small_ttft(d.port));
  std::sort(alone.begin(), alone.end());
  const double baseline = alone[alone.size() / 2];

  // The big prompt is over the model's context: it is tokenized, then refused (400).
  const auto big = chat_request(words(12'000'000), 4);
  socket_fd big_socket{d.port};
  const auto big_start = clock_type::now();
  big_socket.send(big);
  // Small requests, one after the other, until the big answer is in: some run while
  // the body is still read, most while it is decoded, rendered and tokenized.
  std::vector<double> during;
  std::string big_raw;
  while (!complete(big_raw) && during.size() < 5000) {
    during.push_back(small_ttft(d.port));
    while (big_socket.read_some(big_raw, 0)) {
    }
  }
  while (!complete(big_raw) && big_socket.read_some(big_raw, 20'000)) {
  }
  const double big_seconds = std::chrono::duration<double>(clock_type::now() - big_start).count();
  const auto big_reply = parse_reply(big_raw);
  CAPTURE(big_reply.body.substr(0, 300));
  CHECK(big_reply.status == 400);
  CHECK(json::parse(big_reply.body)["error"]["code"] == "context_length_exceeded");

  CAPTURE(baseline);
  CAPTURE(big_seconds);
  CAPTURE(during.size());
  // The big render is long enough to tell the two apart.
  REQUIRE(big_seconds > 20 * baseline);
  // A request that waited for the big render would take most of big_seconds; one served
  // beside it takes its usual time, give or take the cores the render occupies.
  const double worst = *std::max_element(during.begin(), during.end());
  MESSAGE(fmt::format("small request alone {:.1f} ms (median of 5); beside the big one {:.1f} ms "
                      "(worst of {}); big request {:.0f} ms",
                      baseline * 1e3, worst * 1e3, during.size(), big_seconds * 1e3));
  CHECK(worst < 5 * baseline + big_seconds / 4);
}
