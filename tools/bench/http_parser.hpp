#pragma once

// kvlane::tools::bench — http_parser: an HTTP/1.1 response, read incrementally.
//
// Problem it solves: the HTTP driver races servers that frame their responses
// differently — kvlaned streams with chunked transfer encoding, llama-server
// answers errors with a Content-Length body and may close the connection to end
// a body — and it must see every body byte the moment it arrives (a stream's
// first token is timed on it). The parser takes bytes as they come off the
// socket, in pieces of any size, and hands body bytes to a sink at once:
// Content-Length bodies, chunked bodies (extensions and trailers skipped) and
// bodies that end when the connection closes. It also says whether the
// connection may carry another request (keep-alive).
//
// Threading: a value; one thread at a time.

#include "common/expected.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::tools::bench {

/// How a response's body is delimited.
enum class http_body_kind : std::uint8_t { none, length, chunked, until_close };

/// A response's status line and headers.
struct http_head {
  int status = 0;
  std::string reason;
  int minor_version = 1; ///< HTTP/1.x
  std::vector<std::pair<std::string, std::string>> headers; ///< names as sent
  http_body_kind body = http_body_kind::none;
  std::uint64_t content_length = 0; ///< with http_body_kind::length

  /// The first header named `name` (case-insensitive), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
  /// The connection may carry another request once the body has been read.
  bool keep_alive() const;
};

class http_response_parser {
public:
  using body_sink = std::function<void(std::string_view)>;

  /// `head_only`: the response to a HEAD request (no body whatever the headers say).
  explicit http_response_parser(bool head_only = false) noexcept : head_only_(head_only) {}

  /// Consumes `data`; body bytes go to `sink` as they are parsed. Fails on a
  /// malformed status line, header or chunk (the message says which). Bytes
  /// after the end of the response are left unconsumed: `data.size() -
  /// consumed()` of this call's input (a server sends nothing unasked on HTTP/1.1).
  expected<void, std::string> feed(std::string_view data, const body_sink& sink);

  /// The connection closed: completes a body read until close; fails when the
  /// response was cut short (no head yet, or a body shorter than announced).
  expected<void, std::string> finish();

  bool head_done() const noexcept { return state_ > state::head; }
  bool done() const noexcept { return state_ == state::done; }
  const http_head& head() const noexcept { return head_; }
  /// Bytes of the last feed() that belong to this response.
  std::size_t consumed() const noexcept { return consumed_; }
  /// Body bytes seen so far (after chunk framing is removed).
  std::uint64_t body_bytes() const noexcept { return body_bytes_; }

private:
  enum class state : std::uint8_t { head, body, chunk_size, chunk_data, chunk_end, trailers, done };

  expected<void, std::string> parse_head(std::string_view text);
  void begin_body();

  bool head_only_;
  state state_ = state::head;
  http_head head_;
  std::string line_;              ///< a partial head, chunk-size line or trailer
  std::uint64_t remaining_ = 0;   ///< bytes left in a length body or the current chunk
  std::uint64_t body_bytes_ = 0;
  std::size_t consumed_ = 0;
};

} // namespace kvlane::tools::bench
