#include "daemon/client_session.hpp"

#include "actors/engine.hpp"
#include "common/align.hpp"
#include "common/logging.hpp"
#include "ipc/control_codec.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

namespace kvlane::daemon {

namespace proto = ipc::proto;

namespace {

constexpr std::uint64_t page = 4096;

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

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
        } else if (it->second.awaiting_load != 0) {
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
