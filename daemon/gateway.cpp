#include "daemon/gateway.hpp"

#include "actors/engine.hpp"
#include "common/logging.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace kvlane::daemon {

namespace proto = ipc::proto;
using clock = std::chrono::steady_clock;

namespace {

// Submit records taken from one connection per pass of the loop: enough to
// keep a busy app's ring moving, few enough (about 0.3 ms of decoding) that an
// app which keeps its ring full cannot hold the loop from the others.
constexpr std::size_t records_per_wake = 256;

enum class tag_kind : std::uint64_t { listen = 0, wake = 1, pending = 2, control = 3, submit = 4 };

std::uint64_t tag(tag_kind k, std::uint64_t v) {
  return (static_cast<std::uint64_t>(k) << 56) | (v & ((1ull << 56) - 1));
}
tag_kind kind_of(std::uint64_t t) {
  return static_cast<tag_kind>(t >> 56);
}
std::uint64_t value_of(std::uint64_t t) {
  return t & ((1ull << 56) - 1);
}

std::string user_name(uid_t uid) {
  std::array<char, 4096> buf{};
  passwd pw{};
  passwd* out = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &out) == 0 && out != nullptr)
    return out->pw_name;
  return "uid " + std::to_string(uid);
}


} // namespace

gateway::gateway(const clients_section& cfg, std::string path, actors::engine& engine,
                 std::shared_ptr<session_table> sessions)
  : cfg_(cfg),
    path_(std::move(path)),
    engine_(engine),
    conversations_(sessions ? std::move(sessions) : std::make_shared<session_table>()),
    admission_(std::make_shared<admission>(limits_of(cfg))),
    max_pending_(cfg.max_pending) {}

admission_limits gateway::limits_of(const clients_section& cfg) {
  admission_limits l;
  l.max_clients_per_user = cfg.max_clients_per_user;
  l.max_requests_per_user = cfg.max_requests_per_user;
  l.max_live_sequences = cfg.max_live_sequences;
  l.retry_after = cfg.busy_retry;
  return l;
}

void gateway::set_admission(const clients_section& cfg) {
  admission_->set_limits(limits_of(cfg));
  max_pending_.store(cfg.max_pending, std::memory_order_relaxed);
}

gateway::~gateway() {
  stop();
}

