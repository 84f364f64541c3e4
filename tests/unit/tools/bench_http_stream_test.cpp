// What the HTTP driver reads out of each raced server's /v1/completions
// stream: real responses of llama-server and kvlaned, captured with
// `curl --raw -i` on loopback (ids and times as they came).
#include "tools/bench/completion_stream.hpp"
#include "tools/bench/http_parser.hpp"
#include "tools/bench/sse_parser.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane::tools::bench;

namespace {

// llama-server (llama.cpp b1-80fb11a), the bench GGUF, 4 tokens of a prompt it had seen:
// the usage and timings ride on the last text event.
constexpr std::string_view llama_stream =
  "HTTP/1.1 200 OK\r\n"
  "Server: llama.cpp\r\n"
  "Access-Control-Allow-Origin: \r\n"
  "X-Accel-Buffering: no\r\n"
  "Content-Type: text/event-stream\r\n"
  "Transfer-Encoding: chunked\r\n"
  "Keep-Alive: timeout=5, max=100\r\n"
  "\r\n"
  "e8\r\n"
  "data: {\"choices\":[{\"text\":\"n\xc4\x9bji\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}],\"created\":1796190709,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"id\":\"chatcmpl-xWryP0yKoVfePWAAWNhVK38Ap8tba5Ps\"}\n"
  "\n"
  "\r\n"
  "e7\r\n"
  "data: {\"choices\":[{\"text\":\".\xe2\x80\x94\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}],\"created\":1796190709,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"id\":\"chatcmpl-xWryP0yKoVfePWAAWNhVK38Ap8tba5Ps\"}\n"
  "\n"
  "\r\n"
  "eb\r\n"
  "data: {\"choices\":[{\"text\":\"_keyword\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}],\"created\":1796190709,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"id\":\"chatcmpl-xWryP0yKoVfePWAAWNhVK38Ap8tba5Ps\"}\n"
  "\n"
  "\r\n"
  "e9\r\n"
  "data: {\"choices\":[{\"text\":\"\xe0\xa4\xae\xe0\xa4\xb9\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}],\"created\":1796190709,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"id\":\"chatcmpl-xWryP0yKoVfePWAAWNhVK38Ap8tba5Ps\"}\n"
  "\n"
  "\r\n"
  "241\r\n"
  "data: {\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}],\"created\":1796190709,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"usage\":{\"completion_tokens\":4,\"prompt_tokens\":6,\"total_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":5}},\"id\":\"chatcmpl-xWryP0yKoVfePWAAWNhVK38Ap8tba5Ps\",\"timings\":{\"cache_n\":5,\"prompt_n\":1,\"prompt_ms\":28.449,\"prompt_per_token_ms\":28.449,\"prompt_per_second\":35.15062040845021,\"predicted_n\":4,\"predicted_ms\":39.546,\"predicted_per_token_ms\":13.182,\"predicted_per_second\":75.86102260658474}}\n"
  "\n"
  "\r\n"
  "e\r\n"
  "data: [DONE]\n"
  "\n"
  "\r\n"
  "0\r\n"
  "\r\n";

// kvlaned (sim model, byte tokenizer), 3 tokens: the usage comes in an event of its own.
constexpr std::string_view kvlane_stream =
  "HTTP/1.1 200 OK\r\n"
  "Server: kvlaned\r\n"
  "Content-Type: text/event-stream\r\n"
  "Transfer-Encoding: chunked\r\n"
  "Cache-Control: no-cache\r\n"
  "X-Accel-Buffering: no\r\n"
  "\r\n"
  "b4\r\n"
  "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":\"o\"}],\"created\":1796190870,\"id\":\"cmpl-52\",\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":null}\n"
  "\n"
  "\r\n"
  "b4\r\n"
  "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":\"k\"}],\"created\":1796190870,\"id\":\"cmpl-52\",\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":null}\n"
  "\n"
  "\r\n"
  "b4\r\n"
  "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":\"e\"}],\"created\":1796190870,\"id\":\"cmpl-52\",\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":null}\n"
  "\n"
  "\r\n"
  "fb\r\n"
  "data: {\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"logprobs\":null,\"text\":\"\"}],\"created\":1796190870,\"id\":\"cmpl-52\",\"kvlane\":{\"preemptions\":0,\"total_ms\":121.01498,\"ttft_ms\":54.930171},\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":null}\n"
  "\n"
  "\r\n"
  "dd\r\n"
  "data: {\"choices\":[],\"created\":1796190870,\"id\":\"cmpl-52\",\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":0},\"total_tokens\":15}}\n"
  "\n"
  "\r\n"
  "e\r\n"
  "data: [DONE]\n"
  "\n"
  "\r\n"
  "0\r\n"
  "\r\n";

