// kvlane_test_client: an app for the IPC integration tests, run as its own
// process. Links only the client library.
//
//   kvlane_test_client --socket PATH --client N --mode MODE [--requests K]
//                      [--max-tokens T] [--uid U]
// modes:
//   mixed    submit K requests (ipc_recipe(N, i)) at once, wait for all, print
//            "R <i> <end reason> <tokens,comma,separated> <text as hex>" per request
//   hang     submit K batch requests of T tokens, print STREAMING at the first
//            token, then keep reading until killed
//   connect  connect and print CONNECTED, or ERROR <code> <message> (exit = code)
//   session  one turn of session --session NAME (20 prompt tokens 60..79, 4
//            generated), print "PROMPT_TOKENS <n>": the tokens the daemon submitted
#include "tests/integration/ipc_requests.hpp"

#include <kvlane/client.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace kvlane;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  std::string socket, mode = "mixed", session;
  int client_no = 0, requests = 20, uid = -1;
  std::uint32_t max_tokens = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--socket") socket = argv[i + 1];
    else if (a == "--client") client_no = std::atoi(argv[i + 1]);
    else if (a == "--mode") mode = argv[i + 1];
    else if (a == "--requests") requests = std::atoi(argv[i + 1]);
    else if (a == "--max-tokens") max_tokens = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else if (a == "--uid") uid = std::atoi(argv[i + 1]);
    else if (a == "--session") session = argv[i + 1];
  }
  if (uid >= 0 && (::setgid(static_cast<gid_t>(uid)) != 0 || ::setuid(static_cast<uid_t>(uid)) != 0)) {
    std::printf("ERROR setuid %s\n", std::strerror(errno));
    return 100;
  }
  client::connect_options o;
  o.socket_path = socket;
  o.client_name = "test-client-" + std::to_string(client_no);
  auto conn = client::connect(o);
  if (!conn) {
    std::printf("ERROR %d %s\n", static_cast<int>(conn.error().code), conn.error().message.c_str());
    std::fflush(stdout);
    return static_cast<int>(conn.error().code);
  }
  if (mode == "connect") {
    std::printf("CONNECTED\n");
    return 0;
  }
  if (mode == "session") {
    client::request r;
    r.session = session;
    for (std::uint32_t t = 60; t < 80; ++t)
      r.prompt_tokens.push_back(t);
    r.sampling.max_tokens = 4;
    r.sampling.stop_at_eos = false;
    auto s = (*conn)->submit(r);
    if (!s) {
      std::printf("ERROR submit: %s\n", s.error().message.c_str());
      return 1;
    }
    auto end = (*s)->wait(60s);
    if (!end) {
      std::printf("ERROR wait: %s\n", end.error().message.c_str());
      return 1;
    }
    std::printf("PROMPT_TOKENS %u\n", end->prompt_tokens);
    std::fflush(stdout);
    return 0;
  }
  if (mode == "hang") {
    std::vector<std::shared_ptr<client::stream>> streams;
    for (int i = 0; i < requests; ++i) {
      auto r = test::ipc_recipe(client_no, i, max_tokens);
      r.prio = client::priority::batch;
      r.prompt = "victim request " + std::to_string(i);
      r.prompt_tokens.clear();
      auto s = (*conn)->submit(r);
      if (!s) {
        std::printf("ERROR %s\n", s.error().message.c_str());
        return 1;
      }
      streams.push_back(*s);
    }
    bool announced = false;
    for (;;) {
      for (auto& s : streams) {
        auto c = s->next(1ms);
        if (c && !c->tokens.empty() && !announced) {
          std::printf("STREAMING\n");
          std::fflush(stdout);
          announced = true;
        }
      }
    }
  }
  std::vector<std::shared_ptr<client::stream>> streams;
  for (int i = 0; i < requests; ++i) {
    auto s = (*conn)->submit(test::ipc_recipe(client_no, i, max_tokens));
    if (!s) {
      std::printf("ERROR submit %d: %s\n", i, s.error().message.c_str());
      return 1;
    }
    streams.push_back(*s);
  }
  for (int i = 0; i < requests; ++i) {
    std::string text;
    std::vector<std::uint32_t> tokens;
    auto end = streams[static_cast<std::size_t>(i)]->wait(60s, &text, &tokens);
    if (!end) {
      std::printf("ERROR wait %d: %s\n", i, end.error().message.c_str());
      return 1;
    }
    std::string toks, hex;
    for (auto t : tokens)
      toks += (toks.empty() ? "" : ",") + std::to_string(t);
    char buf[3];
    for (unsigned char ch : text) {
      std::snprintf(buf, sizeof buf, "%02x", ch);
      hex += buf;
    }
    std::printf("R %d %s %s %s\n", i, client::to_string(end->reason), toks.empty() ? "-" : toks.c_str(),
                hex.empty() ? "-" : hex.c_str());
  }
  std::fflush(stdout);
  return 0;
}
