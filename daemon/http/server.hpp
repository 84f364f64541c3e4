#pragma once

// kvlane::daemon::http::server — the HTTP API's listener and event loop.
//
// Problem it solves: existing apps speak OpenAI's or Ollama's HTTP API, not
// kvlane's shared-memory protocol. The server accepts their connections on
// [http] listen and runs every connection on one Boost.Asio thread: idle
// keep-alive connections and open SSE streams cost memory, not threads.
// Requests go straight to the engine in process, with the same priority
// classes, admission and cancellation as IPC clients.
//
// Threading: create() and the destructor run on the owner's thread; the loop
// has a thread of its own. The destructor closes every connection (running
// sequences are cancelled) and joins the thread. The engine must outlive it.

#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <functional>
#include <memory>
#include <string>

namespace kvlane::actors {
class engine;
} // namespace kvlane::actors

namespace kvlane::daemon {
class admission;
} // namespace kvlane::daemon

namespace kvlane::daemon::http {

class server {
public:
  /// Binds and starts serving. `ready` says whether the daemon admits
  /// requests (GET /health); `admit` is the apps' admission ([clients]
  /// limits), which HTTP requests pass too (none: no limits). Errors: a bad listen address, a port in use, an
  /// unreadable or empty api_key_file, a bad tls_cert or tls_key, a plaintext
  /// listener outside loopback without allow_plaintext (the message names the key).
  static expected<std::unique_ptr<server>, std::string>
  create(const http_section& cfg, std::vector<model_section> models, actors::engine& engine,
         std::function<bool()> ready, std::shared_ptr<admission> admit = {});
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port (the configured one, or the one picked for port 0).
  unsigned short port() const noexcept;
  /// "http://127.0.0.1:8471" ("https://..." with TLS)
  std::string url() const;
  /// Connections open now.
  std::uint32_t connections() const noexcept;

private:
  struct impl;
  explicit server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The key in `path`: its first line without surrounding whitespace.
expected<std::string, std::string> read_api_key_file(const std::string& path);

} // namespace kvlane::daemon::http