expected<std::unique_ptr<gateway>, std::string>
gateway::create(const clients_section& cfg, std::string socket_path, actors::engine& engine,
                std::shared_ptr<session_table> sessions) {
  std::unique_ptr<gateway> self{
    new gateway(cfg, std::move(socket_path), engine, std::move(sessions))};
  auto sys_fail = [&](std::string what) {
    return unexpected(what + ": " + std::strerror(errno));
  };

  auto policy = ipc::access_policy::create(cfg.allow_users, cfg.allow_groups,
                                           /*open_when_empty=*/true);
  if (!policy)
    return unexpected("[clients] " + std::move(policy).error());
  self->policy_ = std::make_shared<const ipc::access_policy>(std::move(*policy));

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (self->path_.size() >= sizeof addr.sun_path)
    return unexpected("client socket path " + self->path_ + " is longer than " +
                      std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, self->path_.c_str(), self->path_.size() + 1);

  struct stat st{};
  if (::lstat(self->path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return unexpected("client socket path " + self->path_ + " exists and is not a socket");
    const int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0)
      ::close(probe);
    if (live)
      return unexpected("another kvlaned is already serving " + self->path_);
    ::unlink(self->path_.c_str()); // stale, from a daemon that died
  }

  self->listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (self->listen_fd_ < 0)
    return sys_fail("client socket");
  if (::bind(self->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_fail("binding " + self->path_);
  if (::chmod(self->path_.c_str(), cfg.socket_mode) != 0)
    return sys_fail("chmod of " + self->path_);
  if (::listen(self->listen_fd_, 128) != 0)
    return sys_fail("listen on " + self->path_);

  self->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  self->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (self->epoll_fd_ < 0 || self->wake_fd_ < 0)
    return sys_fail("epoll/eventfd for the IPC loop");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag(tag_kind::listen, 0);
  ::epoll_ctl(self->epoll_fd_, EPOLL_CTL_ADD, self->listen_fd_, &ev);
  ev.data.u64 = tag(tag_kind::wake, 0);
  ::epoll_ctl(self->epoll_fd_, EPOLL_CTL_ADD, self->wake_fd_, &ev);

  self->loop_ = std::thread{[g = self.get()] { g->run(); }};
  return self;
}

void gateway::stop() {
  if (stopping_.exchange(true))
    return;
  if (wake_fd_ >= 0)
    ipc::eventfd_signal(wake_fd_);
  if (loop_.joinable())
    loop_.join();
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  if (!path_.empty())
    ::unlink(path_.c_str());
}

bool gateway::allowed(int fd) const {
  auto peer = ipc::read_peer_credentials(fd);
  std::lock_guard lock{policy_mutex_};
  return peer && policy_->allows(*peer);
}

void gateway::set_policy(std::shared_ptr<const ipc::access_policy> policy) {
  std::lock_guard lock{policy_mutex_};
  policy_ = std::move(policy);
}

void gateway::run() {
  auto log = logging::get("ipc");
  std::array<epoll_event, 64> events{};
  while (!stopping_.load()) {
    // Ask apps to signal the submit eventfd from now on; re-check first.
    bool busy = false;
    for (auto& [id, s] : sessions_)
      busy = s->prepare_sleep() || busy;
    int timeout_ms = -1;
    const auto now = clock::now();
    for (auto& [fd, p] : pending_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count();
      const int ms = left < 0 ? 0 : static_cast<int>(left) + 1;
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    for (auto& [id, s] : sessions_)
      if (s->backlogged())
        timeout_ms = timeout_ms < 0 ? 2 : std::min(timeout_ms, 2);
    if (busy)
      timeout_ms = 0;
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (auto& [id, s] : sessions_)
      s->done_waiting();
    if (n < 0 && errno != EINTR) {
      log->critical("IPC loop: epoll_wait failed: {}", std::strerror(errno));
      break;
    }
    std::vector<std::uint64_t> to_close;
    for (int i = 0; i < std::max(n, 0); ++i) {
      const auto t = events[static_cast<std::size_t>(i)].data.u64;
      const auto what = events[static_cast<std::size_t>(i)].events;
      switch (kind_of(t)) {
        case tag_kind::listen: accept_all(); break;
        case tag_kind::wake: ipc::eventfd_drain(wake_fd_); break;
        case tag_kind::pending: handle_pending(static_cast<int>(value_of(t))); break;
        case tag_kind::submit: break; // drained below, with every session
        case tag_kind::control: {
          auto it = sessions_.find(value_of(t));
          if (it == sessions_.end())
            break;
          auto& s = it->second;
          bool closed = false;
          if (what & EPOLLIN) {
            for (int k = 0; k < 16 && !closed; ++k) {
              const auto ev = s->handle_control();
              if (ev == client_session::control_event::none)
                break;
              if (ev == client_session::control_event::closed)
                closed = true;
              else if (ev == client_session::control_event::stats)
                s->send_control(proto::encode(stats()));
            }
          }
          if (closed || (what & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)))
            to_close.push_back(it->first);
          break;
        }
      }
    }
    for (auto& [id, s] : sessions_) {
      if (std::find(to_close.begin(), to_close.end(), id) != to_close.end())
        continue;
      if (s->doomed()) {
        s->fail(proto::errc::ring_corrupt, s->doom_reason());
        to_close.push_back(id);
      } else if (!s->drain_submit(records_per_wake)) {
        to_close.push_back(id);
      } else if (s->backlogged()) {
        s->flush();
      }
    }
    for (auto id : to_close)
      close_session(id, false);
    const auto later = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto next = std::next(it);
      if (it->second.deadline <= later)
        refuse(it->first, proto::errc::timeout,
               "no hello within " + std::to_string(cfg_.hello_timeout.count()) + " ms");
      it = next;
    }
  }
  std::vector<std::uint64_t> ids;
  for (auto& [id, s] : sessions_)
    ids.push_back(id);
  for (auto id : ids)
    close_session(id, true);
  while (!pending_.empty())
    refuse(pending_.begin()->first, proto::errc::shutting_down, "kvlaned is shutting down");
}

void gateway::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        logging::get("ipc")->error("accept on {}: {}", path_, std::strerror(errno));
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return;
    }
    pending_conn p;
    p.fd = fd;
    socklen_t len = sizeof p.peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &p.peer, &len) != 0) {
      ::close(fd);
      continue;
    }
    if (pending_.size() >= max_pending_.load(std::memory_order_relaxed)) {
      // Refused before it is registered: connections already waiting keep
      // their place, and this one costs nothing beyond the answer.
      proto::refuse_msg r;
      r.code = proto::errc::busy;
      r.message = fmt::format("kvlaned has {} connection(s) waiting for their hello "
                              "([clients] max_pending); {}",
                              pending_.size(), admission_->retry_hint());
      auto bytes = proto::encode(r);
      (void)::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      counters_.busy_refusals.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    p.deadline = clock::now() + cfg_.hello_timeout;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = tag(tag_kind::pending, static_cast<std::uint64_t>(fd));
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    pending_[fd] = p;
  }
}

void gateway::refuse(int fd, proto::errc code, const std::string& message) {
  auto it = pending_.find(fd);
  const ucred peer = it != pending_.end() ? it->second.peer : ucred{};
  proto::refuse_msg r;
  r.code = code;
  r.message = message;
  auto bytes = proto::encode(r);
  (void)::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  logging::get("ipc")->warn("refused a connection from pid {} uid {}: {} ({})", peer.pid, peer.uid,
                            message, proto::to_string(code));
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  if (it != pending_.end())
    pending_.erase(it);
}

