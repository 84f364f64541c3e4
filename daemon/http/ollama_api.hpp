#pragma once

// kvlane::daemon::http::ollama — the Ollama-compatible endpoints.
//
// GET / ("kvlane is running"), /api/version, /api/tags, /api/ps; POST
// /api/generate and /api/chat (NDJSON lines by default, one object with
// stream: false), /api/show. Errors are Ollama's {"error": "..."}.
//
// Threading: the HTTP thread only.

#include "daemon/http/generation.hpp"
#include "daemon/http/responder.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {
struct service;
} // namespace kvlane::daemon::http

namespace kvlane::daemon::http::ollama {

std::shared_ptr<generation> generate(service& svc, std::string_view body, const identity& who,
                                     const std::shared_ptr<responder>& out);
std::shared_ptr<generation> chat(service& svc, std::string_view body, const identity& who,
                                 const std::shared_ptr<responder>& out);
void version(responder& out);
void tags(service& svc, responder& out);
void ps(service& svc, responder& out);
void show(service& svc, std::string_view body, responder& out);

} // namespace kvlane::daemon::http::ollama
