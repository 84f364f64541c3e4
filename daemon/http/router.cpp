#include "daemon/http/router.hpp"

#include "daemon/http/embeddings.hpp"
#include "daemon/http/ollama_api.hpp"
#include "daemon/http/openai_api.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/stream_format.hpp"
#include "daemon/http/tokenize_api.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvlane::daemon::http {

namespace {

using verb = boost::beast::http::verb;

void health(service& svc, responder& out) {
  const bool ready = svc.ready && svc.ready();
  response r;
  r.status = ready ? 200 : 503;
  r.body = to_json_text({{"status", ready ? "ok" : "unavailable"}});
  if (!ready)
    r.headers.emplace_back("Retry-After", "5");
  out.respond(std::move(r));
}

void not_found(std::string_view path, responder& out) {
  auto e = invalid("", fmt::format("no such endpoint: {}", path), "not_found");
  e.status = 404;
  out.respond(error_response(e, dialect_of(path)));
}

void wrong_method(std::string_view path, std::string_view allowed, responder& out) {
  auto e = invalid("", fmt::format("{} only accepts {}", path, allowed), "method_not_allowed");
  e.status = 405;
  auto r = error_response(e, dialect_of(path));
  r.headers.emplace_back("Allow", std::string{allowed});
  out.respond(std::move(r));
}

} // namespace

dialect dialect_of(std::string_view path) noexcept {
  return path.starts_with("/api/") ? dialect::ollama : dialect::openai;
}

bool needs_key(std::string_view path) noexcept {
  return path != "/" && path != "/health";
}

std::shared_ptr<generation> route(service& svc, const request_view& req,
                                  const std::shared_ptr<responder>& out) {
  const auto p = req.path;
  const bool get = req.method == verb::get || req.method == verb::head;
  const bool post = req.method == verb::post;

  using post_handler = std::shared_ptr<generation> (*)(service&, std::string_view, const identity&,
                                                       const std::shared_ptr<responder>&);
  struct generating_route {
    std::string_view path;
    post_handler handler;
  };
  static constexpr generating_route generating[] = {
    {"/v1/chat/completions", &openai::chat_completions},
    {"/v1/completions", &openai::completions},
    {"/api/generate", &ollama::generate},
    {"/api/chat", &ollama::chat},
  };
  for (const auto& g : generating) {
    if (p != g.path)
      continue;
    if (!post) {
      wrong_method(p, "POST", *out);
      return nullptr;
    }
    return g.handler(svc, req.body, *req.who, out);
  }

  if (p == "/" || p == "/health" || p == "/v1/models" || p == "/api/version" || p == "/api/tags"
      || p == "/api/ps") {
    if (!get) {
      wrong_method(p, "GET, HEAD", *out);
      return nullptr;
    }
    if (p == "/") {
      response r;
      r.content_type = "text/plain; charset=utf-8";
      r.body = "kvlane is running";
      out->respond(std::move(r));
    } else if (p == "/health") {
      health(svc, *out);
    } else if (p == "/v1/models") {
      openai::list_models(svc, *out);
    } else if (p == "/api/version") {
      ollama::version(*out);
    } else if (p == "/api/tags") {
      ollama::tags(svc, *out);
    } else {
      ollama::ps(svc, *out);
    }
    return nullptr;
  }
  if (p.starts_with("/v1/models/")) {
    if (!get)
      wrong_method(p, "GET, HEAD", *out);
    else
      openai::retrieve_model(svc, p.substr(std::string_view{"/v1/models/"}.size()), *out);
    return nullptr;
  }
  if (p == "/v1/embeddings" || p == "/api/embed" || p == "/api/embeddings") {
    if (!post)
      wrong_method(p, "POST", *out);
    else if (p == "/v1/embeddings")
      openai_embeddings(svc, req.body, *req.who, out);
    else if (p == "/api/embed")
      ollama_embed(svc, req.body, *req.who, out);
    else
      ollama_embeddings(svc, req.body, *req.who, out);
    return nullptr;
  }
  if (p == "/tokenize" || p == "/detokenize" || p == "/api/show") {
    if (!post)
      wrong_method(p, "POST", *out);
    else if (p == "/tokenize")
      tokenize(svc, req.body, out);
    else if (p == "/detokenize")
      detokenize(svc, req.body, out);
    else
      ollama::show(svc, req.body, *out);
    return nullptr;
  }
  not_found(p, *out);
  return nullptr;
}

} // namespace kvlane::daemon::http
