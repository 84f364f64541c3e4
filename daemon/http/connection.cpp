#include "daemon/http/connection.hpp"

#include "daemon/http/access.hpp"
#include "daemon/http/router.hpp"
#include "daemon/http/service.hpp"
#include "common/logging.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include <fmt/format.h>

namespace kvlane::daemon::http {

namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;

/// Bytes a client may leave unread before its connection is closed.
constexpr std::size_t max_unsent_bytes = 8u << 20;
/// What one read takes from the socket.
constexpr std::size_t read_chunk = 4096;

std::string_view sv(boost::beast::string_view s) noexcept {
  return {s.data(), s.size()};
}

} // namespace

connection::connection(net::ip::tcp::socket socket, service& svc,
                       const connection_settings& settings,
                       std::shared_ptr<std::atomic<std::uint32_t>> open_count)
  : socket_(std::move(socket)),
    svc_(svc),
    settings_(settings),
    open_count_(std::move(open_count)),
    read_deadline_(socket_.get_executor()),
    write_deadline_(socket_.get_executor()) {
  open_count_->fetch_add(1, std::memory_order_relaxed);
  error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  if (ec)
    peer_ = "unknown";
  else if (ep.address().is_v6())
    peer_ = fmt::format("[{}]:{}", ep.address().to_string(), ep.port());
  else
    peer_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

connection::~connection() {
  if (generation_)
    generation_->abandon();
  open_count_->fetch_sub(1, std::memory_order_relaxed);
}

void connection::start() {
  error_code ec;
  socket_.set_option(net::ip::tcp::no_delay(true), ec);
  wait_for_request();
}

void connection::close() {
  if (phase_ == phase::closed)
    return;
  phase_ = phase::closed;
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  read_deadline_.cancel();
  write_deadline_.cancel();
  if (generation_)
    generation_->abandon();
}

void connection::arm_read_deadline(std::chrono::milliseconds d) {
  read_deadline_.expires_after(d);
  read_deadline_.async_wait([w = weak_from_this()](error_code ec) {
    if (ec)
      return; // re-armed or cancelled
    if (auto self = w.lock())
      self->close();
  });
}

// One read at a time: its completion continues whichever phase the
// connection is in (waiting for a request, or watching the peer during a
// generation).
void connection::wait_for_request() {
  phase_ = phase::waiting;
  if (buffer_.size() != 0) {
    read_header();
    return;
  }
  arm_read_deadline(settings_.limits->idle_timeout);
  watch_peer();
}

void connection::watch_peer() {
  if (reading_ || phase_ == phase::closed)
    return;
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(read_chunk), [self = shared_from_this()](error_code ec,
                                                                                   std::size_t n) {
    self->reading_ = false;
    if (self->phase_ == phase::closed)
      return;
    if (ec) {
      self->on_peer_gone();
      return;
    }
    self->buffer_.commit(n);
    if (self->phase_ == phase::draining) {
      self->buffer_.consume(self->buffer_.size());
      self->watch_peer();
    } else if (self->phase_ == phase::waiting) {
      self->read_header();
    } else if (self->phase_ == phase::handling && self->exchange_active_) {
      // Pipelined bytes of the next request: keep them, keep watching while they are few.
      if (self->buffer_.size() < self->settings_.limits->max_header_bytes)
        self->watch_peer();
    }
  });
}

void connection::on_peer_gone() {
  if (generation_ && !generation_->finished())
    logging::get("http")->debug("{} disconnected; cancelling sequence {}", peer_, generation_->id());
  close();
}

void connection::read_header() {
  phase_ = phase::header;
  parser_.emplace();
  parser_->header_limit(settings_.limits->max_header_bytes);
  parser_->body_limit(settings_.limits->max_body_bytes);
  arm_read_deadline(settings_.limits->header_timeout);
  reading_ = true;
  bhttp::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec,
                                                                                   std::size_t) {
    self->reading_ = false;
    if (self->phase_ == phase::closed)
      return;
    if (ec == bhttp::error::header_limit) {
      self->reject(431, fmt::format("the request's headers exceed {} bytes (max_header_bytes)",
                                    self->settings_.limits->max_header_bytes));
      return;
    }
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof
        || ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      self->close();
      return;
    }
    if (ec) {
      self->reject(400, "malformed HTTP request: " + ec.message());
      return;
    }
    if (self->refuse_before_body())
      return;
    const auto& req = self->parser_->get();
    if (const auto len = self->parser_->content_length();
        len && *len > self->settings_.limits->max_body_bytes) {
      self->reject(413, fmt::format("the request body of {} bytes exceeds {} bytes (max_body_bytes)",
                                    *len, self->settings_.limits->max_body_bytes));
      return;
    }
    if (boost::beast::iequals(req[bhttp::field::expect], "100-continue") && !self->parser_->is_done())
      self->queue("HTTP/1.1 100 Continue\r\n\r\n");
    self->read_body();
  });
}

