#include "daemon/http/tokenize_api.hpp"

#include "actors/engine.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/stream_format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvlane::daemon::http {

namespace {

const actors::model_entry* pick_model(service& svc, const std::string& name, responder& out) {
  const auto* m = name.empty() ? (svc.engine->models().empty() ? nullptr : &svc.engine->models().front())
                               : svc.find_model(name);
  if (m == nullptr) {
    auto e = invalid("model", fmt::format("the model '{}' does not exist", name), "model_not_found");
    e.status = 404;
    out.respond(error_response(e, dialect::openai));
  }
  return m;
}

} // namespace

void tokenize(service& svc, std::string_view body, responder& out) {
  auto req = decode_tokenize(body);
  if (!req) {
    out.respond(error_response(req.error(), dialect::openai));
    return;
  }
  const auto* m = pick_model(svc, req->model, out);
  if (m == nullptr)
    return;
  const auto& tok = m->backend->tokens();
  std::vector<backends::token_id> tokens;
  if (const auto bos = tok.bos(); req->add_special && bos)
    tokens.push_back(*bos);
  auto body_tokens = tok.encode(req->content);
  tokens.insert(tokens.end(), body_tokens.begin(), body_tokens.end());
  out.respond(json_response(to_json_text({{"tokens", tokens}})));
}

void detokenize(service& svc, std::string_view body, responder& out) {
  auto req = decode_detokenize(body);
  if (!req) {
    out.respond(error_response(req.error(), dialect::openai));
    return;
  }
  const auto* m = pick_model(svc, req->model, out);
  if (m == nullptr)
    return;
  for (std::size_t i = 0; i < req->tokens.size(); ++i)
    if (req->tokens[i] >= m->info.vocab_size) {
      out.respond(error_response(
        invalid(fmt::format("tokens[{}]", i),
                fmt::format("token {} is outside the vocabulary of model '{}' (size {})",
                            req->tokens[i], m->name, m->info.vocab_size)),
        dialect::openai));
      return;
    }
  out.respond(json_response(to_json_text({{"content", m->backend->tokens().decode(req->tokens)}})));
}

} // namespace kvlane::daemon::http
