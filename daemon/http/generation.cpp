#include "daemon/http/generation.hpp"

#include "actors/engine.hpp"
#include "daemon/admission.hpp"
#include "daemon/http/identity.hpp"
#include "daemon/http/post_gate.hpp"
#include "daemon/http/service.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <utility>

namespace kvlane::daemon::http {

namespace {

/// Moves the engine's callbacks (CAF worker threads) onto the HTTP thread.
class posting_sink final : public actors::stream_sink {
public:
  posting_sink(std::shared_ptr<post_gate> gate, std::weak_ptr<generation> g,
               admission_ticket ticket)
    : gate_(std::move(gate)), g_(std::move(g)), ticket_(std::move(ticket)) {}

  void on_logprobs(std::span<const actors::token_logprobs> logprobs) override {
    logprobs_.assign(logprobs.begin(), logprobs.end());
  }

  void on_tokens(std::span<const actors::token_id> tokens) override {
    gate_->post([g = g_, v = std::vector<actors::token_id>(tokens.begin(), tokens.end()),
                 lp = std::exchange(logprobs_, {})] {
      if (auto p = g.lock())
        p->on_tokens(v, lp);
    });
  }

  void on_end(const actors::stream_end& end) override {
    ticket_.release(); // the sequence has left the engine
    gate_->post([g = g_, end] {
      if (auto p = g.lock())
        p->on_end(end);
    });
  }

private:
  std::shared_ptr<post_gate> gate_;
  std::weak_ptr<generation> g_;
  admission_ticket ticket_; ///< counts the sequence while the engine holds this sink
  // on_logprobs() comes just before the on_tokens() of the same tokens (one
  // session thread at a time); they are posted together.
  std::vector<actors::token_logprobs> logprobs_;
};

std::uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

api_error from_submit_error(const actors::submit_error& e, std::string_view prompt_param) {
  api_error out;
  out.message = e.message;
  switch (e.code) {
    case actors::submit_errc::unknown_model:
      out.status = 404;
      out.param = "model";
      out.code = "model_not_found";
      break;
    case actors::submit_errc::invalid_request: break;
    case actors::submit_errc::too_long:
      out.param = std::string{prompt_param};
      out.code = "context_length_exceeded";
      break;
    case actors::submit_errc::draining:
    case actors::submit_errc::shutting_down:
      out.status = 503;
      out.type = "server_error";
      out.code = std::string{actors::to_string(e.code)};
      out.retry_after = 5;
      break;
    case actors::submit_errc::model_failed: // the daemon exits 70 and systemd restarts it
      out.status = 503;
      out.type = "server_error";
      out.code = std::string{actors::to_string(e.code)};
      out.retry_after = 10;
      break;
  }
  return out;
}

/// 429: `who` is over its admission limit, or the daemon over max_live_sequences.
api_error too_many_requests(std::string message, std::chrono::milliseconds retry) {
  api_error e;
  e.status = 429;
  e.type = "requests";
  e.code = "rate_limit_exceeded";
  e.message = std::move(message);
  e.retry_after = static_cast<unsigned>(std::max<std::int64_t>(1, (retry.count() + 999) / 1000));
  return e;
}

std::string loaded_models(const actors::engine& eng) {
  std::string out;
  for (const auto& m : eng.models())
    out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

} // namespace

generation::generation(service& svc, std::string model, std::shared_ptr<backends::backend> backend,
                       std::vector<std::string> stops, std::unique_ptr<generation_writer> writer)
  : svc_(svc),
    model_(std::move(model)),
    backend_(std::move(backend)),
    writer_(std::move(writer)),
    stops_(std::move(stops)) {}

generation::~generation() {
  if (!finished_ && seq_ != 0 && !cancel_sent_)
    svc_.engine->cancel(model_, seq_);
}

expected<std::shared_ptr<generation>, api_error>
generation::start(service& svc, generation_request req, const identity& who,
                  std::unique_ptr<generation_writer> writer) {
  const bool chat = req.what == generation_request::kind::chat;
  const std::string prompt_param = chat ? "messages" : "prompt";
  const auto* m = svc.find_model(req.model);
  const auto* mc = svc.find_model_config(req.model);
  if (m == nullptr || mc == nullptr) {
    auto e = invalid("model",
                     fmt::format("the model '{}' does not exist (loaded: {})", req.model,
                                 loaded_models(*svc.engine)),
                     "model_not_found");
    e.status = 404;
    return unexpected(std::move(e));
  }
  // Admitted before any work on the prompt; the ticket goes with the sequence.
  admission_ticket ticket;
  if (svc.admit) {
    if (auto busy = svc.admit->admit_request(who.principal, who.max_requests,
                                             fmt::format("HTTP identity '{}'", who.name),
                                             who.limit_key))
      return unexpected(too_many_requests(std::move(*busy), svc.admit->limits().retry_after));
    ticket = admission_ticket{svc.admit, who.principal};
  }
  const auto& tok = m->backend->tokens();

  std::vector<backends::token_id> prompt;
  if (chat || !req.raw_prompt) {
    auto messages = std::move(req.messages);
    if (!chat) {
      if (!req.system.empty())
        messages.push_back({"system", std::move(req.system)});
      messages.push_back({"user", std::move(req.prompt_text)});
    }
    auto rendered = backends::render_chat(mc->chat_format, tok, messages, true);
    if (!rendered)
      return unexpected(invalid(prompt_param, rendered.error().message));
    prompt = std::move(*rendered);
  } else if (!req.prompt_tokens.empty()) {
    prompt = std::move(req.prompt_tokens);
  } else {
    if (const auto bos = tok.bos())
      prompt.push_back(*bos);
    auto body = tok.encode(req.prompt_text);
    prompt.insert(prompt.end(), body.begin(), body.end());
  }

  const std::uint64_t context = m->info.max_context;
  if (prompt.size() >= context)
    return unexpected(invalid(prompt_param,
                              fmt::format("the prompt is {} tokens; model '{}' has a context of {} "
                                          "tokens (max_context), which must also hold at least one "
                                          "generated token",
                                          prompt.size(), m->name, context),
                              "context_length_exceeded"));
  const std::uint64_t room = context - prompt.size();
  if (req.max_tokens && *req.max_tokens > room)
    return unexpected(invalid("max_tokens",
                              fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceed the "
                                          "context of model '{}' ({} tokens, max_context)",
                                          prompt.size(), *req.max_tokens, m->name, context),
                              "context_length_exceeded"));