// kvlaned whose sim fails every step: the stream's error event, then [DONE].
constexpr std::string_view kvlane_error_stream =
  "HTTP/1.1 200 OK\r\n"
  "Server: kvlaned\r\n"
  "Content-Type: text/event-stream\r\n"
  "Transfer-Encoding: chunked\r\n"
  "Cache-Control: no-cache\r\n"
  "X-Accel-Buffering: no\r\n"
  "\r\n"
  "de\r\n"
  "data: {\"error\":{\"code\":\"generation_failed\",\"message\":\"the NPU failed 12 steps in a row that carried this request, backing off in between: sim: injected device_failure on step call 13\",\"param\":null,\"type\":\"server_error\"}}\n"
  "\n"
  "\r\n"
  "e\r\n"
  "data: [DONE]\n"
  "\n"
  "\r\n"
  "0\r\n"
  "\r\n";

// llama-server refusing a prompt over the slot's context: an error status before any stream.
constexpr std::string_view llama_too_long =
  "HTTP/1.1 400 Bad Request\r\n"
  "Server: llama.cpp\r\n"
  "Access-Control-Allow-Origin: \r\n"
  "Content-Type: application/json; charset=utf-8\r\n"
  "Content-Length: 195\r\n"
  "Connection: close\r\n"
  "\r\n"
  "{\"error\":{\"code\":400,\"message\":\"request (2101 tokens) exceeds the available context size (2048 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":2101,\"n_ctx\":2048}}";

// The last events of a turn that extends an earlier prompt: llama-server (101 of 104
// prompt tokens from its cache) and kvlaned (333 of 337).
constexpr std::string_view llama_reuse_final =
  "{\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}],\"created\":1796190710,\"model\":\"bench\",\"system_fingerprint\":\"b1-80fb11a\",\"object\":\"text_completion\",\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":104,\"total_tokens\":107,\"prompt_tokens_details\":{\"cached_tokens\":101}},\"id\":\"chatcmpl-OS31NiGwgRmqjq8d8B2PNrOTmLluhjks\",\"timings\":{\"cache_n\":101,\"prompt_n\":3,\"prompt_ms\":23.741,\"prompt_per_token_ms\":7.913666666666667,\"prompt_per_second\":126.36367465565898,\"predicted_n\":3,\"predicted_ms\":25.199,\"predicted_per_token_ms\":12.5995,\"predicted_per_second\":79.36822889797213}}";

constexpr std::string_view kvlane_reuse_usage =
  "{\"choices\":[],\"created\":1796190870,\"id\":\"cmpl-54\",\"model\":\"llama-3.2-1b\",\"object\":\"text_completion\",\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":337,\"prompt_tokens_details\":{\"cached_tokens\":333},\"total_tokens\":339}}";

/// What the driver makes of a whole response: status, error body, figures,
/// and which events carried text. Fed in pieces of `step` bytes.
struct read_back {
  int status = 0;
  std::string error_body;
  completion_figures figures;
  std::vector<completion_event> kinds;
  bool done = false;
};

read_back read_response(std::string_view wire, std::size_t step = 1 << 20) {
  read_back out;
  http_response_parser http;
  sse_parser sse;
  completion_stream stream;
  for (std::size_t i = 0; i < wire.size(); i += step) {
    auto ok = http.feed(wire.substr(i, step), [&](std::string_view body) {
      if (http.head().status != 200) {
        out.error_body.append(body);
        return;
      }
      sse.feed(body, [&](const sse_event& e) { out.kinds.push_back(stream.on_data(e.data)); });
    });
    REQUIRE_MESSAGE(ok.has_value(), ok.error());
  }
  REQUIRE(http.finish().has_value());
  out.status = http.head().status;
  out.done = http.done();
  out.figures = stream.figures();
  return out;
}

} // namespace

