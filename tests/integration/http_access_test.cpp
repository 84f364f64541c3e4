// Who may make a real kvlaned's HTTP API work, decided from the request's headers alone:
// a Host that names another server (DNS rebinding) and an Origin that is not allow-listed
// get 403 on every endpoint, a missing or wrong API key gets 401 before any body byte is
// read or 100 Continue is sent; plain curl (no Origin) keeps working.
#include "tests/integration/http_fixture.hpp"

using namespace kvlane::test::http;

namespace {

/// Sends `head` (request line and headers, without the blank line) and reads to EOF.
reply raw_request(std::uint16_t port, const std::string& head, std::string_view body = {}) {
  socket_fd s{port};
  s.send(head + "\r\n");
  if (!body.empty())
    s.send(body);
  return parse_reply(s.read_all());
}

std::string completion_body() {
  return json{{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 2}}.dump();
}

std::string post_head(std::string_view host, std::string_view extra, std::size_t length,
                      bool with_key = true) {
  return fmt::format("POST /v1/completions HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: {}\r\n{}{}",
                     host, length,
                     with_key ? fmt::format("Authorization: Bearer {}\r\n", api_key) : "", extra);
}

} // namespace

TEST_CASE("http access: a Host naming another server gets 403, loopback names and IP literals are served") {
  http_fixture d;
  const auto body = completion_body();
  for (const std::string_view host : {"evil.example", "evil.example:8471", "kvlane.attacker.net"}) {
    CAPTURE(host);
    const auto r = raw_request(d.port, post_head(host, {}, body.size()), body);
    CHECK(r.status == 403);
    CHECK(json::parse(r.body)["error"]["code"] == "host_forbidden");
  }
  for (const std::string& host : {fmt::format("localhost:{}", d.port), std::string("127.0.0.1"),
                                 std::string("[::1]:1"), std::string("app.localhost"),
                                 std::string("192.168.7.9:8471")}) {
    CAPTURE(host);
    CHECK(raw_request(d.port, post_head(host, {}, body.size()), body).status == 200);
  }
  // Nothing ran for the refused requests: only the five served ones finished.
  CHECK(d.status()["models"][0]["finished"] == 5);
}

TEST_CASE("http access: an Origin not in cors_origins gets 403 on every endpoint, no Origin is served") {
  http_fixture d;
  for (const auto& [method, path] : {std::pair{"GET", "/v1/models"}, std::pair{"GET", "/api/tags"},
                                     std::pair{"POST", "/v1/completions"},
                                     std::pair{"POST", "/api/generate"}}) {
    CAPTURE(path);
    const auto r = d.request(method, path, completion_body(), "Origin: http://evil.example\r\n");
    CHECK(r.status == 403);
  }
  CHECK(d.request("POST", "/v1/completions", completion_body(), "Origin: null\r\n").status == 403);
  CHECK(d.request("POST", "/v1/completions", completion_body(),
                  "Origin: http://localhost:3000\r\n").status == 200);
  CHECK(d.request("POST", "/v1/completions", completion_body()).status == 200); // curl -d
  CHECK(d.status()["models"][0]["finished"] == 2);
}

TEST_CASE("http access: the API key is checked before the body is read or 100 Continue sent") {
  http_fixture d;
  // Announces 1 MiB and waits for 100 Continue before sending it; no key.
  socket_fd s{d.port};
  s.send(post_head(fmt::format("localhost:{}", d.port), "Expect: 100-continue\r\n", 1 << 20, false)
         + "\r\n");
  const auto raw = s.read_all(); // the daemon answers and closes without waiting for the body
  CHECK(raw.find("100 Continue") == std::string::npos);
  const auto r = parse_reply(raw);
  CHECK(r.status == 401);
  CHECK(json::parse(r.body)["error"]["code"] == "invalid_api_key");

  // With the key, 100 Continue comes and the body is read.
  socket_fd ok{d.port};
  const auto body = completion_body();
  ok.send(post_head(fmt::format("localhost:{}", d.port), "Expect: 100-continue\r\n", body.size())
          + "\r\n");
  std::string got;
  REQUIRE(ok.read_some(got, 20'000));
  CHECK(got.starts_with("HTTP/1.1 100 Continue"));
  ok.send(body);
  while (ok.read_some(got, 20'000)) {
  }
  CHECK(parse_reply(got.substr(got.find("\r\n\r\n") + 4)).status == 200);
}