  actors::submit_request sub;
  sub.model = m->name;
  // The identity (docs/http.md, "Identities") is the reuse scope, the round-robin unit and
  // the class cap; a session name only shows in ps.
  sub.owner = who.owner;
  sub.client = req.session.empty() ? who.client : who.client + "/" + req.session;
  sub.fairness_unit = who.client;
  sub.priority = who.batch_only ? actors::priority_class::batch : req.priority;
  sub.sampling.temperature = req.temperature;
  sub.sampling.top_k = req.top_k;
  sub.sampling.top_p = req.top_p;
  sub.sampling.seed = req.seed ? *req.seed : random_seed();
  sub.sampling.max_tokens = static_cast<std::uint32_t>(req.max_tokens ? *req.max_tokens : room);
  sub.sampling.presence_penalty = req.presence_penalty;
  sub.sampling.frequency_penalty = req.frequency_penalty;
  sub.sampling.logprobs = req.logprobs;
  sub.sampling.top_logprobs = req.top_logprobs;
  sub.stop_at_eos = true;
  const auto prompt_size = static_cast<std::uint32_t>(prompt.size());
  sub.prompt_tokens = std::move(prompt);

  std::shared_ptr<generation> self{
    new generation(svc, m->name, m->backend, std::move(req.stop), std::move(writer))};
  self->prompt_tokens_ = prompt_size;
  auto seq = svc.engine->submit(std::move(sub),
                                std::make_shared<posting_sink>(svc.gate, self->weak_from_this(),
                                                               std::move(ticket)));
  if (!seq)
    return unexpected(from_submit_error(seq.error(), prompt_param));
  self->seq_ = *seq;
  return self;
}

void generation::abandon() {
  abandoned_ = true;
  stop_sequence();
}

void generation::stop_sequence() {
  if (cancel_sent_ || finished_ || seq_ == 0)
    return;
  cancel_sent_ = true;
  svc_.engine->cancel(model_, seq_);
}

void generation::emit(std::string text) {
  if (!text.empty() && !abandoned_)
    writer_->on_text(text);
}

scored_token generation::score(const actors::token_logprobs& lp) const {
  const auto& tok = backend_->tokens();
  const auto choice = [&](const actors::token_logprob& c) {
    return token_choice{tok.decode(std::span{&c.token, 1}), c.logprob};
  };
  scored_token out;
  out.chosen = choice(lp.chosen);
  for (const auto& c : lp.alternatives())
    out.top.push_back(choice(c));
  return out;
}

void generation::on_tokens(const std::vector<backends::token_id>& tokens,
                           const std::vector<actors::token_logprobs>& logprobs) {
  if (finished_ || stop_matched_ || abandoned_)
    return;
  if (!first_token_)
    first_token_ = std::chrono::steady_clock::now();
  const auto& tok = backend_->tokens();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t = tokens[i];
    ++completion_tokens_;
    if (i < logprobs.size())
      writer_->on_scored_token(score(logprobs[i]));
    auto r = stops_.feed(utf8_.feed(tok.decode(std::span{&t, 1})));
    emit(std::move(r.text));
    if (r.stopped) {
      stop_matched_ = true;
      stop_sequence();
      return;
    }
  }
}

void generation::on_end(const actors::stream_end& end) {
  if (finished_)
    return;
  if (!stop_matched_) {
    auto r = stops_.feed(utf8_.flush());
    emit(std::move(r.text));
    stop_matched_ = r.stopped;
    emit(stops_.flush());
  }
  finished_ = true;
  generation_summary s;
  if (stop_matched_) {
    s.finish_reason = "stop";
    s.completion_tokens = completion_tokens_;
  } else {
    s.finish_reason = std::string{actors::to_string(end.reason)};
    s.completion_tokens = end.generated_tokens;
    if (end.reason == actors::end_reason::error)
      s.error = end.message;
  }
  s.prompt_tokens = prompt_tokens_;
  s.ttft_ms = end.ttft_ms;
  s.total_ms = end.e2e_ms;
  s.preemptions = end.preemptions;
  s.cached_tokens = end.cached_tokens;
  if (!abandoned_)
    writer_->on_finish(s);
}

} // namespace kvlane::daemon::http
