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

#include <limits>

namespace kvlane::daemon::http {

namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;

/// Bytes a client may leave unread before its connection is closed: checked before
/// each new write is queued, so one response of any size still goes out whole.
constexpr std::size_t max_unsent_bytes = 8u << 20;
/// A write buffer kept between writes up to this capacity; a larger one is freed.
constexpr std::size_t kept_write_capacity = 64u << 10;
/// What one read takes from the socket.
constexpr std::size_t read_chunk = 4096;

std::string_view sv(boost::beast::string_view s) noexcept {
  return {s.data(), s.size()};
}

} // namespace

connection::connection(net::ip::tcp::socket socket, net::ssl::context* tls, service& svc,
                       const connection_settings& settings, connection_limits::ticket place,
                       bool refuse)
  : stream_(std::move(socket), tls),
    svc_(svc),
    settings_(settings),
    place_(std::move(place)),
    refuse_(refuse),
    read_deadline_(stream_.get_executor()),
    write_deadline_(stream_.get_executor()) {
  error_code ec;
  const auto ep = stream_.socket().remote_endpoint(ec);
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
}

void connection::start() {
  error_code ec;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);
  if (!stream_.tls()) {
    wait_for_request();
    return;
  }
  // The handshake is the request's start: it must finish within header_timeout.
  phase_ = phase::header;
  arm_read_deadline(settings_.limits->header_timeout);
  reading_ = true;
  stream_.async_handshake([self = shared_from_this()](error_code hs) {
    self->reading_ = false;
    self->on_handshake(hs);
  });
}

void connection::on_handshake(const error_code& ec) {
  if (phase_ == phase::closed)
    return;
  if (!ec) {
    wait_for_request();
    return;
  }
  if (plaintext_http_on_tls(ec)) {
    // curl http://host:port against the TLS port: say so, in plaintext, instead of a reset.
    stream_.plaintext_fallback();
    reject(400, "this port speaks HTTPS (TLS): use an https:// URL");
    return;
  }
  logging::get("http")->debug("{}: TLS handshake failed: {}", peer_, ec.message());
  stream_.plaintext_fallback(); // nothing more to say over TLS: end with a plain FIN
  linger_close();
}

void connection::close() {
  if (phase_ == phase::closed)
    return;
  phase_ = phase::closed;
  stream_.close();
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
  // A refused connection gets header_timeout for all of its request's headers.
  arm_read_deadline(refuse_ ? settings_.limits->header_timeout : settings_.limits->idle_timeout);
  watch_peer();
}

