// client_session: a complete submit from the app's ring to the engine —
// admission, a session's turn tokenized here with its model's tokenizer (the
// turn waits while that model loads), the engine's submit, and the sink that
// turns the engine's tokens and end into ring records.

#include "daemon/client_session.hpp"

#include "actors/engine.hpp"
#include "ipc/utf8.hpp"

#include <algorithm>
#include <ctime>

namespace kvlane::daemon {

namespace proto = ipc::proto;

namespace {

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull
         + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t to_us(double ms) {
  return ms > 0 && std::isfinite(ms) ? static_cast<std::uint64_t>(std::llround(ms * 1000.0)) : 0;
}

proto::errc to_wire(actors::submit_errc e) {
  switch (e) {
    case actors::submit_errc::unknown_model: return proto::errc::unknown_model;
    case actors::submit_errc::invalid_request: return proto::errc::invalid_request;
    case actors::submit_errc::too_long: return proto::errc::too_long;
    case actors::submit_errc::draining:
    case actors::submit_errc::shutting_down: return proto::errc::shutting_down;
    case actors::submit_errc::model_failed: return proto::errc::model_failed;
    case actors::submit_errc::busy: return proto::errc::busy;
  }
  return proto::errc::internal;
}

proto::end_reason to_wire(actors::end_reason r) {
  switch (r) {
    case actors::end_reason::length: return proto::end_reason::length;
    case actors::end_reason::stop: return proto::end_reason::stop;
    case actors::end_reason::cancelled: return proto::end_reason::cancelled;
    case actors::end_reason::error: return proto::end_reason::error;
  }
  return proto::end_reason::error;
}


proto::errc to_wire(session_errc e) {
  switch (e) {
    case session_errc::disabled: return proto::errc::invalid_request;
    case session_errc::busy: return proto::errc::session_busy;
    case session_errc::too_long: return proto::errc::too_long;
  }
  return proto::errc::internal;
}

/// The turn of a named session a request carries, for its sink to end.
struct session_turn_ref {
  std::shared_ptr<session_table> table;
  session_key key;
  std::uint64_t ticket = 0;
};

/// The stream_sink of one request: decodes tokens with the model's tokenizer
/// and hands records to the session. Called on a CAF worker, one call at a time.
class session_sink final : public actors::stream_sink {
public:
  /// `backend` null: the model is loading; its tokens are decoded with the
  /// backend it has once it runs (`engine`, `model`).
  session_sink(std::shared_ptr<client_session> s, std::uint64_t request_id,
               std::shared_ptr<backends::backend> backend, std::optional<session_turn_ref> turn,
               const actors::engine& engine, std::string model)
    : session_(std::move(s)), request_id_(request_id), backend_(std::move(backend)),
      turn_(std::move(turn)), engine_(engine), model_(std::move(model)) {}

  void on_tokens(std::span<const actors::token_id> tokens) override {
    if (turn_)
      generated_.insert(generated_.end(), tokens.begin(), tokens.end());
    const auto now = monotonic_ns();
    if (!backend_)
      if (const auto m = engine_.find_model(model_)) // loaded: it is generating these tokens
        backend_ = m->backend;
    auto text = backend_ ? utf8_.feed(backend_->tokens().decode(tokens)) : std::string{};
    std::vector<proto::record_bytes> records;
    proto::pack_tokens(request_id_, now, tokens, text, records);
    session_->deliver(request_id_, std::move(records));
  }