TEST_CASE("bench_http: llama-server's stream gives tokens, usage and timings from its last text event") {
  for (std::size_t step : {1u, 13u, 4096u}) {
    CAPTURE(step);
    const auto sut = read_response(llama_stream, step);
    CHECK(sut.status == 200);
    CHECK(sut.done);
    const auto& f = sut.figures;
    CHECK(f.text_events == 4);
    CHECK(f.events == 5); // [DONE] is not an event of the completion
    CHECK(f.done);
    CHECK(f.error.empty());
    CHECK(f.finish_reason == "length");
    CHECK(f.completion_tokens == 4u);
    CHECK(f.prompt_tokens == 6u);
    CHECK(f.cached_tokens == 5u);
    CHECK(f.timings_prompt_n == 1u);
    CHECK(f.timings_cache_n == 5u);
    CHECK(f.output_tokens() == 4);
    CHECK(f.reused_tokens() == 5u);
    CHECK(f.prefilled_tokens() == 1u); // timings.prompt_n: what it evaluated
    CHECK(sut.kinds == std::vector<completion_event>{completion_event::text, completion_event::text,
                                                     completion_event::text, completion_event::text,
                                                     completion_event::other, completion_event::done});
  }
}

TEST_CASE("bench_http: kvlaned's stream gives tokens, then the usage in an event of its own") {
  const auto sut = read_response(kvlane_stream, 7);
  CHECK(sut.status == 200);
  const auto& f = sut.figures;
  CHECK(f.text_events == 3);
  CHECK(f.done);
  CHECK(f.finish_reason == "length");
  CHECK(f.completion_tokens == 3u);
  CHECK(f.prompt_tokens == 12u);
  CHECK(f.cached_tokens == 0u);
  CHECK_FALSE(f.timings_prompt_n.has_value());
  CHECK(f.reused_tokens() == 0u);
  CHECK(f.prefilled_tokens() == 12u); // prompt_tokens - cached_tokens
  CHECK(sut.kinds.back() == completion_event::done);
}

TEST_CASE("bench_http: both servers report the prompt tokens a later turn took from their cache") {
  completion_stream llama;
  CHECK(llama.on_data(llama_reuse_final) == completion_event::other);
  CHECK(llama.figures().reused_tokens() == 101u);
  CHECK(llama.figures().prefilled_tokens() == 3u);
  CHECK(llama.figures().prompt_tokens == 104u);
  completion_stream kvlane;
  CHECK(kvlane.on_data(kvlane_reuse_usage) == completion_event::other);
  CHECK(kvlane.figures().reused_tokens() == 333u);
  CHECK(kvlane.figures().prefilled_tokens() == 4u);
}

TEST_CASE("bench_http: kvlaned's error event fails the request with its message") {
  const auto sut = read_response(kvlane_error_stream, 5);
  CHECK(sut.status == 200);
  const auto& f = sut.figures;
  CHECK(f.text_events == 0);
  CHECK(f.done);
  CHECK(f.error.rfind("the NPU failed 12 steps in a row", 0) == 0);
  CHECK(sut.kinds.front() == completion_event::error);
}

TEST_CASE("bench_http: an error status keeps the status and the error body's message") {
  const auto sut = read_response(llama_too_long, 3);
  CHECK(sut.status == 400);
  CHECK(sut.kinds.empty());
  CHECK(error_message_of(sut.error_body)
        == "request (2101 tokens) exceeds the available context size (2048 tokens), try increasing it");
}

TEST_CASE("bench_http: error messages are cut at 200 bytes on a character boundary") {
  // llama-server's stream error (format_oai_sse of {"error": format_error_response(...)}).
  completion_stream sut;
  CHECK(sut.on_data(R"({"error":{"code":500,"message":"The model produced output that does not match the expected Content-only format","type":"server_error"}})")
        == completion_event::error);
  CHECK(sut.figures().error
        == "The model produced output that does not match the expected Content-only format");
  std::string long_text(199, 'x');
  long_text += "\u00e9\u00e9"; // two 2-byte characters straddling byte 200
  const auto cut = error_message_of(R"({"error":{"message":")" + long_text + R"("}})");
  CHECK(cut.size() == 199);
  CHECK(error_message_of("<html>\nBad Gateway</html>") == "<html> Bad Gateway</html>");
  CHECK(error_message_of(R"({"error":"plain"})") == "plain");
}

TEST_CASE("bench_http: data that is not JSON is an error of the stream, not a crash") {
  completion_stream sut;
  CHECK(sut.on_data("{\"choices\": [") == completion_event::error);
  CHECK(sut.figures().error.rfind("malformed stream event", 0) == 0);
  CHECK(sut.on_data("[DONE]") == completion_event::done);
}
