#pragma once

// kvlane::daemon::http::embeddings — POST /v1/embeddings (OpenAI), /api/embed (Ollama) and
// the legacy /api/embeddings.
//
// Problem it solves: embeddings go to the model's backend directly (no sequence, no slot,
// no scheduler), yet must be bounded and fair like generations. A request is:
//  1. decoded on the render pool (embeddings_request);
//  2. on the HTTP thread: its model resolved (404), checked to have the capability (400
//     naming the model and its backend) and the `dimensions` it asks (400), refused while
//     draining or after the model failed (503), and admitted as its identity (429): the
//     ticket counts it among the identity's and the daemon's live requests until its vectors
//     are made;
//  3. tokenized on the render pool (BOS first when the model's tokenizer has one), each input
//     bounded by the model's context (OpenAI: 400; Ollama: cut to it when `truncate`, else
//     400) and all by max_embedding_tokens, then handed to backend::embed(), which answers
//     there (the sim) or on the backend's own worker (llama.cpp);
//  4. the answer is formatted where the vectors were made and posted to the HTTP thread.
// A client that goes away before then has its remaining inputs skipped (the job's
// `cancelled`) and gets nothing.
//
// Threading: the entry points run on the HTTP thread; the rest as above.

#include "daemon/http/responder.hpp"

#include <memory>
#include <string_view>

namespace kvlane::daemon::http {

struct identity;
struct service;

void openai_embeddings(service& svc, std::string_view body, const identity& who,
                       const std::shared_ptr<responder>& out);
void ollama_embed(service& svc, std::string_view body, const identity& who,
                  const std::shared_ptr<responder>& out);
void ollama_embeddings(service& svc, std::string_view body, const identity& who,
                       const std::shared_ptr<responder>& out);

} // namespace kvlane::daemon::http