void connection::read_body() {
  phase_ = phase::body;
  if (parser_->is_done()) {
    read_deadline_.cancel();
    handle();
    return;
  }
  arm_read_deadline(settings_.limits->idle_timeout);
  reading_ = true;
  bhttp::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec,
                                                                            std::size_t) {
    self->reading_ = false;
    if (self->phase_ == phase::closed)
      return;
    if (ec == bhttp::error::body_limit) {
      self->reject(413, fmt::format("the request body exceeds {} bytes (max_body_bytes)",
                                    self->settings_.limits->max_body_bytes));
      return;
    }
    if (ec) {
      self->close();
      return;
    }
    self->read_deadline_.cancel();
    self->handle();
  });
}

void connection::handle() {
  phase_ = phase::handling;
  exchange_active_ = true;
  streaming_ = false;
  generation_.reset();
  const auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  http10_ = req.version() < 11;
  head_only_ = req.method() == bhttp::verb::head;
  const std::string_view target = sv(req.target());
  const auto path = target.substr(0, target.find('?'));

  cors_.clear();
  const auto origin = allowed_origin(sv(req[bhttp::field::origin]), settings_.limits->cors_origins);
  if (origin) {
    cors_.emplace_back("Access-Control-Allow-Origin", *origin);
    cors_.emplace_back("Vary", "Origin");
  }
  if (req.method() == bhttp::verb::options) {
    if (!origin) {
      auto e = invalid("", "CORS: this origin is not in [http] cors_origins", "cors_forbidden");
      e.status = 403;
      respond(error_response(e, dialect_of(path)));
      return;
    }
    response r;
    r.status = 204;
    r.content_type.clear();
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const auto asked = sv(req[bhttp::field::access_control_request_headers]);
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           valid_header_list(asked) && !asked.empty() ? std::string{asked}
                                                                      : "authorization, content-type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    respond(std::move(r));
    return;
  }
  request_view view;
  view.method = req.method();
  view.path = path;
  view.body = req.body();
  view.who = who_;
  auto g = route(svc_, view, shared_from_this());
  if (exchange_active_ && g) {
    generation_ = std::move(g);
    watch_peer(); // a disconnect now cancels the sequence
  }
}

std::string connection::head(unsigned status, std::string_view content_type,
                             std::optional<std::size_t> length, bool chunked) const {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\nServer: kvlaned\r\n", status,
                              sv(bhttp::obsolete_reason(bhttp::int_to_status(status))));
  if (!content_type.empty())
    h += fmt::format("Content-Type: {}\r\n", content_type);
  if (length)
    h += fmt::format("Content-Length: {}\r\n", *length);
  if (chunked)
    h += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive_)
    h += "Connection: close\r\n";
  else if (http10_)
    h += "Connection: keep-alive\r\n";
  for (const auto& [k, v] : cors_)
    h += fmt::format("{}: {}\r\n", k, v);
  return h;
}

void connection::respond(response r) {
  if (phase_ == phase::closed || !exchange_active_ || streaming_)
    return;
  auto text = head(r.status, r.content_type,
                   r.status == 204 ? std::nullopt : std::optional<std::size_t>{r.body.size()}, false);
  for (const auto& [k, v] : r.headers)
    text += fmt::format("{}: {}\r\n", k, v);
  text += "\r\n";
  if (!head_only_)
    text += r.body;
  queue(std::move(text));
  exchange_done();
}

void connection::stream_begin(std::string content_type) {
  if (phase_ == phase::closed || !exchange_active_ || streaming_)
    return;
  streaming_ = true;
  chunked_ = !http10_;
  if (http10_)
    keep_alive_ = false; // the end of the body is the end of the connection
  auto text = head(200, content_type, std::nullopt, chunked_);
  text += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n";
  queue(std::move(text));
}

void connection::stream_write(std::string data) {
  if (phase_ == phase::closed || !streaming_ || data.empty())
    return;
  if (chunked_)
    data = fmt::format("{:x}\r\n", data.size()) + data + "\r\n";
  queue(std::move(data));
}

