#pragma once

// kvlane::daemon::http::tokenize_api — llama-server's POST /tokenize and /detokenize.
//
// {"content": "text", "add_special": bool} -> {"tokens": [ids]} (add_special
// prepends the model's BOS); {"tokens": [ids]} -> {"content": "text"}. An
// optional "model" picks the tokenizer (default: the first model).
//
// Threading: the HTTP thread only.

#include "daemon/http/responder.hpp"

#include <string_view>

namespace kvlane::daemon::http {

struct service;

void tokenize(service& svc, std::string_view body, responder& out);
void detokenize(service& svc, std::string_view body, responder& out);

} // namespace kvlane::daemon::http
