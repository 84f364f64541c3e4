// kvlaned serving a GGUF against llama.cpp's own llama-server, built from the same source,
// on the same generated model: the same greedy request (temperature 0) gives the same text
// from both HTTP APIs, for completions and for chat (kvlane's rendering of the GGUF's chat
// template against llama-server's Jinja). Both are real processes driven with curl.
#include "tests/llamacpp/llama_daemon.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>


using namespace std::chrono_literals;
using kvlane::child_process;
using kvlane::test::spawn;
using json = nlohmann::json;

namespace {

/// A port nothing listens on now (bound, read and released).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct http_reply {
  int status = 0;
  std::string body;
};

http_reply post(std::uint16_t port, std::string_view path, const json& body) {
  auto p = spawn("/usr/bin/curl", {"-s", "-m", "120", "-w", "\n%{http_code}", "-H",
                                   "Content-Type: application/json", "-d", body.dump(),
                                   fmt::format("http://127.0.0.1:{}{}", port, path)});
  REQUIRE(p.wait_exit(150s) == 0);
  auto out = p.output();
  const auto nl = out.rfind('\n');
  REQUIRE(nl != std::string::npos);
  return {std::stoi(out.substr(nl + 1)), out.substr(0, nl)};
}

bool healthy(std::uint16_t port) {
  auto p = spawn("/usr/bin/curl", {"-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "5",
                                   fmt::format("http://127.0.0.1:{}/health", port)});
  return p.wait_exit(10s) == 0 && p.output() == "200";
}

struct servers {
  kvlane::test::llama_daemon kvlane;
  std::unique_ptr<child_process> llama;
  std::uint16_t llama_port = 0;

  servers() {
    llama_port = free_port();
    llama = std::make_unique<child_process>(spawn(
      KVLANE_LLAMA_SERVER, {"-m", KVLANE_TEST_GGUF, "--host", "127.0.0.1", "--port",
                            std::to_string(llama_port), "-t", "2", "-tb", "2", "--parallel", "2",
                            "-c", "1024", "-ub", "64", "--jinja", "--no-webui", "--no-warmup"}));
    // llama-server logs "listening on" after its model is loaded and its socket is bound.
    REQUIRE_MESSAGE(llama->wait_for_output("listening on", 120s),
                    "llama-server did not come up: " << llama->output());
    REQUIRE(healthy(llama_port));
  }
};

} // namespace

TEST_CASE("llamacpp parity: greedy completions and chats give llama-server's text, "
          "and kvlane answers every one") {
  if (std::string_view(KVLANE_LLAMA_SERVER).empty()) {
    MESSAGE("SKIPPED: llama-server is not in this build of llama.cpp");
    return;
  }
  servers sut;
  const std::vector<std::string> prompts{
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "In 1969, the first humans",
    "Roses are red, violets are",
    "A list of prime numbers: 2, 3, 5,",
  };
  int compared = 0, llama_failed = 0;
  for (const auto& p : prompts) {
    CAPTURE(p);
    const json body{{"model", "tiny"}, {"prompt", p}, {"max_tokens", 24}, {"temperature", 0}};
    const auto mine = post(sut.kvlane.port, "/v1/completions", body);
    REQUIRE(mine.status == 200); // kvlane never fails an answer because of what the model wrote
    const auto theirs = post(sut.llama_port, "/v1/completions", body);
    if (theirs.status != 200) {
      ++llama_failed;
      MESSAGE("llama-server answered " << theirs.status << ": " << theirs.body.substr(0, 200));
      continue;
    }
    const auto a = json::parse(mine.body)["choices"][0]["text"].get<std::string>();
    const auto b = json::parse(theirs.body)["choices"][0]["text"].get<std::string>();
    CHECK(a == b);
    CHECK_FALSE(a.empty());
    ++compared;
  }
  const std::vector<std::string> questions{"What is the tallest mountain?", "Say hello.",
                                           "Write a haiku about the sea."};
  for (const auto& q : questions) {
    CAPTURE(q);
    const json body{{"model", "tiny"},
                    {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                              {{"role", "user"}, {"content", q}}})},
                    {"max_tokens", 16},
                    {"temperature", 0}};
    const auto mine = post(sut.kvlane.port, "/v1/chat/completions", body);
    REQUIRE(mine.status == 200);
    const auto theirs = post(sut.llama_port, "/v1/chat/completions", body);
    if (theirs.status != 200) {
      ++llama_failed;
      MESSAGE("llama-server answered " << theirs.status << ": " << theirs.body.substr(0, 200));
      continue;
    }
    const auto a = json::parse(mine.body)["choices"][0]["message"]["content"].get<std::string>();
    const auto b = json::parse(theirs.body)["choices"][0]["message"]["content"].get<std::string>();
    CHECK(a == b);
    // The same prompt tokens: the chat template rendered alike.
    CHECK(json::parse(mine.body)["usage"]["prompt_tokens"]
          == json::parse(theirs.body)["usage"]["prompt_tokens"]);
    ++compared;
  }
  MESSAGE("compared " << compared << " answers; llama-server failed " << llama_failed);
  CHECK(compared >= 6);
}
