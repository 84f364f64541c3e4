// Streams one answer from kvlaned to stdout (C++ API).
//   kvlane-example-cpp ["prompt"]   (socket: $KVLANE_SOCKET or the default)
#include <kvlane/client.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  kvlane::client::connect_options opts;
  opts.client_name = "example-cpp";
  auto conn = kvlane::client::connect(opts);
  if (!conn) {
    std::cerr << "connect: " << conn.error().message << "\n";
    return 1;
  }
  kvlane::client::request req;
  req.prompt = argc > 1 ? argv[1] : "Hello";
  req.sampling.max_tokens = 32;
  auto stream = (*conn)->submit(req);
  if (!stream) {
    std::cerr << "submit: " << stream.error().message << "\n";
    return 1;
  }
  for (;;) {
    auto chunk = (*stream)->next(10s);
    if (!chunk) {
      std::cerr << "\nerror: " << chunk.error().message << "\n";
      return 1;
    }
    std::cout << chunk->text << std::flush;
    if (chunk->end)
      break;
  }
  std::cout << "\n";
  return 0;
}
