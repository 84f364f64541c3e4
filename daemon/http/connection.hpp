#pragma once

// kvlane::daemon::http::connection — one HTTP/1.1 client connection.
//
// Reads requests one at a time (keep-alive; pipelined bytes wait in the
// buffer) under the configured limits: an idle connection is closed after
// idle_timeout; once a request starts, its headers must arrive within
// header_timeout (slowloris) and fit max_header_bytes (431); a body over
// max_body_bytes gets 413. It checks the API key and CORS, hands the request
// to the router and writes the answer: one response, or a chunked stream
// (SSE, NDJSON). While a generation runs it keeps a read pending, so a client
// that disconnects — mid-prefill or mid-stream — has its sequence cancelled at
// once. A client that stops reading cannot hold the connection: a write that
// makes no progress within idle_timeout closes it, and so does a stream whose
// reader falls more than 8 MiB behind; a single response of any size is
// delivered to a reader that keeps reading. Over TLS it first runs the
// handshake (within header_timeout) and ends with close_notify; a plaintext
// request sent to a TLS listener gets a plaintext 400 saying so. A connection
// admitted only to be refused (its peer is over max_connections_per_peer)
// reads the request's headers and answers 503.
//
// Ownership and threading: owned by shared_ptrs held by its own pending
// operations (and weakly by the server); everything runs on the HTTP thread.

#include "daemon/config.hpp"
#include "daemon/http/connection_limits.hpp"
#include "daemon/http/errors.hpp"
#include "daemon/http/generation.hpp"
#include "daemon/http/identity.hpp"
#include "daemon/http/responder.hpp"
#include "daemon/http/stream.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>

namespace kvlane::daemon::http {

struct service;

struct connection_settings {
  const http_section* limits = nullptr;
  key_ring keys; ///< the API keys and the identities they name
  std::string listen_host; ///< the host of [http] listen, e.g. "192.168.1.10"
};

class connection final : public responder, public std::enable_shared_from_this<connection> {
public:
  /// Plaintext when `tls` is null. `place` holds the connection's place in the limits;
  /// with `refuse`, the connection answers its first request 503 (its peer is over
  /// max_connections_per_peer) and closes.
  connection(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls, service& svc,
             const connection_settings& settings, connection_limits::ticket place, bool refuse);
  ~connection() override;

  void start();
  /// Closes the socket now; a running generation is cancelled.
  void close();

  // responder
  void respond(response r) override;
  void stream_begin(std::string content_type) override;
  void stream_write(std::string data) override;
  void stream_end() override;

private:
  enum class phase { waiting, header, body, handling, draining, closed };

  void on_handshake(const boost::system::error_code& ec);
  void wait_for_request();
  void read_header();
  void read_body();
  void handle();
  void watch_peer();
  void on_peer_gone();
  void exchange_done();
  void after_exchange();
  void linger_close();
  void drain();
  void queue(std::string bytes);
  void write_next();
  void arm_read_deadline(std::chrono::milliseconds d);
  void reject(unsigned status, std::string message);
  /// Host, Origin and API key, checked from the headers before any body byte is read or
  /// 100 Continue sent: answers 403 or 401 (closing the connection) and returns true.
  bool refuse_before_body();
  std::string head(unsigned status, std::string_view content_type,
                   std::optional<std::size_t> length, bool chunked) const;

  void arm_write_deadline();
  void wait_write_deadline(std::chrono::steady_clock::time_point at);

  stream stream_;
  service& svc_;
  const connection_settings& settings_;
  connection_limits::ticket place_;
  const bool refuse_;
  std::string peer_;
  boost::asio::steady_timer read_deadline_;
  boost::asio::steady_timer write_deadline_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  phase phase_ = phase::waiting;
  bool reading_ = false;       ///< a read on the socket is pending
  bool exchange_active_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool http10_ = false;
  std::vector<std::pair<std::string, std::string>> cors_;
  std::shared_ptr<generation> generation_;
  const identity* who_ = nullptr; ///< whom the request's API key names (settings_.keys)
  std::deque<std::string> out_;  ///< queued, not yet being written
  std::string writing_;          ///< being written: its bytes from written_ on are unsent
  std::size_t written_ = 0;
  std::size_t unsent_ = 0;       ///< the bytes of out_ and of writing_ not yet sent
  bool write_pending_ = false;   ///< an async write is in flight
  bool write_deadline_armed_ = false;
  std::chrono::steady_clock::time_point write_progress_; ///< the last write completion
  bool ending_ = false;          ///< draining: close_notify / shutdown started
};

} // namespace kvlane::daemon::http
