#include "daemon/http/server.hpp"

#include "actors/engine.hpp"
#include "daemon/http/connection.hpp"
#include "daemon/http/connection_limits.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/tls_context.hpp"
#include "common/logging.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

namespace kvlane::daemon::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

// Declared so that the loop (and the handlers it still holds) goes before
// what connections use: svc, settings, cfg, tls.
struct server::impl {
  http_section cfg;
  connection_settings settings;
  service svc;
  std::unique_ptr<net::ssl::context> tls; ///< null: plaintext
  std::shared_ptr<connection_limits> limits;
  std::vector<std::weak_ptr<connection>> connections;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer retry{ioc};
  std::uint64_t accept_errors = 0;
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open())
        return; // stopping
      if (ec) {
        // Out of file descriptors, say: retry later instead of spinning on the error.
        if (accept_errors++ % 100 == 0)
          logging::get("http")->warn("accepting a connection failed: {}; retrying in 100 ms",
                                     ec.message());
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](error_code wait_ec) {
          if (!wait_ec && acceptor.is_open())
            accept();
        });
        return;
      }
      const auto peer = socket.remote_endpoint(ec);
      auto admission = ec ? connection_limits::admission{} : limits->admit(peer.address());
      if (admission.what == connection_limits::verdict::close) {
        // Over max_connections (or the peer gone already): close at once; the client sees
        // a reset, not a hang.
        socket.close(ec);
      } else {
        std::erase_if(connections, [](const auto& w) { return w.expired(); });
        auto c = std::make_shared<connection>(
          std::move(socket), tls.get(), svc, settings, std::move(admission.place),
          admission.what == connection_limits::verdict::refuse);
        connections.push_back(c);
        c->start();
      }
      accept();
    });
  }
};

expected<std::string, std::string> read_api_key_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    return unexpected(fmt::format("http.api_key_file: cannot read '{}': {}", path,
                                  std::strerror(errno)));
  std::string line;
  std::getline(in, line);
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos)
    return unexpected(fmt::format("http.api_key_file: '{}' holds no key on its first line", path));
  return line.substr(first, last - first + 1);
}

expected<std::unique_ptr<server>, std::string>
server::create(const http_section& cfg, std::vector<model_section> models, actors::engine& engine,
               std::function<bool()> ready, std::shared_ptr<admission> admit) {
  const auto where = parse_http_listen(cfg.listen);
  if (!where)
    return unexpected(fmt::format("http.listen: not an address and port: '{}'", cfg.listen));
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->settings.limits = &p->cfg;
  std::string api_key = cfg.api_key;
  p->settings.listen_host = where->host;
  if (!cfg.api_key_file.empty()) {
    auto key = read_api_key_file(cfg.api_key_file);
    if (!key)
      return unexpected(std::move(key).error());
    api_key = std::move(*key);
  }
  auto keys = key_ring::create(std::move(api_key), cfg.keys);
  if (!keys)
    return unexpected(std::move(keys).error());
  p->settings.keys = std::move(*keys);
  if (!where->loopback && !p->settings.keys.keyed())
    return unexpected(fmt::format("http.api_key: required when listening on {} (not loopback)",
                                  cfg.listen));
  if (!cfg.tls_cert.empty()) {
    auto tls = make_tls_context(cfg.tls_cert, cfg.tls_key);
    if (!tls)
      return unexpected(std::move(tls).error());
    p->tls = std::move(*tls);
  } else if (!where->loopback && !cfg.allow_plaintext) {
    return unexpected(fmt::format("http.allow_plaintext: listening on {} (not loopback) without "
                                  "tls_cert and tls_key would send the API key and prompts in "
                                  "clear text; set them, or allow_plaintext = true",
                                  cfg.listen));
  }
  p->limits = std::make_shared<connection_limits>(cfg.max_connections,
                                                  cfg.max_connections_per_peer);
  p->svc.engine = &engine;
  p->svc.models = std::move(models);
  p->svc.ready = std::move(ready);
  p->svc.admit = std::move(admit);
  p->svc.gate = std::make_shared<post_gate>(p->ioc.get_executor());

  error_code ec;
  const auto address = net::ip::make_address(where->host, ec);
  if (ec)
    return unexpected(fmt::format("http.listen {}: {}", cfg.listen, ec.message()));
  const tcp::endpoint ep{address, where->port};
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return unexpected(fmt::format("HTTP API on {}: {}", cfg.listen, ec.message()));
  p->accept();
  auto* raw = p.get();
  p->thread = std::thread{[raw] { raw->ioc.run(); }};
  return std::unique_ptr<server>{new server(std::move(p))};
}

server::server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

server::~server() {
  // No engine callback reaches the loop from here on. Then close the acceptor
  // and every connection on the loop's thread: their pending operations end,
  // and the loop runs out of work.
  impl_->svc.gate->close();
  std::promise<void> closed;
  net::post(impl_->ioc, [this, &closed] {
    error_code ec;
    impl_->acceptor.close(ec);
    impl_->retry.cancel();
    for (auto& w : impl_->connections)
      if (auto c = w.lock())
        c->close();
    closed.set_value();
  });
  closed.get_future().wait();
  impl_->thread.join();
}

unsigned short server::port() const noexcept {
  error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

std::string server::url() const {
  const auto where = parse_http_listen(impl_->cfg.listen);
  const auto host = where ? where->host : std::string{"127.0.0.1"};
  const std::string_view scheme = impl_->tls ? "https" : "http";
  if (host.find(':') != std::string::npos)
    return fmt::format("{}://[{}]:{}", scheme, host, port());
  return fmt::format("{}://{}:{}", scheme, host, port());
}

std::uint32_t server::connections() const noexcept {
  return impl_->limits->open();
}

} // namespace kvlane::daemon::http
