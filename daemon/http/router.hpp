#pragma once

// kvlane::daemon::http::router — which handler answers a request.
//
// Maps method and path to the OpenAI, Ollama, tokenizer, embedding and health handlers;
// unknown paths get 404 and known paths with another method 405, in the
// error shape of the path's API. Access checks (API key, CORS) happen before,
// in the connection.
//
// Threading: the HTTP thread only.

#include "daemon/http/errors.hpp"
#include "daemon/http/generation.hpp"
#include "daemon/http/responder.hpp"

#include <boost/beast/http/verb.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

struct identity;
struct service;

struct request_view {
  boost::beast::http::verb method = boost::beast::http::verb::get;
  std::string_view path; ///< without the query string
  std::string_view body;
  const identity* who = nullptr; ///< whom the API key named; never null for a generation
};

/// The error dialect of `path`: Ollama's under /api/, OpenAI's elsewhere.
dialect dialect_of(std::string_view path) noexcept;

/// Whether `path` needs the API key (everything but "/" and "/health").
bool needs_key(std::string_view path) noexcept;

/// Answers `req` through `out`; returns the generation it started, if any.
std::shared_ptr<generation> route(service& svc, const request_view& req,
                                  const std::shared_ptr<responder>& out);

} // namespace kvlane::daemon::http
