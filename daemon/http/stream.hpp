#pragma once

// kvlane::daemon::http::stream — one accepted connection's byte stream: a TCP
// socket, or TLS over one.
//
// Problem it solves: the connection's HTTP logic (limits, timeouts, keep-alive,
// streaming, cancel on disconnect) is the same over plain TCP and TLS; only
// the bytes' transport differs. This wrapper is an Asio AsyncReadStream and
// AsyncWriteStream over either, so the connection and Beast's parser are
// written once. TLS adds a handshake at the start and a close_notify at the
// end, which are no-ops in plaintext.
//
// Threading: like the socket it wraps: one read and one write outstanding at
// most, all on the connection's executor.

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <variant>

namespace kvlane::daemon::http {

class stream {
public:
  using tcp = boost::asio::ip::tcp;
  using error_code = boost::system::error_code;
  using tls_stream = boost::asio::ssl::stream<tcp::socket>;
  using executor_type = tcp::socket::executor_type;

  /// Plaintext when `tls` is null; otherwise TLS with that (server) context, which must
  /// outlive the stream.
  stream(tcp::socket socket, boost::asio::ssl::context* tls);

  executor_type get_executor() { return socket().get_executor(); }
  /// The TCP socket underneath.
  tcp::socket& socket() noexcept;
  /// Whether TLS is spoken (false again after plaintext_fallback()).
  bool tls() const noexcept { return std::holds_alternative<tls_stream>(s_); }

  template <class MutableBuffers, class Handler>
  auto async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    return boost::asio::async_initiate<Handler, void(error_code, std::size_t)>(
      [this](auto h, const MutableBuffers& b) {
        std::visit([&](auto& s) { s.async_read_some(b, std::move(h)); }, s_);
      },
      handler, buffers);
  }

  template <class ConstBuffers, class Handler>
  auto async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    return boost::asio::async_initiate<Handler, void(error_code, std::size_t)>(
      [this](auto h, const ConstBuffers& b) {
        std::visit([&](auto& s) { s.async_write_some(b, std::move(h)); }, s_);
      },
      handler, buffers);
  }

  /// TLS: the server side of the handshake. Plaintext: completes at once.
  template <class Handler>
  auto async_handshake(Handler&& handler) {
    return boost::asio::async_initiate<Handler, void(error_code)>(
      [this](auto h) {
        if (auto* t = std::get_if<tls_stream>(&s_))
          t->async_handshake(boost::asio::ssl::stream_base::server, std::move(h));
        else
          boost::asio::post(get_executor(), [h = std::move(h)]() mutable { h(error_code{}); });
      },
      handler);
  }

  /// The end of our side. TLS: sends close_notify and waits for the peer's (or its EOF, or
  /// an error: application data after close_notify), then shuts down the TCP send side.
  /// Plaintext: shuts down the send side and completes at once. No read may be pending.
  template <class Handler>
  auto async_end_sending(Handler&& handler) {
    return boost::asio::async_initiate<Handler, void(error_code)>(
      [this](auto h) {
        if (auto* t = std::get_if<tls_stream>(&s_)) {
          t->async_shutdown([this, h = std::move(h)](error_code) mutable {
            error_code ec;
            socket().shutdown(tcp::socket::shutdown_send, ec);
            h(ec);
          });
        } else {
          error_code ec;
          socket().shutdown(tcp::socket::shutdown_send, ec);
          boost::asio::post(get_executor(), [h = std::move(h), ec]() mutable { h(ec); });
        }
      },
      handler);
  }

  /// After a failed handshake: speak plaintext on the same socket, to tell a client that
  /// sent plain HTTP to the TLS port what happened. Nothing may be pending.
  void plaintext_fallback();

  /// Cancels pending operations (their handlers see operation_aborted).
  void cancel() noexcept;
  /// Closes the socket at once (no close_notify).
  void close() noexcept;

private:
  std::variant<tcp::socket, tls_stream> s_;
};

/// Whether a failed TLS handshake saw a plaintext HTTP request (OpenSSL recognises one).
bool plaintext_http_on_tls(const boost::system::error_code& ec) noexcept;

} // namespace kvlane::daemon::http
