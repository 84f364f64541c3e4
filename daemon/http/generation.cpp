#include "daemon/http/generation.hpp"

#include "actors/engine.hpp"
#include "daemon/admission.hpp"
#include "daemon/http/identity.hpp"
#include "daemon/http/post_gate.hpp"
#include "daemon/http/service.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <random>
#include <utility>

namespace kvlane::daemon::http {

/// One request body on the render pool: decoded there, read back on the HTTP
/// thread.
struct generation::decode_job {
  std::string body;
  decoder decode = nullptr;
  identity who;
  std::shared_ptr<std::atomic<bool>> gone;
  std::optional<expected<generation_request, api_error>> request;
};

/// One prompt on the render pool. The pool thread fills `prompt` or `error`
/// and consumes the request's prompt fields; the rest is read back on the
/// HTTP thread. The admission ticket travels with it into the sequence's sink
/// (or is released with the job when nothing is submitted).
struct generation::render_job {
  std::size_t bytes = 0; ///< the input's size, as the pool counts it
  generation_request req;
  std::shared_ptr<backends::backend> backend;
  backends::chat_format format = backends::chat_format::chatml;
  identity who;
  admission_ticket ticket;
  std::shared_ptr<std::atomic<bool>> gone;
  std::string model; ///< the model's name, for errors
  std::vector<backends::token_id> prompt;
  std::shared_ptr<const actors::output_constraint> constraint; ///< null: free text
  std::vector<backends::token_id> banned; ///< never sampled (tool_choice none)
  std::optional<api_error> error;
};

namespace {

/// Where a token's text ends while the UTF-8 decoder still holds its bytes.
constexpr auto unknown_end = ~std::uint64_t{0};

std::string prompt_param_of(const generation_request& req) {
  return req.what == generation_request::kind::chat ? "messages" : "prompt";
}

/// The memory a request's prompt holds before rendering.
std::size_t input_bytes(const generation_request& req) {
  std::size_t n = req.prompt_text.size() + req.system.size()
                  + req.prompt_tokens.size() * sizeof(backends::token_id);
  for (const auto& m : req.messages) {
    n += m.role.size() + m.content.size();
    for (const auto& c : m.tool_calls)
      n += c.name.size() + c.arguments.size();
  }
  for (const auto& t : req.tools.tools)
    n += t.name.size() + t.description.size() + t.parameters.size();
  return n + req.format.schema.size();
}

/// 503: the render pool's queue is full.
api_error overloaded() {
  api_error e;
  e.status = 503;
  e.type = "server_error";
  e.code = "overloaded";
  e.message = "too many requests are waiting to be decoded and tokenized; retry shortly";
  e.retry_after = 1;
  return e;
}

/// Render pool thread: the request in the body.
void decode(generation::decode_job& job) {
  try {
    job.request = job.decode(job.body);
  } catch (const std::exception& e) { // std::bad_alloc; the decoder throws nothing else
    api_error err;
    err.status = 500;
    err.type = "server_error";
    err.code = "decode_failed";
    err.message = fmt::format("the request could not be decoded: {}", e.what());
    job.request = unexpected(std::move(err));
  }
  job.body = {};
}

/// Render pool thread: the prompt's tokens (chat template or plain text).
void render(generation::render_job& job) {
  auto& req = job.req;
  const bool chat = req.what == generation_request::kind::chat;
  try {
    const auto& tok = job.backend->tokens();
    // The output's grammar first: a schema that does not compile is the request's error.
    const auto syntax = backends::tool_syntax_of(job.format, tok);
    auto constraint = build_constraint(req.format, req.tools, job.format, syntax, job.model);
    if (!constraint) {
      job.error = std::move(constraint).error();
      return;
    }
    job.constraint = std::move(*constraint);
    job.banned = none_banned_tokens(req.tools, syntax, tok);
    if (chat || !req.raw_prompt) {
      auto messages = std::move(req.messages);
      if (!chat) {
        if (!req.system.empty())
          messages.push_back({"system", std::move(req.system)});
        messages.push_back({"user", std::move(req.prompt_text)});
      }
      auto rendered = backends::render_chat(job.format, tok, messages, req.tools.tools, true);
      if (!rendered)
        job.error = invalid(prompt_param_of(req), rendered.error().message);
      else
        job.prompt = std::move(*rendered);
    } else if (!req.prompt_tokens.empty()) {
      job.prompt = std::move(req.prompt_tokens);
    } else {
      if (const auto bos = tok.bos())
        job.prompt.push_back(*bos);
      auto body = tok.encode(req.prompt_text);
      job.prompt.insert(job.prompt.end(), body.begin(), body.end());
    }
  } catch (const std::exception& e) { // std::bad_alloc, or a tokenizer's bug
    api_error err;
    err.status = 500;
    err.type = "server_error";
    err.code = "render_failed";
    err.message = fmt::format("the prompt could not be tokenized: {}", e.what());
    job.error = std::move(err);
  }
  // The text goes now: only the tokens wait for the HTTP thread.
  req.messages = {};
  req.prompt_text = {};
  req.system = {};
  req.prompt_tokens = {};
  req.tools.tools = {};
  req.format.schema = {};
}

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

/// 429: `who` is over its admission limit, the daemon over max_live_sequences, or a request
/// refused at the door (its own code).
api_error too_many_requests(std::string message, std::chrono::milliseconds retry) {
  api_error e;
  e.status = 429;
  e.type = "requests";
  e.code = "rate_limit_exceeded";
  e.message = std::move(message);
  e.retry_after = static_cast<unsigned>(std::max<std::int64_t>(1, (retry.count() + 999) / 1000));
  return e;
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
    case actors::submit_errc::busy: // refused at the door: Retry-After is the predicted start
      out = too_many_requests(e.message, std::chrono::milliseconds(e.retry_after_ms));
      out.code = "predicted_wait_too_long";
      break;
  }
  return out;
}

} // namespace

