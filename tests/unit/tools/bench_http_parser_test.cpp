// The HTTP driver's response parser and SSE parser: bodies framed every way
// the raced servers frame them, split anywhere.
#include "tools/bench/http_parser.hpp"
#include "tools/bench/sse_parser.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane::tools::bench;

namespace {

/// Feeds `wire` to `sut` in pieces of `step` bytes; returns the body.
std::string feed_in_pieces(http_response_parser& sut, std::string_view wire, std::size_t step) {
  std::string body;
  for (std::size_t i = 0; i < wire.size(); i += step) {
    auto ok = sut.feed(wire.substr(i, step), [&](std::string_view b) { body.append(b); });
    REQUIRE_MESSAGE(ok.has_value(), ok.error());
  }
  return body;
}

// kvlaned's stream framing: chunked, one chunk per event (Boost.Beast).
constexpr std::string_view chunked_stream =
  "HTTP/1.1 200 OK\r\n"
  "Content-Type: text/event-stream\r\n"
  "Transfer-Encoding: chunked\r\n"
  "\r\n"
  "19\r\ndata: {\"a\":1}\n\ndata: {\"b\"\r\n"
  "5;ext=1\r\n:2}\n\n\r\n"
  "e\r\ndata: [DONE]\n\n\r\n"
  "0\r\nX-Trailer: yes\r\n\r\n";

} // namespace

TEST_CASE("bench_http: a chunked body is reassembled whatever the read sizes") {
  for (std::size_t step : {1u, 2u, 3u, 7u, 16u, 1000u}) {
    CAPTURE(step);
    http_response_parser sut;
    const auto body = feed_in_pieces(sut, chunked_stream, step);
    CHECK(sut.done());
    CHECK(sut.head().status == 200);
    CHECK(sut.head().body == http_body_kind::chunked);
    CHECK(sut.head().keep_alive());
    CHECK(body == "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n");
  }
}

TEST_CASE("bench_http: a Content-Length body ends at its length and leaves the rest unconsumed") {
  const std::string wire = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n"
                           "Connection: keep-alive\r\n\r\nhelloHTTP/1.1 200 OK";
  http_response_parser sut;
  std::string body;
  REQUIRE(sut.feed(wire, [&](std::string_view b) { body.append(b); }));
  CHECK(sut.done());
  CHECK(sut.head().status == 500);
  CHECK(sut.head().reason == "Internal Server Error");
  CHECK(body == "hello");
  CHECK(sut.consumed() == wire.size() - std::string_view{"HTTP/1.1 200 OK"}.size());
  CHECK(sut.head().keep_alive());
}

TEST_CASE("bench_http: a body without length ends when the connection closes, and is not kept alive") {
  http_response_parser sut;
  std::string body;
  REQUIRE(sut.feed("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n",
                   [&](std::string_view b) { body.append(b); }));
  CHECK_FALSE(sut.done());
  CHECK(sut.head().body == http_body_kind::until_close);
  CHECK(sut.finish().has_value());
  CHECK(sut.done());
  CHECK(body == "data: x\n\n");
  CHECK_FALSE(sut.head().keep_alive());
}

TEST_CASE("bench_http: Connection close, HTTP/1.0 and a 204 decide keep-alive and the body") {
  {
    http_response_parser sut;
    REQUIRE(sut.feed("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n", {}));
    CHECK(sut.done());
    CHECK_FALSE(sut.head().keep_alive());
  }
  {
    http_response_parser sut;
    REQUIRE(sut.feed("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", {}));
    CHECK(sut.done());
    CHECK_FALSE(sut.head().keep_alive());
  }
  {
    http_response_parser sut;
    REQUIRE(sut.feed("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n", {}));
    CHECK(sut.done());
    CHECK(sut.body_bytes() == 0);
  }
}

TEST_CASE("bench_http: an interim 100 response is skipped") {
  http_response_parser sut;
  std::string body;
  REQUIRE(sut.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
                   [&](std::string_view b) { body.append(b); }));
  CHECK(sut.done());
  CHECK(sut.head().status == 200);
  CHECK(body == "hi");
}

TEST_CASE("bench_http: malformed responses and cut bodies are errors that say what is wrong") {
  {
    http_response_parser sut;
    auto r = sut.feed("SMTP ready\r\n\r\n", {});
    REQUIRE_FALSE(r);
    CHECK(r.error().find("status line") != std::string::npos);
  }
  {
    http_response_parser sut;
    auto r = sut.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", {});
    REQUIRE_FALSE(r);
    CHECK(r.error().find("chunk size") != std::string::npos);
  }
  {
    http_response_parser sut;
    REQUIRE(sut.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", {}));
    auto r = sut.finish();
    REQUIRE_FALSE(r);
    CHECK(r.error().find("after 3 bytes") != std::string::npos);
  }
  {
    http_response_parser sut;
    auto r = sut.finish();
    REQUIRE_FALSE(r);
    CHECK(r.error() == "connection closed before a response");
  }
}

TEST_CASE("bench_http: SSE events are complete only at their blank line, across any split") {
  const std::string body = ": ping\r\n\r\ndata: {\"x\":1}\r\n\r\nevent: error\ndata: a\ndata:b\n\n"
                           "data: [DONE]\n\n";
  for (std::size_t step : {1u, 2u, 5u, 1000u}) {
    CAPTURE(step);
    sse_parser sut;
    std::vector<sse_event> got;
    for (std::size_t i = 0; i < body.size(); i += step)
      sut.feed(std::string_view{body}.substr(i, step), [&](const sse_event& e) { got.push_back(e); });
    REQUIRE(got.size() == 3);
    CHECK(got[0].data == "{\"x\":1}");
    CHECK(got[0].event.empty());
    CHECK(got[1].event == "error");
    CHECK(got[1].data == "a\nb");
    CHECK(got[2].data == "[DONE]");
    CHECK_FALSE(sut.pending());
  }
}

TEST_CASE("bench_http: an SSE event without its blank line is not handed over") {
  sse_parser sut;
  int events = 0;
  sut.feed("data: {\"x\":1}\n", [&](const sse_event&) { ++events; });
  CHECK(events == 0);
  CHECK(sut.pending());
  sut.feed("\n", [&](const sse_event&) { ++events; });
  CHECK(events == 1);
}