  void on_end(const actors::stream_end& end) override {
    // The history grows before the app can see the end, so that its next turn
    // never finds the session still busy. Whatever the end reason, the turn
    // keeps what was streamed (what the app has shown).
    if (turn_)
      turn_->table->end_turn(turn_->key, turn_->ticket, generated_);
    std::vector<proto::record_bytes> records;
    if (auto rest = utf8_.flush(); !rest.empty())
      proto::pack_tokens(request_id_, monotonic_ns(), {}, rest, records);
    proto::end_rec e;
    e.request_id = request_id_;
    e.reason = to_wire(end.reason);
    e.message = end.message;
    if (end.reason == actors::end_reason::cancelled && session_->overflowed(request_id_)) {
      e.reason = proto::end_reason::backlog;
      e.message = "cancelled: the client stopped reading its events";
    }
    e.prompt_tokens = end.prompt_tokens;
    e.generated_tokens = end.generated_tokens;
    e.preemptions = end.preemptions;
    e.ttft_us = to_us(end.ttft_ms);
    e.tpot_us = to_us(end.tpot_ms);
    e.e2e_us = to_us(end.e2e_ms);
    proto::encode(e, records.emplace_back());
    session_->deliver_end(request_id_, std::move(records));
  }

private:
  std::shared_ptr<client_session> session_;
  std::uint64_t request_id_;
  std::shared_ptr<backends::backend> backend_; ///< set on the first tokens when null at start
  proto::utf8_stream utf8_;
  std::optional<session_turn_ref> turn_;
  const actors::engine& engine_;
  std::string model_;
  std::vector<actors::token_id> generated_; ///< this turn's tokens, for the session
};

} // namespace

void client_session::submit_to_engine(complete_submit c) {
  const auto id = c.head.request_id;
  if (auto busy = admission_.admit_request(peer_.uid)) {
    counters_.busy_refusals.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock{mu_};
      if (auto it = requests_.find(id); it != requests_.end())
        erase_request_locked(it);
      tracker_.finished(id);
    }
    push_error(id, proto::errc::busy, std::move(*busy));
    return;
  }
  {
    std::lock_guard lock{mu_};
    if (auto it = requests_.find(id); it != requests_.end())
      it->second.admitted = true;
    else
      admission_.release_request(peer_.uid); // cannot happen: the loop thread owns submits
  }
  if (const auto model = resolve_model(c.head.model);
      !c.head.session.empty() && engine_.find_model(model) == nullptr
      && engine_.is_configured(model)) {
    await_model(std::move(c), model);
    return;
  }
  submit_admitted(std::move(c));
}

void client_session::await_model(complete_submit c, const std::string& model) {
  const auto id = c.head.request_id;
  std::uint64_t wait = 0;
  {
    std::lock_guard lock{mu_};
    wait = ++waits_;
    if (auto it = requests_.find(id); it != requests_.end())
      it->second.awaiting_load = wait;
  }
  // The callback runs on the registry's thread (or here, when the model
  // loaded meanwhile): it hands the turn to the loop thread.
  auto turn = std::make_shared<complete_submit>(std::move(c));
  engine_.acquire(model, std::nullopt,
                  [weak = weak_from_this(), turn,
                   wait](const actors::model_registry::acquired& got) {
                    auto self = weak.lock();
                    if (!self)
                      return;
                    {
                      std::lock_guard lock{self->mu_};
                      if (self->closed_)
                        return;
                      self->loaded_turns_.push_back(
                        loaded_turn{std::move(*turn), wait, got ? *got : nullptr,
                                    got ? std::string{} : got.error()});
                      self->turns_loaded_.store(true, std::memory_order_release);
                    }
                    ipc::eventfd_signal(self->loop_wake_fd_);
                  });
}

void client_session::resume_loaded_turns() {
  // Called on every pass of the gateway's loop: no lock unless a load answered.
  if (!turns_loaded_.exchange(false, std::memory_order_acquire))
    return;
  std::vector<loaded_turn> ready;
  {
    std::lock_guard lock{mu_};
    ready.swap(loaded_turns_);
  }
  for (auto& t : ready) {
    const auto id = t.submit.head.request_id;
    bool live = false;
    {
      std::lock_guard lock{mu_};
      if (auto it = requests_.find(id);
          it != requests_.end() && it->second.awaiting_load == t.wait) {
        it->second.awaiting_load = 0;
        live = true;
        if (!t.lease) {
          erase_request_locked(it);
          tracker_.finished(id);
        }
      }
    }
    if (!live)
      continue; // cancelled while its model loaded (its id may be another request's now)
    if (!t.lease) { // as a request without a session: the stream ends with the cause
      push_end(id, proto::end_reason::error, std::move(t.error));
      continue;
    }
    submit_admitted(std::move(t.submit)); // t.lease holds the model until it is submitted
  }
}