generation::generation(service& svc) : svc_(svc) {}

generation::~generation() {
  gone_->store(true, std::memory_order_relaxed);
  if (!finished_ && seq_ != 0 && !end_sent_)
    svc_.engine->cancel(model_, seq_);
}

expected<std::shared_ptr<generation>, api_error>
generation::start(service& svc, std::string body, decoder decode, const identity& who,
                  preparer prepare) {
  std::shared_ptr<generation> self{new generation(svc)};
  self->prepare_ = std::move(prepare);
  auto job = std::make_shared<decode_job>();
  const auto bytes = body.size();
  job->body = std::move(body);
  job->decode = decode;
  job->who = who;
  job->gone = self->gone_;
  const bool queued = svc.renders().try_submit(
    bytes, [job, gate = svc.gate, weak = self->weak_from_this()] {
      if (job->gone->load(std::memory_order_relaxed))
        return; // the client left while it waited: nothing to do
      http::decode(*job);
      gate->post([job, weak] {
        if (auto g = weak.lock())
          g->on_decoded(*job);
      });
    });
  if (!queued)
    return unexpected(overloaded());
  return self;
}

void generation::on_decoded(decode_job& job) {
  if (abandoned_ || finished_)
    return;
  auto& decoded = *job.request;
  // A bad body, or Ollama's "unload" (an empty request with keep_alive 0) of a
  // model that is not loaded: the API answers without the model.
  const bool unload_only = decoded && decoded->empty() && decoded->keep_alive
                           && !decoded->keep_alive->is_pinned()
                           && decoded->keep_alive->idle().count() == 0
                           && svc_.find_model(decoded->model) == nullptr;
  if (!decoded || unload_only) {
    writer_ = std::move(prepare_)(decoded);
    finished_ = true;
    return;
  }
  with_model(std::move(decoded).value(), job.who);
}

void generation::with_model(generation_request req, const identity& who) {
  const auto keep = req.keep_alive;
  const auto model = req.model;
  const bool loaded = svc_.find_model(model) != nullptr;
  svc_.with_model(model, keep, [weak = weak_from_this(), req = std::move(req), who, loaded,
                                asked = std::chrono::steady_clock::now()](
                                 expected<actors::lease_ptr, api_error> lease) mutable {
    auto g = weak.lock();
    if (!g || g->abandoned_ || g->finished_)
      return; // the client left while its model loaded
    if (!loaded)
      g->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked)
                      .count();
    // The API's writer is made with the model loaded (its tool-call syntax
    // comes from the tokenizer); given the error, it answers it.
    expected<generation_request, api_error> r = std::move(req);
    if (!lease)
      r = unexpected(lease.error());
    auto prepare = std::move(g->prepare_);
    g->writer_ = prepare(r);
    if (!g->writer_) {
      g->finished_ = true; // the API answered it (an error, a load request)
      return;
    }
    g->begin(std::move(*r), who, std::move(*lease));
  });
}

void generation::begin(generation_request req, const identity& who, actors::lease_ptr lease) {
  lease_ = std::move(lease);
  const auto* m = &lease_->model();
  const auto* mc = svc_.find_model_config(req.model);
  // Admitted before any work on the prompt; the ticket goes with the sequence.
  admission_ticket ticket;
  if (svc_.admit) {
    if (auto busy = svc_.admit->admit_request(who.principal, who.max_requests,
                                              fmt::format("HTTP identity '{}'", who.name),
                                              who.limit_key)) {
      fail(too_many_requests(std::move(*busy), svc_.admit->limits().retry_after));
      return;
    }
    ticket = admission_ticket{svc_.admit, who.principal};
  }
  model_ = m->name;
  backend_ = m->backend;
  stops_ = stop_matcher{std::move(req.stop)};
  auto job = std::make_shared<render_job>();
  job->bytes = input_bytes(req);
  job->req = std::move(req);
  job->backend = m->backend;
  job->format = mc->chat_format;
  job->model = m->name;
  job->who = who;
  job->ticket = std::move(ticket);
  job->gone = gone_;
  const bool queued = svc_.renders().try_submit(
    job->bytes, [job, gate = svc_.gate, weak = weak_from_this()] {
      if (job->gone->load(std::memory_order_relaxed))
        return; // the client left while it waited: nothing to do
      render(*job);
      gate->post([job, weak] {
        if (auto g = weak.lock())
          g->on_rendered(*job);
      });
    });
  if (!queued)
    fail(overloaded());
}

