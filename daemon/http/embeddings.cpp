#include "daemon/http/embeddings.hpp"

#include "actors/engine.hpp"
#include "common/logging.hpp"
#include "daemon/admission.hpp"
#include "daemon/http/embeddings_request.hpp"
#include "daemon/http/embeddings_response.hpp"
#include "daemon/http/identity.hpp"
#include "daemon/http/post_gate.hpp"
#include "daemon/http/service.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

namespace kvlane::daemon::http {

namespace {

using clock = std::chrono::steady_clock;
using decoder = expected<embedding_request, api_error> (*)(std::string_view);

/// One request across its stages (embeddings.hpp). Shared by the jobs of each stage; the
/// HTTP thread and one pool or worker thread at a time touch it, never both at once.
struct embed_call {
  embed_call(service& s, embedding_api a, const identity& w, const std::shared_ptr<responder>& o)
    : svc(s), api(a), who(w), out(o), gate(s.gate) {}

  service& svc; ///< HTTP thread and render pool only (the server outlives both)
  const embedding_api api;
  const identity who;
  const std::weak_ptr<responder> out; ///< expired once the connection is gone
  const std::shared_ptr<post_gate> gate;
  const clock::time_point started = clock::now();
  std::string body;                                          ///< stage 1
  std::optional<expected<embedding_request, api_error>> req; ///< stages 1 to 3
  std::shared_ptr<backends::backend> backend;                ///< stages 2 and 3
  actors::lease_ptr lease; ///< keeps the model loaded from stage 2 to the answer
  std::string model;   ///< the model's name as the request gave it (the answers echo it)
  std::uint32_t context = 0; ///< tokens one input may hold
  admission_ticket ticket; ///< from admission until the answer is posted
};
using call_ptr = std::shared_ptr<embed_call>;

dialect dialect_of(embedding_api api) {
  return api == embedding_api::openai ? dialect::openai : dialect::ollama;
}

/// 503: the render pool's queue (or the backend's) is full.
api_error overloaded(std::string message) {
  api_error e;
  e.status = 503;
  e.type = "server_error";
  e.code = "overloaded";
  e.message = std::move(message);
  e.retry_after = 1;
  return e;
}

api_error render_queue_full() {
  return overloaded("too many requests are waiting to be decoded and tokenized; retry shortly");
}

api_error server_error(std::string code, std::string message) {
  api_error e;
  e.status = 500;
  e.type = "server_error";
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

/// Answers `call` with `r` on the HTTP thread (from any thread); nothing if it is gone.
void answer(const call_ptr& call, response r) {
  call->gate->post([call, r = std::move(r)]() mutable {
    call->ticket.release();
    if (auto out = call->out.lock())
      out->respond(std::move(r));
  });
}

void answer_error(const call_ptr& call, const api_error& e) {
  answer(call, error_response(e, dialect_of(call->api)));
}

std::string loaded_models(const service& svc) {
  return svc.model_names();
}

/// The parameter an input's error names: OpenAI's and Ollama's `input` (`input[i]` in an
/// array), the legacy `prompt`.
std::string input_param(const embedding_request& req, std::size_t i) {
  if (req.api == embedding_api::ollama_legacy)
    return "prompt";
  return req.listed ? fmt::format("input[{}]", i) : "input";
}

/// The answer to embeddings `e` of `tokens` prompt tokens, in the call's API.
std::string render_answer(const embed_call& call, const backends::embeddings& e, std::uint64_t tokens) {
  switch (call.api) {
    case embedding_api::openai:
      return render_openai_embeddings(e, call.req->value().base64, call.model, tokens);
    case embedding_api::ollama: {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - call.started);
      return render_ollama_embed(e, call.model, tokens, ns.count());
    }
    case embedding_api::ollama_legacy: return render_ollama_embedding(e);
  }
  return {};
}

/// The backend's answer, on the thread that made it.
void on_embedded(const call_ptr& call, expected<backends::embeddings, backends::backend_error> result,
                 std::size_t inputs, std::uint64_t tokens) {
  if (call->out.expired())
    return; // the client went away (the job may have ended early for it)
  if (!result) {
    const auto& err = result.error();
    switch (err.code) {
      case backends::backend_errc::invalid_argument: answer_error(call, invalid("input", err.message)); break;
      case backends::backend_errc::out_of_memory:
        answer_error(call, overloaded(err.message + "; retry shortly"));
        break;
      default: answer_error(call, server_error("embedding_failed", err.message)); break;
    }
    return;
  }
  const auto ms = std::chrono::duration<double, std::milli>(clock::now() - call->started).count();
  logging::get("http")->debug("embeddings for {}: model {}, {} input(s), {} token(s), {:.1f} ms",
                              call->who.client, call->model, inputs, tokens, ms);
  answer(call, json_response(render_answer(*call, *result, tokens)));
}

/// Render pool, stage 3: the inputs' tokens, bounded; then the backend.
void tokenize_and_embed(const call_ptr& call) {
  auto backend = std::move(call->backend); // the job's callbacks must not own the backend
  auto& req = call->req->value();
  const auto& tok = backend->tokens();
  const auto& info = backend->info();
  const auto count = req.texts.empty() ? req.token_inputs.size() : req.texts.size();
  std::vector<std::vector<backends::token_id>> inputs;
  inputs.reserve(count);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<backends::token_id> tokens;
    if (req.texts.empty()) {
      tokens = std::move(req.token_inputs[i]);
      for (std::size_t k = 0; k < tokens.size(); ++k)
        if (tokens[k] >= info.vocab_size) {
          answer_error(call, invalid(fmt::format("{}[{}]", input_param(req, i), k),
                                     fmt::format("token {} is outside the vocabulary of model '{}' "
                                                 "(size {})",
                                                 tokens[k], info.model, info.vocab_size)));
          return;
        }
    } else {
      if (const auto bos = tok.bos())
        tokens.push_back(*bos);
      auto body = tok.encode(req.texts[i]);
      tokens.insert(tokens.end(), body.begin(), body.end());
      req.texts[i] = {};
    }
    if (tokens.size() > call->context) {
      if (req.api != embedding_api::openai && req.truncate) {
        tokens.resize(call->context); // Ollama keeps the start of an input over the context
      } else {
        auto e = invalid(input_param(req, i),
                         fmt::format("{} is {} tokens; model '{}' embeds at most {} tokens per "
                                     "input ({}){}",
                                     input_param(req, i), tokens.size(), info.model,
                                     call->context,
                                     call->context < info.max_context ? "options.num_ctx"
                                                                      : "its max_context",
                                     req.api == embedding_api::openai ? ""
                                                                      : "; truncate is false"),
                         "context_length_exceeded");
        answer_error(call, e);
        return;
      }
    }
    total += tokens.size();
    if (total > max_embedding_tokens) {
      answer_error(call, invalid("input", fmt::format("the inputs are over {} tokens in all; send "
                                                      "fewer per request",
                                                      max_embedding_tokens)));
      return;
    }
    inputs.push_back(std::move(tokens));
  }
  req.texts = {};
  req.token_inputs = {};