void connection::watch_peer() {
  if (reading_ || phase_ == phase::closed)
    return;
  reading_ = true;
  stream_.async_read_some(buffer_.prepare(read_chunk), [self = shared_from_this()](error_code ec,
                                                                                   std::size_t n) {
    self->reading_ = false;
    if (self->phase_ == phase::closed)
      return;
    if (self->phase_ == phase::draining) {
      // linger_close() cancelled this read (or it raced with it): the drain goes on.
      self->drain();
      return;
    }
    if (ec) {
      self->on_peer_gone();
      return;
    }
    self->buffer_.commit(n);
    if (self->phase_ == phase::waiting) {
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
  // No body limit yet: Beast would fail the header read on a Content-Length over it, which
  // must be a 413, and only after the checks of refuse_before_body(). (Not boost::none:
  // Beast 1.74 compares a Content-Length against it as a value and fails every body.)
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!refuse_)
    arm_read_deadline(settings_.limits->header_timeout); // a refused one's runs on
  reading_ = true;
  bhttp::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec,
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
    self->parser_->body_limit(self->settings_.limits->max_body_bytes); // chunked: as it arrives
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
  bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec,
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
  if (exchange_active_) {
    // The answer comes later (a generation, or a render-pool job): the
    // pending read keeps the connection alive, and a disconnect now cancels
    // the sequence.
    generation_ = std::move(g);
    watch_peer();
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
// large request). So: end our side (TLS: close_notify first), read and drop
// what the client still sends, and close on its EOF or after a short grace.
void connection::linger_close() {
  phase_ = phase::draining;
  arm_read_deadline(std::min<std::chrono::milliseconds>(settings_.limits->idle_timeout,
                                                        std::chrono::seconds(2)));
  if (reading_) {
    // The read that watched for a disconnect: its completion continues in drain(), so
    // that close_notify never runs beside another read of the TLS stream.
    stream_.cancel();
    return;
  }
  drain();
}

void connection::drain() {
  if (phase_ != phase::draining || reading_)
    return;
  if (!ending_) {
    ending_ = true;
    reading_ = true; // TLS: close_notify reads the peer's answer
    stream_.async_end_sending([self = shared_from_this()](error_code) {
      self->reading_ = false;
      self->drain();
    });
    return;
  }
  // Our side is ended: what still arrives is read raw and dropped, until EOF.
  reading_ = true;
  stream_.socket().async_read_some(
    buffer_.prepare(read_chunk), [self = shared_from_this()](error_code ec, std::size_t) {
      self->reading_ = false;
      if (self->phase_ == phase::closed)
        return;
      if (ec) {
        self->close();
        return;
      }
      self->drain();
    });
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
    if (status == 503) {
      e.type = "server_error";
      e.retry_after = 1;
    }
    respond(error_response(e, dialect_of(path)));
    return true;
  };
  if (refuse_)
    return refuse(503,
                  fmt::format("this address has {} connections open, the most one address may have "
                              "([http] max_connections_per_peer): retry once one of them closes",
                              settings_.limits->max_connections_per_peer),
                  "too_many_connections");
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
  if (phase_ == phase::closed || bytes.empty())
    return;
  // What the client has not read of the earlier writes: a reader that falls this far
  // behind a stream is not keeping up. The new bytes are not counted, so one response of
  // any size is queued whole; the write deadline drops a reader that stops reading it.
  if (unsent_ > max_unsent_bytes) {
    logging::get("http")->warn("{} is not reading its response ({} bytes unsent); closing", peer_,
                               unsent_);
    on_peer_gone();
    return;
  }
  unsent_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (!write_pending_)
    write_next();
}

void connection::write_next() {
  if (writing_.size() == written_) {
    // Everything queued goes out in one write: a step's tokens for many events.
    written_ = 0;
    if (writing_.capacity() > kept_write_capacity || out_.size() == 1) {
      writing_ = std::move(out_.front());
      out_.pop_front();
    } else {
      writing_.clear();
    }
    for (auto& b : out_)
      writing_ += b;
    out_.clear();
  }
  write_pending_ = true;
  arm_write_deadline();
  stream_.async_write_some(
    net::buffer(writing_.data() + written_, writing_.size() - written_),
    [self = shared_from_this()](error_code ec, std::size_t n) {
      self->write_pending_ = false;
      if (self->phase_ == phase::closed)
        return;
      if (ec) {
        self->on_peer_gone();
        return;
      }
      self->written_ += n;
      self->unsent_ -= n;
      if (self->unsent_ != 0) {
        self->write_next();
        return;
      }
      self->written_ = 0;
      if (self->writing_.capacity() > kept_write_capacity)
        std::string{}.swap(self->writing_);
      else
        self->writing_.clear();
      if (!self->exchange_active_ && self->phase_ == phase::handling)
        self->after_exchange();
    });
}

// One timer for all the writes in flight, however many partial writes they take: it
// fires idle_timeout after the last progress, never while the reader keeps reading.
void connection::arm_write_deadline() {
  write_progress_ = std::chrono::steady_clock::now();
  if (!write_deadline_armed_)
    wait_write_deadline(write_progress_ + settings_.limits->idle_timeout);
}

void connection::wait_write_deadline(std::chrono::steady_clock::time_point at) {
  write_deadline_armed_ = true;
  write_deadline_.expires_at(at);
  write_deadline_.async_wait([w = weak_from_this()](error_code ec) {
    auto self = w.lock();
    if (!self)
      return;
    self->write_deadline_armed_ = false;
    if (ec || self->phase_ == phase::closed || !self->write_pending_)
      return;
    const auto idle = self->settings_.limits->idle_timeout;
    if (std::chrono::steady_clock::now() - self->write_progress_ >= idle) {
      logging::get("http")->debug("{} read nothing of its response for {} ms ({} bytes unsent); "
                                  "closing",
                                  self->peer_, idle.count(), self->unsent_);
      self->on_peer_gone(); // the client stopped reading
      return;
    }
    self->wait_write_deadline(self->write_progress_ + idle);
  });
}

} // namespace kvlane::daemon::http