void connection::stream_end() {
  if (phase_ == phase::closed || !streaming_)
    return;
  if (chunked_)
    queue("0\r\n\r\n");
  streaming_ = false;
  exchange_done();
}

void connection::exchange_done() {
  exchange_active_ = false;
  // after_exchange() runs from the write completion: every answer queued bytes.
}

void connection::after_exchange() {
  parser_.reset();
  generation_.reset();
  if (!keep_alive_) {
    linger_close();
    return;
  }
  wait_for_request();
}

// Closing with unread request bytes in the kernel would send a reset, which
// can destroy the response before the client reads it (a 413 or 431 on a
// large request). So: end our side, read and drop what the client still
// sends, and close on its EOF or after a short grace.
void connection::linger_close() {
  phase_ = phase::draining;
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) {
    close();
    return;
  }
  arm_read_deadline(std::min<std::chrono::milliseconds>(settings_.limits->idle_timeout,
                                                        std::chrono::seconds(2)));
  watch_peer();
}

bool connection::refuse_before_body() {
  const auto& req = parser_->get();
  const std::string_view target = sv(req.target());
  const auto path = target.substr(0, target.find('?'));
  auto refuse = [&](unsigned status, std::string message, std::string code) {
    phase_ = phase::handling;
    exchange_active_ = true;
    streaming_ = false;
    keep_alive_ = false; // the body, if any, is never read
    http10_ = req.version() < 11;
    head_only_ = req.method() == bhttp::verb::head;
    cors_.clear();
    auto e = invalid("", std::move(message), std::move(code));
    e.status = status;
    respond(error_response(e, dialect_of(path)));
    return true;
  };
  if (!host_allowed(sv(req[bhttp::field::host]), settings_.listen_host,
                    settings_.limits->allowed_hosts))
    return refuse(403,
                  "the Host header names another server: add the name to [http] allowed_hosts "
                  "to serve it",
                  "host_forbidden");
  // A request a browser sends from a page: only from an allowed origin, on every endpoint,
  // so a page elsewhere cannot make the daemon work even without reading the answer.
  const auto origin = sv(req[bhttp::field::origin]);
  if (!origin.empty() && !allowed_origin(origin, settings_.limits->cors_origins))
    return refuse(403, "CORS: this origin is not in [http] cors_origins", "cors_forbidden");
  who_ = settings_.keys.authenticate(sv(req[bhttp::field::authorization]));
  if (who_ == nullptr && req.method() != bhttp::verb::options && needs_key(path))
    return refuse(401, "missing or incorrect API key: send it as 'Authorization: Bearer KEY'",
                  "invalid_api_key");
  return false;
}

void connection::reject(unsigned status, std::string message) {
  phase_ = phase::handling;
  exchange_active_ = true;
  streaming_ = false;
  keep_alive_ = false;
  head_only_ = false;
  cors_.clear();
  auto e = invalid("", std::move(message));
  e.status = status;
  respond(error_response(e, dialect::openai));
}

void connection::queue(std::string bytes) {
  if (phase_ == phase::closed)
    return;
  std::size_t unsent = bytes.size();
  for (const auto& b : out_)
    unsent += b.size();
  if (unsent > max_unsent_bytes) {
    logging::get("http")->warn("{} stopped reading its response ({} bytes unsent); closing", peer_,
                               unsent);
    on_peer_gone();
    return;
  }
  out_.push_back(std::move(bytes));
  if (!writing_)
    write_next();
}

void connection::write_next() {
  // Everything queued goes out in one write: a step's tokens for many events.
  auto batch = std::make_shared<std::string>();
  for (auto& b : out_)
    *batch += b;
  out_.clear();
  writing_ = true;
  write_deadline_.expires_after(settings_.limits->idle_timeout);
  write_deadline_.async_wait([w = weak_from_this()](error_code ec) {
    if (ec)
      return;
    if (auto self = w.lock())
      self->on_peer_gone(); // the client stopped reading
  });
  net::async_write(socket_, net::buffer(*batch), [self = shared_from_this(), batch](error_code ec,
                                                                                    std::size_t) {
    self->writing_ = false;
    self->write_deadline_.cancel();
    if (self->phase_ == phase::closed)
      return;
    if (ec) {
      self->on_peer_gone();
      return;
    }
    if (!self->out_.empty())
      self->write_next();
    else if (!self->exchange_active_ && self->phase_ == phase::handling)
      self->after_exchange();
  });
}

} // namespace kvlane::daemon::http
