#include "daemon/metrics_http.hpp"

#include "common/logging.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <thread>

namespace kvlane::daemon {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// One connection: read requests, answer each, until the peer closes or idles.
class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket socket, const metrics_http::renderer& render)
    : stream_(std::move(socket)), render_(render) {}

  void start() { read(); }

private:
  void read() {
    request_ = {};
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec)
                         self->respond();
                     });
  }

  void respond() {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(request_.version());
    res->keep_alive(request_.keep_alive());
    res->set(http::field::server, "kvlaned");
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      res->result(http::status::method_not_allowed);
      res->set(http::field::allow, "GET, HEAD");
      res->body() = "only GET /metrics is served\n";
    } else if (request_.target() != "/metrics") {
      res->result(http::status::not_found);
      res->body() = "not found: try /metrics\n";
    } else {
      res->result(http::status::ok);
      res->set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      try {
        res->body() = render_();
      } catch (const std::exception& e) {
        res->result(http::status::internal_server_error);
        res->body() = std::string{"metrics unavailable: "} + e.what() + "\n";
      }
    }
    if (request_.method() == http::verb::head) {
      res->content_length(res->body().size());
      res->body().clear();
    }
    res->prepare_payload();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (!ec && res->keep_alive())
                          self->read();
                        else
                          self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
                      });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  const metrics_http::renderer& render_;
};

} // namespace

struct metrics_http::impl {
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  renderer render;
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec)
        return; // closed: shutting down
      std::make_shared<http_session>(std::move(socket), render)->start();
      accept();
    });
  }
};

expected<std::unique_ptr<metrics_http>, std::string> metrics_http::create(const listen_address& where,
                                                                          renderer render) {
  auto p = std::make_unique<impl>();
  p->render = std::move(render);
  beast::error_code ec;
  auto address = net::ip::make_address(where.host, ec);
  if (ec)
    return unexpected(fmt::format("metrics listen address {}: {}", where.host, ec.message()));
  tcp::endpoint ep{address, where.port};
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return unexpected(fmt::format("metrics HTTP on {}:{}: {}", where.host, where.port, ec.message()));
  p->accept();
  auto* raw = p.get();
  p->thread = std::thread{[raw] { raw->ioc.run(); }};
  return std::unique_ptr<metrics_http>{new metrics_http(std::move(p))};
}

metrics_http::metrics_http(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

metrics_http::~metrics_http() {
  impl_->ioc.stop();
  impl_->thread.join();
}

unsigned short metrics_http::port() const noexcept {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

} // namespace kvlane::daemon