void client_session::submit_admitted(complete_submit c) {
  const auto id = c.head.request_id;
  actors::submit_request req;
  req.model = resolve_model(c.head.model);
  req.client = name_ + "#" + std::to_string(id_);
  req.owner = peer_.uid;
  req.session_name = c.head.session;
  req.priority = c.head.prio == proto::priority::batch ? actors::priority_class::batch
                                                       : actors::priority_class::interactive;
  if (c.head.kind == proto::prompt_kind::text)
    req.prompt_text = std::move(c.prompt);
  else
    req.prompt_tokens.assign(c.tokens.begin(), c.tokens.end());
  req.sampling.temperature = c.head.temperature;
  req.sampling.top_k = c.head.top_k;
  req.sampling.top_p = c.head.top_p;
  req.sampling.seed = c.head.seed;
  req.sampling.max_tokens = c.head.max_tokens;
  req.sampling.stop_tokens.assign(c.head.stop_tokens.begin(), c.head.stop_tokens.end());
  req.stop_at_eos = c.head.stop_at_eos;

  const auto m = engine_.find_model(req.model);
  const auto model = req.model;
  if (!c.head.session.empty() && m == nullptr && engine_.is_configured(model)) {
    // Only when the model unloaded again before a waiting turn got here (an
    // admin's kvlane unload): the turn cannot be tokenized without it.
    {
      std::lock_guard lock{mu_};
      if (auto it = requests_.find(id); it != requests_.end())
        erase_request_locked(it);
      tracker_.finished(id);
    }
    push_error(id, proto::errc::busy,
               fmt::format("model '{}' was unloaded before this session turn started: retry it",
                           model));
    return;
  }
  std::optional<session_turn_ref> turn;
  if (!c.head.session.empty() && m != nullptr) { // (an unknown model is the engine's error)
    // The daemon tokenizes a session's turn itself: only the session's first
    // turn starts with BOS, and the engine gets history + turn as tokens.
    const auto& tok = m->backend->tokens();
    std::vector<actors::token_id> prompt;
    std::optional<actors::token_id> bos;
    if (c.head.kind == proto::prompt_kind::text) {
      prompt = tok.encode(req.prompt_text);
      bos = tok.bos();
    } else {
      prompt = std::move(req.prompt_tokens);
    }
    session_key key{peer_.uid, model, c.head.session};
    auto t = sessions_->begin_turn(key, prompt, bos, c.head.max_tokens, m->info.max_context);
    if (!t) {
      {
        std::lock_guard lock{mu_};
        if (auto it = requests_.find(id); it != requests_.end())
          erase_request_locked(it);
        tracker_.finished(id);
      }
      push_error(id, to_wire(t.error().code), t.error().message);
      return;
    }
    req.prompt_text.clear();
    req.prompt_tokens = std::move(t->tokens);
    turn = session_turn_ref{sessions_, std::move(key), t->ticket};
  }
  const auto aborted = turn;
  auto sink = std::make_shared<session_sink>(
    shared_from_this(), id, m ? m->backend : std::shared_ptr<backends::backend>{}, std::move(turn),
    engine_, model);
  auto r = engine_.submit(std::move(req), std::move(sink));
  if (!r) {
    if (aborted)
      aborted->table->abort_turn(aborted->key, aborted->ticket);
    {
      std::lock_guard lock{mu_};
      if (auto it = requests_.find(id); it != requests_.end())
        erase_request_locked(it);
      tracker_.finished(id);
    }
    push_error(id, to_wire(r.error().code), r.error().message);
    return;
  }
  bool cancel_now = false;
  {
    std::lock_guard lock{mu_};
    if (auto it = requests_.find(id); it != requests_.end()) {
      it->second.seq = *r;
      cancel_now = it->second.overflowed;
    }
  }
  if (cancel_now)
    engine_.cancel(model, *r);
}

std::string client_session::resolve_model(const std::string& model) const {
  return model.empty() && !engine_.configured().empty() ? engine_.configured().front().name : model;
}

} // namespace kvlane::daemon