  backends::embedding_job job;
  job.inputs = std::move(inputs);
  job.cancelled = [out = call->out] { return out.expired(); };
  job.done = [call, count, total](expected<backends::embeddings, backends::backend_error> result) {
    try {
      on_embedded(call, std::move(result), count, total);
    } catch (const std::exception& e) { // std::bad_alloc while formatting
      answer_error(call, server_error("embedding_failed",
                                      fmt::format("the answer could not be written: {}", e.what())));
    }
  };
  backend->embed(std::move(job));
}

/// HTTP thread, stage 2: the decoded request resolved, checked and admitted.
void admit(const call_ptr& call) {
  auto out = call->out.lock();
  if (!out)
    return;
  const auto d = dialect_of(call->api);
  auto& decoded = *call->req;
  if (!decoded) {
    out->respond(error_response(decoded.error(), d));
    return;
  }
  auto& req = *decoded;
  auto& svc = call->svc;
  if (svc.find_model_config(req.model) == nullptr) {
    auto e = invalid("model",
                     call->api == embedding_api::openai
                       ? fmt::format("the model '{}' does not exist (configured: {})", req.model,
                                     loaded_models(svc))
                       : fmt::format("model '{}' not found", req.model),
                     "model_not_found");
    e.status = 404;
    out->respond(error_response(e, d));
    return;
  }
  if (!call->lease) { // the model loads first (if it is not loaded), then this stage again
    svc.with_model(req.model, req.keep_alive, [call](expected<actors::lease_ptr, api_error> lease) {
      if (!lease) {
        answer_error(call, lease.error());
        return;
      }
      call->lease = std::move(*lease);
      admit(call);
    });
    return;
  }
  const auto* m = &call->lease->model();
  const auto dim = m->info.caps.embedding_dimension;
  if (dim == 0) {
    out->respond(error_response(
      invalid("model", fmt::format("model '{}' (backend {}) cannot produce embeddings", m->name,
                                   m->info.kind),
              "model_not_supported"),
      d));
    return;
  }
  if (req.dimensions && *req.dimensions != dim) {
    out->respond(error_response(
      unsupported("dimensions", fmt::format("model '{}' produces {}-dimensional embeddings and "
                                            "cannot make them shorter or longer; leave "
                                            "'dimensions' out or set it to {}",
                                            m->name, dim, dim)),
      d));
    return;
  }
  call->model = req.model;
  if (req.texts.empty() && req.token_inputs.empty()) { // Ollama's way of loading a model
    out->respond(json_response(render_answer(*call, backends::embeddings{dim, {}}, 0)));
    return;
  }
  const bool failed = m->health && m->health->failed();
  if (!svc.engine->admitting() || failed) {
    api_error e;
    e.status = 503;
    e.type = "server_error";
    if (failed) {
      e.code = std::string{actors::to_string(actors::submit_errc::model_failed)};
      e.message = fmt::format("model '{}' failed: {}", m->name, m->health->reason());
      e.retry_after = 10;
    } else {
      e.code = std::string{actors::to_string(actors::submit_errc::draining)};
      e.message = "the daemon is draining: it takes no new requests";
      e.retry_after = 5;
    }
    out->respond(error_response(e, d));
    return;
  }
  if (svc.admit) {
    const auto& who = call->who;
    if (auto busy = svc.admit->admit_request(who.principal, who.max_requests,
                                             fmt::format("HTTP identity '{}'", who.name),
                                             who.limit_key)) {
      api_error e;
      e.status = 429;
      e.type = "requests";
      e.code = "rate_limit_exceeded";
      e.message = std::move(*busy);
      const auto retry = svc.admit->limits().retry_after;
      e.retry_after = static_cast<unsigned>(std::max<std::int64_t>(1, (retry.count() + 999) / 1000));
      out->respond(error_response(e, d));
      return;
    }
    call->ticket = admission_ticket{svc.admit, who.principal};
  }
  call->backend = m->backend;
  call->context = m->info.max_context;
  if (req.num_ctx)
    call->context = std::min(call->context, *req.num_ctx);
  std::size_t bytes = req.token_inputs.size() * sizeof(backends::token_id);
  for (const auto& t : req.texts)
    bytes += t.size();
  for (const auto& t : req.token_inputs)
    bytes += t.size() * sizeof(backends::token_id);
  const bool queued = svc.renders().try_submit(bytes, [call] {
    if (call->out.expired())
      return; // the client left while it waited
    try {
      tokenize_and_embed(call);
    } catch (const std::exception& e) { // std::bad_alloc, or a tokenizer's bug
      answer_error(call, server_error("render_failed",
                                      fmt::format("the inputs could not be tokenized: {}", e.what())));
    }
  });
  if (!queued) {
    call->ticket.release();
    call->backend.reset();
    out->respond(error_response(render_queue_full(), d));
  }
}

/// HTTP thread, stage 1: the body to the render pool.
void start(service& svc, std::string_view body, const identity& who,
           const std::shared_ptr<responder>& out, embedding_api api, decoder decode) {
  auto call = std::make_shared<embed_call>(svc, api, who, out);
  call->body = std::string{body};
  const bool queued = svc.renders().try_submit(body.size(), [call, decode] {
    if (call->out.expired())
      return;
    try {
      call->req = decode(call->body);
    } catch (const std::exception& e) { // std::bad_alloc; the decoder throws nothing else
      call->req = unexpected(server_error(
        "decode_failed", fmt::format("the request could not be decoded: {}", e.what())));
    }
    call->body = {};
    call->gate->post([call] { admit(call); });
  });
  if (!queued)
    out->respond(error_response(render_queue_full(), dialect_of(api)));
}

} // namespace

void openai_embeddings(service& svc, std::string_view body, const identity& who,
                       const std::shared_ptr<responder>& out) {
  start(svc, body, who, out, embedding_api::openai, &decode_openai_embeddings);
}

void ollama_embed(service& svc, std::string_view body, const identity& who,
                  const std::shared_ptr<responder>& out) {
  start(svc, body, who, out, embedding_api::ollama, &decode_ollama_embed);
}

void ollama_embeddings(service& svc, std::string_view body, const identity& who,
                       const std::shared_ptr<responder>& out) {
  start(svc, body, who, out, embedding_api::ollama_legacy, &decode_ollama_embeddings);
}

} // namespace kvlane::daemon::http