void gateway::handle_pending(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end())
    return;
  std::array<std::byte, proto::max_control_size + 1> buf{};
  const auto n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n <= 0) { // the peer left before its hello
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    pending_.erase(it);
    return;
  }
  if (static_cast<std::size_t>(n) > proto::max_control_size)
    return refuse(fd, proto::errc::bad_message,
                  "hello of " + std::to_string(n) + " bytes exceeds the limit of " +
                    std::to_string(proto::max_control_size));
  auto msg = proto::decode_control(std::span<const std::byte>{buf.data(), static_cast<std::size_t>(n)});
  if (!msg)
    return refuse(fd, msg.error().code, msg.error().message);
  auto* hello = std::get_if<proto::hello_msg>(&*msg);
  if (hello == nullptr)
    return refuse(fd, proto::errc::bad_message, "the first message must be a hello");
  const auto peer = it->second.peer;
  if (!allowed(fd))
    return refuse(fd, proto::errc::not_allowed,
                  "user " + user_name(peer.uid) + " (uid " + std::to_string(peer.uid) +
                    ") is not allowed to use kvlaned (see [clients] allow_users / allow_groups)");
  if (sessions_.size() >= cfg_.max_clients)
    return refuse(fd, proto::errc::server_busy,
                  "kvlaned already serves " + std::to_string(sessions_.size()) +
                    " clients ([clients] max_clients)");
  if (auto busy = admission_->admit_client(peer.uid)) {
    counters_.busy_refusals.fetch_add(1, std::memory_order_relaxed);
    return refuse(fd, proto::errc::busy, *busy);
  }

  client_session::setup s;
  s.control_fd = fd;
  s.peer = peer;
  s.name = hello->client_name;
  s.id = next_id_++;
  s.limits = &cfg_;
  s.engine = &engine_;
  s.counters = &counters_;
  s.admit = admission_.get();
  s.sessions = conversations_;
  s.loop_wake_fd = wake_fd_;
  auto session = client_session::create(std::move(s));
  if (!session)
    return refuse(fd, proto::errc::internal, "cannot set up the client's rings: " + session.error());
  if (auto ok = (*session)->send_welcome(); !ok) {
    logging::get("ipc")->warn("client '{}' (pid {}): {}", hello->client_name, peer.pid, ok.error());
    (*session)->close(true);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    pending_.erase(it);
    return;
  }
  pending_.erase(it);
  const auto id = (*session)->id();
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = tag(tag_kind::control, id);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = tag(tag_kind::submit, id);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, (*session)->submit_eventfd(), &ev);
  counters_.clients_total.fetch_add(1, std::memory_order_relaxed);
  logging::get("ipc")->info("client '{}' #{} connected (pid {}, uid {}); {} client(s)",
                            (*session)->name(), id, peer.pid, peer.uid, sessions_.size() + 1);
  sessions_.emplace(id, std::move(*session));
  counters_.clients_connected.store(sessions_.size(), std::memory_order_relaxed);
}

void gateway::close_session(std::uint64_t id, bool shutting_down) {
  auto it = sessions_.find(id);
  if (it == sessions_.end())
    return;
  auto s = std::move(it->second);
  sessions_.erase(it);
  counters_.clients_connected.store(sessions_.size(), std::memory_order_relaxed);
  // The app holds the same eventfd: deregister explicitly, closing ours is not enough.
  if (s->submit_eventfd() >= 0)
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->submit_eventfd(), nullptr);
  if (s->control_fd() >= 0)
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->control_fd(), nullptr);
  if (shutting_down) {
    proto::fatal_msg f;
    f.code = proto::errc::shutting_down;
    f.message = "kvlaned is shutting down";
    s->send_control(proto::encode(f));
  }
  s->close(shutting_down);
}

proto::stats_reply_msg gateway::stats() {
  proto::stats_reply_msg m;
  m.clients = static_cast<std::uint32_t>(sessions_.size());
  m.clients_total = counters_.clients_total.load();
  m.requests_live = counters_.requests_live.load();
  // Figures the engine's monitor refreshed off this thread (every
  // engine::stats_refresh): a stats request never waits for a scheduler.
  for (const auto& model : engine_.loaded_models()) {
    auto st = engine_.cached_stats(model->name);
    if (st)
      m.engine_live += st->submitted - st->finished - st->cancelled - st->failed;
  }
  const auto store = engine_.store_stats();
  m.store_used_bytes = store.used_bytes;
  m.store_snapshots = store.snapshots;
  m.records_in = counters_.records_in.load();
  m.records_out = counters_.records_out.load();
  m.violations = counters_.violations.load();
  m.backlog_cancels = counters_.backlog_cancels.load();
  m.disconnect_cancels = counters_.disconnect_cancels.load();
  return m;
}

} // namespace kvlane::daemon
