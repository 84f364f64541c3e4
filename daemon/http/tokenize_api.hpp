#pragma once

// kvlane::daemon::http::tokenize_api — llama-server's POST /tokenize and /detokenize.
//
// {"content": "text", "add_special": bool} -> {"tokens": [ids]} (add_special
// prepends the model's BOS); {"tokens": [ids]} -> {"content": "text"}. An
// optional "model" picks the tokenizer (default: the first model).
//
// Threading: called on the HTTP thread; the body is decoded and (de)tokenized
// on the render pool (megabytes take seconds), and the answer goes out through
// `out` on the HTTP thread (nothing if the connection is gone by then).

#include "daemon/http/responder.hpp"

#include <memory>
#include <string_view>

namespace kvlane::daemon::http {

struct service;

void tokenize(service& svc, std::string_view body, const std::shared_ptr<responder>& out);
void detokenize(service& svc, std::string_view body, const std::shared_ptr<responder>& out);

} // namespace kvlane::daemon::http
