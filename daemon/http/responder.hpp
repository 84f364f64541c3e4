#pragma once

// kvlane::daemon::http::responder — how a handler answers one HTTP request.
//
// The connection implements it. A handler calls exactly one of respond() or
// stream_begin() followed by any number of stream_write() and one
// stream_end(), possibly later (from the HTTP thread, when the engine has
// produced tokens). Calls after the client went away are ignored.
//
// Threading: the HTTP thread only.

#include "daemon/http/errors.hpp"

#include <string>
#include <utility>
#include <vector>

namespace kvlane::daemon::http {

struct response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers; ///< extra headers
};

/// The response for `e` in the API's error shape (Retry-After on 503s).
response error_response(const api_error& e, dialect d);
/// A 200 JSON response.
response json_response(std::string body);

class responder {
public:
  virtual ~responder() = default;
  virtual void respond(response r) = 0;
  /// A 200 whose body follows in pieces (chunked, or until close for HTTP/1.0).
  virtual void stream_begin(std::string content_type) = 0;
  virtual void stream_write(std::string data) = 0;
  virtual void stream_end() = 0;
};

} // namespace kvlane::daemon::http