void generation::on_rendered(render_job& job) {
  if (abandoned_ || finished_)
    return; // the client left while its prompt rendered: nothing is submitted
  if (job.error) {
    fail(*job.error);
    return;
  }
  auto& req = job.req;
  const auto& who = job.who;
  const std::string prompt_param = prompt_param_of(req);
  auto prompt = std::move(job.prompt);
  const auto* m = &lease_->model();
  const std::uint64_t context = m->info.max_context;
  if (prompt.size() >= context) {
    fail(invalid(prompt_param,
                 fmt::format("the prompt is {} tokens; model '{}' has a context of {} tokens "
                             "(max_context), which must also hold at least one generated token",
                             prompt.size(), m->name, context),
                 "context_length_exceeded"));
    return;
  }
  const std::uint64_t room = context - prompt.size();
  if (req.max_tokens && *req.max_tokens > room) {
    fail(invalid("max_tokens",
                 fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceed the context of "
                             "model '{}' ({} tokens, max_context)",
                             prompt.size(), *req.max_tokens, m->name, context),
                 "context_length_exceeded"));
    return;
  }
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
  sub.sampling.banned_tokens = std::move(job.banned);
  sub.stop_at_eos = true;
  sub.constraint = std::move(job.constraint);
  sub.keep = req.keep_alive;
  prompt_tokens_ = static_cast<std::uint32_t>(prompt.size());
  sub.prompt_tokens = std::move(prompt);

  auto seq = svc_.engine->submit(std::move(sub),
                                 std::make_shared<posting_sink>(svc_.gate, weak_from_this(),
                                                                std::move(job.ticket)));
  lease_.reset(); // the sequence holds the model now
  if (!seq) {
    fail(from_submit_error(seq.error(), prompt_param));
    return;
  }
  seq_ = *seq;
  writer_->on_start();
}

void generation::fail(const api_error& e) {
  finished_ = true;
  lease_.reset();
  if (!abandoned_)
    writer_->on_error(e);
}

void generation::abandon() {
  abandoned_ = true;
  gone_->store(true, std::memory_order_relaxed);
  cancel_sequence();
}

void generation::cancel_sequence() {
  if (end_sent_ || finished_ || seq_ == 0)
    return;
  end_sent_ = true;
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
  const auto& tok = backend_->tokens();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto t = tokens[i];
    ++completion_tokens_;
    if (i < logprobs.size())
      writer_->on_scored_token(score(logprobs[i]));
    const auto bytes = tok.decode(std::span{&t, 1});
    auto text = utf8_.feed(bytes);
    fed_bytes_ += text.size();
    // A token whose bytes the UTF-8 decoder holds (part of a character)
    // ends with the next text that comes out.
    if (!text.empty())
      for (auto it = held_token_ends_.rbegin();
           it != held_token_ends_.rend() && *it == unknown_end; ++it)
        *it = fed_bytes_;
    held_token_ends_.push_back(text.empty() && !bytes.empty() ? unknown_end : fed_bytes_);
    auto r = stops_.feed(text);
    emitted_bytes_ += r.text.size();
    while (!held_token_ends_.empty() && held_token_ends_.front() <= emitted_bytes_) {
      held_token_ends_.pop_front();
      ++released_tokens_;
    }
    emit(std::move(r.text));
    if (r.stopped) {
      stop_matched_ = true;
      // Ends as a stop token would: finished, not cancelled, and the KV of
      // the tokens whose text the client received is kept for the next turn
      // (whose prompt holds that text).
      if (!end_sent_ && seq_ != 0) {
        end_sent_ = true;
        svc_.engine->stop(model_, seq_, completion_tokens_, released_tokens_);
      }
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
  s.load_ms = load_ms_;
  if (!abandoned_)
    writer_->on_finish(s);
}

backends::tool_call_syntax answer_call_syntax(const service& svc, const generation_request& req) {
  if (req.tools.tools.empty() || req.tools.choice.m == tool_choice::mode::none)
    return backends::tool_call_syntax::none;
  const auto* mc = svc.find_model_config(req.model);
  const auto m = svc.find_model(req.model);
  if (mc == nullptr || m == nullptr || !m->backend)
    return backends::tool_call_syntax::none;
  return backends::tool_syntax_of(mc->chat_format, m->backend->tokens());
}

std::shared_ptr<generation> serve(service& svc, std::string_view body, generation::decoder decode,
                                  const identity& who, const std::shared_ptr<responder>& out,
                                  dialect d, writer_factory make) {
  auto g = generation::start(
    svc, std::string{body}, decode, who,
    [&svc, make, weak = std::weak_ptr<responder>{out}](
      expected<generation_request, api_error>& req) -> std::unique_ptr<generation_writer> {
      auto out = weak.lock();
      return out ? make(svc, req, out) : nullptr;
    });
  if (!g) {
    out->respond(error_response(g.error(), d));
    return nullptr;
  }
  return std::move(*g);
}

} // namespace kvlane::daemon::http
