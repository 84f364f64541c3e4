#include "daemon/http/tokenize_api.hpp"

#include "actors/engine.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/stream_format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <exception>
#include <memory>

namespace kvlane::daemon::http {

namespace {

/// The named model, or the first, loaded first if it is not (this runs on a
/// render thread, which may wait for it); nullptr after answering 404 or 503.
std::shared_ptr<const actors::model_entry> pick_model(service& svc, const std::string& name,
                                                      responder& out) {
  const auto& wanted = name.empty() && !svc.models.empty() ? svc.models.front().name : name;
  if (svc.find_model_config(wanted) == nullptr) {
    auto e = invalid("model", fmt::format("the model '{}' does not exist", name), "model_not_found");
    e.status = 404;
    out.respond(error_response(e, dialect::openai));
    return nullptr;
  }
  auto m = svc.find_model(wanted);
  while (m == nullptr) { // (unloaded again right after this load: load again)
    const auto config_name = svc.find_model_config(wanted)->name;
    if (auto loaded = svc.engine->load(config_name, std::nullopt); !loaded) {
      api_error e;
      e.status = 503;
      e.type = "server_error";
      e.code = "model_not_loaded";
      e.message = loaded.error();
      out.respond(error_response(e, dialect::openai));
      return nullptr;
    }
    m = svc.find_model(wanted);
  }
  return m;
}

void tokenize_now(service& svc, std::string_view body, responder& out) {
  auto req = decode_tokenize(body);
  if (!req) {
    out.respond(error_response(req.error(), dialect::openai));
    return;
  }
  const auto m = pick_model(svc, req->model, out);
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

void detokenize_now(service& svc, std::string_view body, responder& out) {
  auto req = decode_detokenize(body);
  if (!req) {
    out.respond(error_response(req.error(), dialect::openai));
    return;
  }
  const auto m = pick_model(svc, req->model, out);
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

/// Keeps what a handler answers on a render thread, for the HTTP thread.
class held_response final : public responder {
public:
  void respond(response r) override { r_ = std::move(r); }
  // Not used by these handlers: they answer with one response.
  void stream_begin(std::string) override {}
  void stream_write(std::string) override {}
  void stream_end() override {}
  response take() { return std::move(r_); }

private:
  response r_;
};

/// Runs `handler` on the render pool and answers through `out` on the HTTP thread.
void off_thread(service& svc, std::string_view body, const std::shared_ptr<responder>& out,
                void (*handler)(service&, std::string_view, responder&)) {
  auto held = std::make_shared<held_response>();
  const bool queued = svc.renders().try_submit(
    body.size(), [&svc, handler, held, text = std::string{body}, gate = svc.gate,
                  weak = std::weak_ptr<responder>{out}] {
      if (weak.expired())
        return; // the connection is gone
      try {
        handler(svc, text, *held);
      } catch (const std::exception& e) { // std::bad_alloc
        api_error err;
        err.status = 500;
        err.type = "server_error";
        err.message = e.what();
        held->respond(error_response(err, dialect::openai));
      }
      gate->post([held, weak] {
        if (auto o = weak.lock())
          o->respond(held->take());
      });
    });
  if (!queued) {
    api_error e;
    e.status = 503;
    e.type = "server_error";
    e.code = "overloaded";
    e.message = "too many requests are waiting to be decoded and tokenized; retry shortly";
    e.retry_after = 1;
    out->respond(error_response(e, dialect::openai));
  }
}

} // namespace

void tokenize(service& svc, std::string_view body, const std::shared_ptr<responder>& out) {
  off_thread(svc, body, out, &tokenize_now);
}

void detokenize(service& svc, std::string_view body, const std::shared_ptr<responder>& out) {
  off_thread(svc, body, out, &detokenize_now);
}

} // namespace kvlane::daemon::http
