#include "daemon/client_session.hpp"

#include "actors/engine.hpp"
#include "common/align.hpp"
#include "common/logging.hpp"
#include "ipc/control_codec.hpp"
#include "ipc/utf8.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

namespace kvlane::daemon {

namespace proto = ipc::proto;

namespace {

constexpr std::uint64_t page = 4096;

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

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
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

client_session::client_session(setup s)
  : id_(s.id),
    name_(std::move(s.name)),
    peer_(s.peer),
    limits_(*s.limits),
    engine_(*s.engine),
    counters_(*s.counters),
    admission_(*s.admit),
    sessions_(std::move(s.sessions)),
    loop_wake_fd_(s.loop_wake_fd),
    control_fd_(s.control_fd),
    tracker_(s.limits->max_requests, static_cast<std::uint32_t>(s.limits->max_prompt_bytes)) {}

client_session::~client_session() {
  close(true);
}

expected<std::shared_ptr<client_session>, std::string> client_session::create(setup s) {
  std::shared_ptr<client_session> self{new client_session(std::move(s))};
  auto fail = [&](std::string what) {
    self->control_fd_ = -1; // the caller keeps it
    return unexpected(what + ": " + std::strerror(errno));
  };

  const auto& lim = self->limits_;
  self->submit_geo_ = {0, lim.submit_ring_records, static_cast<std::uint32_t>(proto::record_size)};
  self->events_geo_ = {round_up(ipc::ring_bytes(lim.submit_ring_records, proto::record_size), page),
                       lim.events_ring_records, static_cast<std::uint32_t>(proto::record_size)};
  self->map_size_ = round_up(
    self->events_geo_.offset + ipc::ring_bytes(lim.events_ring_records, proto::record_size), page);

  self->memfd_ = ::memfd_create("kvlane-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (self->memfd_ < 0)
    return fail("memfd_create");
  if (::ftruncate(self->memfd_, static_cast<off_t>(self->map_size_)) != 0)
    return fail("ftruncate of the client memfd");
  // Commit the pages now: a fault later must never be the daemon's SIGBUS.
  if (::fallocate(self->memfd_, 0, 0, static_cast<off_t>(self->map_size_)) != 0)
    return fail("fallocate of the client memfd");
  void* p = ::mmap(nullptr, self->map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, self->memfd_, 0);
  if (p == MAP_FAILED)
    return fail("mmap of the client memfd");
  self->map_ = static_cast<std::byte*>(p);
  ipc::ring_init(self->map_, self->submit_geo_);
  ipc::ring_init(self->map_, self->events_geo_);
  // The app may write the rings but never resize the memfd under our mapping.
  if (::fcntl(self->memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail("sealing the client memfd");
  self->submit_efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (self->submit_efd_ < 0)
    return fail("eventfd");
  // The events ring's wake-ups travel on a socket pair, not a shared eventfd:
  // the app gets its own end, so nothing it does (clearing O_NONBLOCK, not
  // reading, shrinking its buffer) can make our send() block.
  int wake[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, wake) != 0)
    return fail("socketpair for the events wake-ups");
  self->events_wake_fd_ = wake[0];
  self->app_wake_fd_ = wake[1];
  // Wake-ups go one way: the app cannot queue bytes into the daemon's end.
  if (::shutdown(self->events_wake_fd_, SHUT_RD) != 0)
    return fail("shutdown of the events wake-up socket");
  self->submit_ = ipc::ring_reader(self->map_, self->submit_geo_, true);
  self->events_ = ipc::ring_writer(self->map_, self->events_geo_, true);
  return self;
}

expected<void, std::string> client_session::send_welcome() {
  proto::welcome_msg w;
  w.client_id = id_;
  w.memfd_size = map_size_;
  w.submit_offset = submit_geo_.offset;
  w.submit_capacity = submit_geo_.capacity;
  w.events_offset = events_geo_.offset;
  w.events_capacity = events_geo_.capacity;
  w.spin_us = limits_.spin_us;
  w.max_requests = limits_.max_requests;
  w.max_prompt_bytes = static_cast<std::uint32_t>(limits_.max_prompt_bytes);
  if (!engine_.configured().empty())
    w.default_model = engine_.configured().front().name;
  auto bytes = proto::encode(w);

  iovec iov{bytes.data(), bytes.size()};
  const int fds[3] = {memfd_, submit_efd_, app_wake_fd_};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)]{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (::sendmsg(control_fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
    return unexpected(std::string{"sending the welcome: "} + std::strerror(errno));
  close_fd(app_wake_fd_); // the app holds it now
  return {};
}

bool client_session::prepare_sleep() {
  return submit_.valid() && submit_.prepare_sleep();
}

void client_session::done_waiting() {
  if (submit_.valid())
    submit_.done_waiting();
}

std::size_t client_session::live_requests() const {
  std::lock_guard lock{mu_};
  return requests_.size();
}

bool client_session::drain_submit(std::size_t max_records) {
  if (closed_ || !submit_.valid())
    return true;
  resume_loaded_turns();
  proto::record_bytes raw;
  // At most `max_records` per call: an app that keeps its ring full (even of
  // records that cost nothing, like cancels of unknown ids) must not hold the
  // loop; the loop comes back after serving every other session.
  for (std::size_t n = 0; n < max_records; ++n) {
    const auto st = submit_.try_pop(raw);
    if (st == ipc::ring_status::empty)
      break;
    if (st == ipc::ring_status::corrupt) {
      fail(proto::errc::ring_corrupt,
           "submit ring: the tail index in shared memory is impossible (behind the daemon's "
           "head or more than a ring ahead of it)");
      return false;
    }
    counters_.records_in.fetch_add(1, std::memory_order_relaxed);
    if (!handle_record(raw))
      return false;
    if (n % 64 == 63 && backlogged())
      flush();
  }
  if (backlogged())
    flush();
  return true;
}

bool client_session::handle_record(const proto::record_bytes& raw) {
  auto rec = proto::decode_record(raw);
  if (!rec) {
    std::uint64_t id = 0;
    std::memcpy(&id, raw.data() + 8, sizeof id);
    fail(rec.error().code, "submit ring: " + rec.error().message, id);
    return false;
  }
  if (auto* s = std::get_if<proto::submit_rec>(&*rec)) {
    const auto id = s->request_id;
    const auto model_name = resolve_model(s->model);
    std::uint32_t limit = static_cast<std::uint32_t>(limits_.max_prompt_bytes);
    if (const auto m = engine_.find_model(model_name); m && s->kind == proto::prompt_kind::tokens)
      limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(4ull * m->info.max_context, limit));
    request_tracker::result r = std::optional<complete_submit>{};
    {
      std::lock_guard lock{mu_};
      r = tracker_.on_submit(std::move(*s), limit);
      if (r) {
        requests_[id] = request_state{model_name, 0, false};
        counters_.requests_live.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!r) {
      if (r.error().code == proto::errc::too_long) {
        push_error(id, r.error().code, r.error().message);
        return true;
      }
      fail(r.error().code, r.error().message, id);
      return false;
    }
    if (*r)
      submit_to_engine(std::move(**r));
    return true;
  }
  if (auto* c = std::get_if<proto::chunk_rec>(&*rec)) {
    const auto id = c->request_id;
    request_tracker::result r = std::optional<complete_submit>{};
    {
      std::lock_guard lock{mu_};
      r = tracker_.on_chunk(std::move(*c));
    }
    if (!r) {
      fail(r.error().code, r.error().message, id);
      return false;
    }
    if (*r)
      submit_to_engine(std::move(**r));
    return true;
  }
  if (auto* x = std::get_if<proto::cancel_rec>(&*rec)) {
    const auto id = x->request_id;
    std::string model;
    std::uint64_t seq = 0;
    bool was_assembling = false;
    bool was_waiting = false; // a session turn waiting for its model to load
    {
      std::lock_guard lock{mu_};
      was_assembling = tracker_.on_cancel(id);
      auto it = requests_.find(id);
      if (it != requests_.end()) {
        if (was_assembling) {
          erase_request_locked(it);
        } else if (it->second.awaiting_load) {
          was_waiting = true;
          erase_request_locked(it);
          tracker_.finished(id);
        } else {
          model = it->second.model;
          seq = it->second.seq;
        }
      }
    }
    if (was_assembling || was_waiting) {
      push_end(id, proto::end_reason::cancelled,
               was_assembling ? "cancelled before the prompt was complete"
                              : "cancelled while its model was loading");
    } else if (seq != 0) {
      engine_.cancel(model, seq);
    }
    return true;
  }
  const auto type = static_cast<unsigned>(std::to_integer<std::uint8_t>(raw[0]));
  fail(proto::errc::bad_message,
       "submit ring: record type " + std::to_string(type) + " is an event, not a request");
  return false;
}

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
  {
    std::lock_guard lock{mu_};
    if (auto it = requests_.find(id); it != requests_.end())
      it->second.awaiting_load = true;
  }
  // The callback runs on the registry's thread (or here, when the model
  // loaded meanwhile): it hands the turn to the loop thread.
  auto turn = std::make_shared<complete_submit>(std::move(c));
  engine_.acquire(model, std::nullopt,
                  [weak = weak_from_this(), turn](const actors::model_registry::acquired& got) {
                    auto self = weak.lock();
                    if (!self)
                      return;
                    {
                      std::lock_guard lock{self->mu_};
                      if (self->closed_)
                        return;
                      self->loaded_turns_.push_back(
                        loaded_turn{std::move(*turn), got ? *got : nullptr,
                                    got ? std::string{} : got.error()});
                    }
                    ipc::eventfd_signal(self->loop_wake_fd_);
                  });
}

void client_session::resume_loaded_turns() {
  std::vector<loaded_turn> ready;
  {
    std::lock_guard lock{mu_};
    if (loaded_turns_.empty())
      return;
    ready.swap(loaded_turns_);
  }
  for (auto& t : ready) {
    const auto id = t.submit.head.request_id;
    bool live = false;
    {
      std::lock_guard lock{mu_};
      if (auto it = requests_.find(id); it != requests_.end() && it->second.awaiting_load) {
        it->second.awaiting_load = false;
        live = true;
        if (!t.lease) {
          erase_request_locked(it);
          tracker_.finished(id);
        }
      }
    }
    if (!live)
      continue; // cancelled while its model loaded
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

void client_session::push_end(std::uint64_t request_id, proto::end_reason reason,
                              std::string message) {
  proto::end_rec e;
  e.request_id = request_id;
  e.reason = reason;
  e.message = std::move(message);
  std::vector<proto::record_bytes> records(1);
  proto::encode(e, records[0]);
  push_last(request_id, records);
}

void client_session::push_error(std::uint64_t request_id, proto::errc code, std::string message) {
  proto::error_rec e;
  e.request_id = request_id;
  e.code = code;
  e.message = std::move(message);
  std::vector<proto::record_bytes> records(1);
  proto::encode(e, records[0]);
  push_last(request_id, records);
}

void client_session::push_last(std::uint64_t request_id,
                               std::vector<proto::record_bytes>& records) {
  {
    std::lock_guard lock{mu_};
    if (closed_)
      return;
    std::vector<std::pair<std::string, std::uint64_t>> none;
    enqueue_locked(request_id, records, true, none);
  }
  flush();
}

void client_session::enqueue_locked(std::uint64_t request_id,
                                    std::vector<proto::record_bytes>& records, bool force,
                                    std::vector<std::pair<std::string, std::uint64_t>>& to_cancel) {
  if (!force) {
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second.overflowed)
      return;
    if (outbox_.size() + records.size() > limits_.max_backlog_records) {
      // The app stopped reading: cancel all of its requests, keep their ends.
      std::size_t n = 0;
      for (auto& [rid, st] : requests_) {
        if (st.overflowed)
          continue;
        st.overflowed = true;
        ++n;
        if (st.seq != 0)
          to_cancel.emplace_back(st.model, st.seq);
      }
      counters_.backlog_cancels.fetch_add(n, std::memory_order_relaxed);
      logging::get("ipc")->warn("client '{}' #{} (pid {}) stopped reading: {} events buffered; "
                                "cancelling its {} request(s)",
                                name_, id_, peer_.pid, outbox_.size(), n);
      return;
    }
  }
  for (auto& r : records)
    outbox_.push_back(r);
  outbox_size_.store(outbox_.size(), std::memory_order_relaxed);
}

void client_session::deliver(std::uint64_t request_id, std::vector<proto::record_bytes>&& records) {
  std::vector<std::pair<std::string, std::uint64_t>> to_cancel;
  std::size_t wrote = 0;
  {
    // Fast path: with the writer lock and nothing queued before us, the records
    // go straight into the ring (FIFO holds: anything earlier would be queued).
    std::unique_lock writer{writer_mu_, std::try_to_lock};
    {
      std::lock_guard lock{mu_};
      if (closed_)
        return;
      if (writer.owns_lock() && outbox_.empty()) {
        auto it = requests_.find(request_id);
        if (it == requests_.end() || it->second.overflowed)
          return;
        while (wrote < records.size()
               && events_.try_push(records[wrote]) == ipc::ring_status::ok)
          ++wrote;
        records.erase(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(wrote));
      }
      if (!records.empty()) // the slow path, or what did not fit (flush() handles full/corrupt)
        enqueue_locked(request_id, records, false, to_cancel);
    }
    if (wrote != 0) {
      counters_.records_out.fetch_add(wrote, std::memory_order_relaxed);
      if (events_.reader_sleeping())
        signal_reader();
    }
  }
  for (auto& [model, seq] : to_cancel)
    engine_.cancel(model, seq);
  // Pairs with the fence in flush(): a sink that queued while we held the
  // writer lock either gets the lock itself or is seen here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (backlogged())
    flush();
}

void client_session::deliver_end(std::uint64_t request_id,
                                 std::vector<proto::record_bytes>&& records) {
  {
    std::lock_guard lock{mu_};
    if (closed_)
      return;
    std::vector<std::pair<std::string, std::uint64_t>> none;
    enqueue_locked(request_id, records, true, none);
    if (auto it = requests_.find(request_id); it != requests_.end())
      erase_request_locked(it);
    tracker_.finished(request_id);
  }
  flush();
}

void client_session::erase_request_locked(
  std::unordered_map<std::uint64_t, request_state>::iterator it) {
  if (it->second.admitted)
    admission_.release_request(peer_.uid);
  requests_.erase(it);
  counters_.requests_live.fetch_sub(1, std::memory_order_relaxed);
}

bool client_session::overflowed(std::uint64_t request_id) const {
  std::lock_guard lock{mu_};
  auto it = requests_.find(request_id);
  return it != requests_.end() && it->second.overflowed;
}

void client_session::flush() {
  for (;;) {
    std::atomic_thread_fence(std::memory_order_seq_cst); // see deliver()
    std::unique_lock writer{writer_mu_, std::try_to_lock};
    if (!writer.owns_lock())
      return; // the holder re-checks the outbox after it unlocks
    std::size_t wrote = 0;
    bool full = false;
    {
      std::lock_guard lock{mu_};
      if (closed_)
        return;
      while (!outbox_.empty()) {
        const auto st = events_.try_push(outbox_.front());
        if (st == ipc::ring_status::ok) {
          outbox_.pop_front();
          ++wrote;
        } else if (st == ipc::ring_status::full) {
          // Ask the app to kick our loop when it has made room.
          if (events_.prepare_wait_for_room())
            continue;
          full = true;
          break;
        } else {
          outbox_size_.store(outbox_.size(), std::memory_order_relaxed);
          doom("events ring: the head index in shared memory is impossible");
          return;
        }
      }
      outbox_size_.store(outbox_.size(), std::memory_order_relaxed);
    }
    if (wrote != 0) {
      counters_.records_out.fetch_add(wrote, std::memory_order_relaxed);
      if (events_.reader_sleeping())
        signal_reader();
    }
    writer.unlock();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (full || outbox_size_.load(std::memory_order_relaxed) == 0)
      return; // (a full ring is retried by the loop, woken by the app or its 2 ms timer)
  }
}

void client_session::signal_reader() {
  // Our own end of the wake-up socket, MSG_DONTWAIT: cannot block. A full
  // socket buffer means wake-ups are pending already; a departed app is
  // noticed on its control socket.
  ipc::wake_socket_signal(events_wake_fd_);
}

void client_session::doom(std::string why) {
  {
    std::lock_guard lock{doom_mu_};
    if (doomed_.load(std::memory_order_relaxed))
      return;
    doom_reason_ = std::move(why);
    doomed_.store(true, std::memory_order_release);
  }
  ipc::eventfd_signal(loop_wake_fd_);
}

client_session::control_event client_session::handle_control() {
  std::array<std::byte, proto::max_control_size + 1> buf{};
  const auto n = ::recv(control_fd_, buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
  if (n == 0)
    return control_event::closed;
  if (n < 0)
    return errno == EAGAIN || errno == EINTR ? control_event::none : control_event::closed;
  if (static_cast<std::size_t>(n) > proto::max_control_size) {
    fail(proto::errc::bad_message,
         "control message of " + std::to_string(n) + " bytes exceeds the limit of " +
           std::to_string(proto::max_control_size));
    return control_event::closed;
  }
  auto msg = proto::decode_control(std::span<const std::byte>{buf.data(), static_cast<std::size_t>(n)});
  if (!msg) {
    fail(msg.error().code, "control socket: " + msg.error().message);
    return control_event::closed;
  }
  if (std::holds_alternative<proto::stats_request_msg>(*msg))
    return control_event::stats;
  if (auto* d = std::get_if<proto::session_drop_msg>(&*msg)) {
    // Only the connecting user's own sessions: the key carries the peer uid.
    // The history goes at once, the retained KV its turns left with the
    // scheduler's next message, before any later submit of this app.
    const auto model = resolve_model(d->model);
    const bool existed = sessions_->drop(session_key{peer_.uid, model, d->session});
    engine_.forget_session(model, peer_.uid, d->session);
    send_control(proto::encode(proto::session_dropped_msg{existed}));
    return control_event::handled;
  }
  fail(proto::errc::bad_message,
       std::holds_alternative<proto::hello_msg>(*msg)
         ? "control socket: a second hello after the handshake"
         : "control socket: this message type is only sent by the daemon");
  return control_event::closed;
}

bool client_session::send_control(const std::vector<std::byte>& bytes) {
  return ::send(control_fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
         == static_cast<ssize_t>(bytes.size());
}

void client_session::fail(proto::errc code, std::string message, std::uint64_t request_id) {
  counters_.violations.fetch_add(1, std::memory_order_relaxed);
  logging::get("ipc")->warn("client '{}' #{} (pid {}, uid {}): {} ({}); closing the connection",
                            name_, id_, peer_.pid, peer_.uid, message, proto::to_string(code));
  proto::fatal_msg f;
  f.code = code;
  f.request_id = request_id;
  f.message = message;
  send_control(proto::encode(f));
  if (code == proto::errc::ring_corrupt || doomed())
    return;
  // Also tell the reader of the events ring, if it still works.
  proto::error_rec e;
  e.request_id = request_id;
  e.code = code;
  e.message = std::move(message);
  proto::record_bytes rec;
  proto::encode(e, rec);
  std::lock_guard writer{writer_mu_};
  std::lock_guard lock{mu_};
  if (!closed_ && events_.try_push(rec) == ipc::ring_status::ok && events_.reader_sleeping())
    signal_reader();
}

std::string client_session::doom_reason() const {
  std::lock_guard lock{doom_mu_};
  return doom_reason_;
}

void client_session::close(bool shutting_down) {
  std::vector<std::pair<std::string, std::uint64_t>> cancels;
  std::vector<loaded_turn> unsent; // their leases go after the locks
  {
    std::lock_guard writer{writer_mu_};
    std::lock_guard lock{mu_};
    if (closed_)
      return;
    closed_ = true;
    for (auto& [rid, st] : requests_)
      if (st.seq != 0)
        cancels.emplace_back(st.model, st.seq);
    while (!requests_.empty())
      erase_request_locked(requests_.begin());
    unsent.swap(loaded_turns_);
    admission_.release_client(peer_.uid);
    outbox_.clear();
    outbox_size_.store(0, std::memory_order_relaxed);
    events_ = ipc::ring_writer{};
    submit_ = ipc::ring_reader{};
    if (map_ != nullptr)
      ::munmap(map_, map_size_);
    map_ = nullptr;
    close_fd(memfd_);
    close_fd(submit_efd_);
    close_fd(events_wake_fd_);
    close_fd(app_wake_fd_);
    close_fd(control_fd_);
  }
  for (auto& [model, seq] : cancels)
    engine_.cancel(model, seq);
  if (!shutting_down)
    counters_.disconnect_cancels.fetch_add(cancels.size(), std::memory_order_relaxed);
  if (!cancels.empty() || !shutting_down)
    logging::get("ipc")->info("client '{}' #{} (pid {}) disconnected; cancelled {} request(s)",
                              name_, id_, peer_.pid, cancels.size());
}

} // namespace kvlane::daemon
