#pragma once

// kvlane::daemon::metrics_http — Prometheus metrics over HTTP on loopback.
//
// Serves GET /metrics (text exposition 0.0.4) from the same renderer as the
// admin socket's `metrics` command; anything else gets 404 or 405. Off unless
// [metrics] listen is set; the config only accepts loopback addresses.
//
// Threading: one thread of its own runs the Boost.Asio loop; the render
// function is called there. The destructor stops the loop and joins it.

#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <functional>
#include <memory>
#include <string>

namespace kvlane::daemon {

class metrics_http {
public:
  using renderer = std::function<std::string()>;

  static expected<std::unique_ptr<metrics_http>, std::string> create(const listen_address& where,
                                                                     renderer render);
  ~metrics_http();
  metrics_http(const metrics_http&) = delete;
  metrics_http& operator=(const metrics_http&) = delete;

  /// The bound port (useful when asked for port 0 in tests).
  unsigned short port() const noexcept;

private:
  struct impl;
  explicit metrics_http(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace kvlane::daemon
