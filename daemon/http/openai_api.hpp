#pragma once

// kvlane::daemon::http::openai — the OpenAI-compatible endpoints.
//
// POST /v1/chat/completions and /v1/completions (one JSON body, or SSE
// `data:` chunks ending with `data: [DONE]` when stream is true), GET
// /v1/models and /v1/models/{id}. Responses carry OpenAI's fields plus a
// `kvlane` object with the request's timings.
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

namespace kvlane::daemon::http::openai {

/// Starts the request (nullptr when it was answered at once, e.g. with an error).
std::shared_ptr<generation> chat_completions(service& svc, std::string_view body,
                                             const identity& who,
                                             const std::shared_ptr<responder>& out);
std::shared_ptr<generation> completions(service& svc, std::string_view body, const identity& who,
                                        const std::shared_ptr<responder>& out);
void list_models(service& svc, responder& out);
void retrieve_model(service& svc, std::string_view id, responder& out);

} // namespace kvlane::daemon::http::openai
