// The C++ client library: handshake, rings, the reader thread, streams.
#include "kvlane/client.hpp"

#include "ipc/control_codec.hpp"
#include "ipc/protocol.hpp"
#include "ipc/record_codec.hpp"
#include "ipc/utf8.hpp"
#include "ipc/spsc_ring.hpp"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvlane::client {

namespace proto = ipc::proto;
using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const char* to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::daemon_not_running: return "daemon_not_running";
    case errc::permission_denied: return "permission_denied";
    case errc::not_allowed: return "not_allowed";
    case errc::version_mismatch: return "version_mismatch";
    case errc::timeout: return "timeout";
    case errc::connection_lost: return "connection_lost";
    case errc::protocol_error: return "protocol_error";
    case errc::invalid_argument: return "invalid_argument";
    case errc::unknown_model: return "unknown_model";
    case errc::invalid_request: return "invalid_request";
    case errc::too_long: return "too_long";
    case errc::too_many_requests: return "too_many_requests";
    case errc::server_busy: return "server_busy";
    case errc::shutting_down: return "shutting_down";
    case errc::internal: return "internal";
    case errc::model_failed: return "model_failed";
    case errc::busy: return "busy";
    case errc::session_busy: return "session_busy";
  }
  return "unknown";
}

const char* to_string(end_reason r) noexcept {
  switch (r) {
    case end_reason::length: return "length";
    case end_reason::stop: return "stop";
    case end_reason::cancelled: return "cancelled";
    case end_reason::error: return "error";
    case end_reason::backlog: return "backlog";
  }
  return "unknown";
}

namespace {

error make_error(errc c, std::string m) {
  return error{c, std::move(m)};
}

errc from_wire(proto::errc e) {
  switch (e) {
    case proto::errc::unknown_model: return errc::unknown_model;
    case proto::errc::invalid_request: return errc::invalid_request;
    case proto::errc::too_long: return errc::too_long;
    case proto::errc::too_many_requests: return errc::too_many_requests;
    case proto::errc::shutting_down: return errc::shutting_down;
    case proto::errc::server_busy: return errc::server_busy;
    case proto::errc::not_allowed: return errc::not_allowed;
    case proto::errc::version_mismatch: return errc::version_mismatch;
    case proto::errc::timeout: return errc::timeout;
    case proto::errc::internal: return errc::internal;
    case proto::errc::model_failed: return errc::model_failed;
    case proto::errc::busy: return errc::busy;
    case proto::errc::session_busy: return errc::session_busy;
    case proto::errc::ok:
    case proto::errc::bad_message:
    case proto::errc::duplicate_request:
    case proto::errc::ring_corrupt:
    case proto::errc::backlog: return errc::protocol_error;
  }
  return errc::protocol_error;
}

class fd_guard {
public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }

private:
  int fd_;
};

bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

} // namespace

std::string default_socket_path() {
  if (const char* s = std::getenv("KVLANE_SOCKET"); s && *s)
    return s;
  const std::string system = "/run/kvlane/kvlane.sock";
  if (::geteuid() == 0)
    return system;
  std::string primary;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
    primary = std::string{xdg} + "/kvlane/kvlane.sock";
  else
    primary = "/tmp/kvlane-" + std::to_string(::geteuid()) + "/kvlane.sock";
  if (!exists(primary) && exists(system))
    return system;
  return primary;
}

// -- shared state ---------------------------------------------------------------

struct stream::state {
  std::uint64_t id = 0;
  std::weak_ptr<connection::impl> conn;
  std::chrono::microseconds spin{0};
  callback cb; ///< set: events go here, not to the buffers below

  std::atomic<std::uint64_t> version{0};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint32_t> tokens;
  std::string text;
  std::optional<end_info> end;
  bool end_taken = false;
  std::optional<error> failure;

  bool finished() {
    std::lock_guard lock{mu};
    return end.has_value() || failure.has_value();
  }
};

struct connection::impl {
  std::string path;
  proto::welcome_msg welcome;
  int ctl = -1, memfd = -1, submit_efd = -1;
  int events_wake = -1; ///< our end of the daemon's wake-up socket for the events ring
  int stop_efd = -1;    ///< private: wakes our own reader at shutdown
  std::byte* map = nullptr;
  std::size_t map_size = 0;
  std::chrono::microseconds spin{20};

  std::mutex submit_mu;
  ipc::ring_writer submit;
  ipc::ring_reader events; ///< reader thread only

  std::mutex streams_mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<stream::state>> streams;
  std::atomic<std::uint64_t> next_id{1};

  std::atomic<bool> lost{false};
  std::atomic<bool> stopping{false};
  std::mutex lost_mu;
  error lost_error{errc::connection_lost, "not connected"};

  std::mutex ctl_mu;
  std::mutex stats_mu;
  std::condition_variable stats_cv;
  std::uint64_t stats_gen = 0;
  proto::stats_reply_msg last_stats;
  std::mutex drop_mu;          ///< one session_drop in flight at a time
  std::uint64_t dropped_gen = 0; ///< under stats_mu, like the stats replies
  bool last_dropped = false;

  std::thread reader;
  std::once_flag closed_once;

  ~impl() { shutdown(); }

  error lost_reason() {
    std::lock_guard lock{lost_mu};
    return lost_error;
  }

  void shutdown() {
    std::call_once(closed_once, [this] {
      stopping = true;
      if (stop_efd >= 0)
        ipc::eventfd_signal(stop_efd); // wake our own reader
      if (reader.joinable())
        reader.join();
      fail_all(make_error(errc::connection_lost, "the connection was closed by the app"));
      if (map != nullptr)
        ::munmap(map, map_size);
      map = nullptr;
      for (int* fd : {&ctl, &memfd, &submit_efd, &events_wake, &stop_efd})
        if (*fd >= 0) {
          ::close(*fd);
          *fd = -1;
        }
    });
  }

  void fail_all(error e) {
    {
      std::lock_guard lock{lost_mu};
      if (!lost.exchange(true))
        lost_error = e;
      else
        e = lost_error;
    }
    std::unordered_map<std::uint64_t, std::shared_ptr<stream::state>> all;
    {
      std::lock_guard lock{streams_mu};
      all.swap(streams);
    }
    for (auto& [id, st] : all)
      finish(*st, std::nullopt, e);
    std::lock_guard lock{stats_mu};
    stats_cv.notify_all();
  }

  /// Ends a stream with an end or a failure (once).
  static void finish(stream::state& st, std::optional<end_info> end, std::optional<error> failure) {
    if (st.cb) {
      if (st.finished())
        return;
      {
        std::lock_guard lock{st.mu};
        st.end = end;
        st.failure = failure;
      }
      event ev;
      ev.request_id = st.id;
      if (end)
        ev.end = &*end;
      if (failure)
        ev.failure = &*failure;
      st.cb(ev);
      return;
    }
    {
      std::lock_guard lock{st.mu};
      if (st.end || st.failure)
        return;
      st.end = std::move(end);
      st.failure = std::move(failure);
      st.version.fetch_add(1, std::memory_order_release);
    }
    st.cv.notify_all();
  }

  std::shared_ptr<stream::state> find(std::uint64_t id, bool remove) {
    std::lock_guard lock{streams_mu};
    auto it = streams.find(id);
    if (it == streams.end())
      return nullptr;
    auto st = it->second;
    if (remove)
      streams.erase(it);
    return st;
  }

  void dispatch(const proto::record_bytes& raw) {
    auto rec = proto::decode_record(raw);
    if (!rec) {
      fail_all(make_error(errc::protocol_error, "malformed event from kvlaned: " + rec.error().message));
      return;
    }
    if (auto* t = std::get_if<proto::tokens_rec>(&*rec)) {
      auto st = find(t->request_id, false);
      if (!st)
        return;
      if (st->cb) {
        event ev;
        ev.request_id = t->request_id;
        ev.tokens = &t->tokens;
        ev.text = t->text;
        ev.daemon_time_ns = t->daemon_time_ns;
        st->cb(ev);
        return;
      }
      {
        std::lock_guard lock{st->mu};
        st->tokens.insert(st->tokens.end(), t->tokens.begin(), t->tokens.end());
        st->text += t->text;
        st->version.fetch_add(1, std::memory_order_release);
      }
      st->cv.notify_all();
    } else if (auto* e = std::get_if<proto::end_rec>(&*rec)) {
      auto st = find(e->request_id, true);
      if (!st)
        return;
      end_info info;
      info.reason = static_cast<end_reason>(e->reason);
      info.message = e->message;
      info.prompt_tokens = e->prompt_tokens;
      info.generated_tokens = e->generated_tokens;
      info.preemptions = e->preemptions;
      info.ttft = std::chrono::microseconds(e->ttft_us);
      info.tpot = std::chrono::microseconds(e->tpot_us);
      info.e2e = std::chrono::microseconds(e->e2e_us);
      finish(*st, std::move(info), std::nullopt);
    } else if (auto* x = std::get_if<proto::error_rec>(&*rec)) {
      if (x->request_id == 0) {
        fail_all(make_error(from_wire(x->code), x->message));
        return;
      }
      if (auto st = find(x->request_id, true))
        finish(*st, std::nullopt, make_error(from_wire(x->code), x->message));
    } else {
      fail_all(make_error(errc::protocol_error, "kvlaned sent a request record as an event"));
    }
  }

  /// Reads control messages; false when the connection is gone.
  bool handle_control() {
    std::array<std::byte, proto::max_control_size + 1> buf{};
    for (;;) {
      const auto n = ::recv(ctl, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
      if (n <= 0) {
        fail_all(make_error(errc::connection_lost, "kvlaned closed the connection"));
        return false;
      }
      auto msg = proto::decode_control(std::span<const std::byte>{buf.data(), static_cast<std::size_t>(n)});
      if (!msg) {
        fail_all(make_error(errc::protocol_error, "malformed message from kvlaned: " + msg.error().message));
        return false;
      }
      if (auto* f = std::get_if<proto::fatal_msg>(&*msg)) {
        auto code = from_wire(f->code);
        if (code == errc::shutting_down)
          fail_all(make_error(errc::connection_lost, "kvlaned is shutting down: " + f->message));
        else
          fail_all(make_error(code, "kvlaned ended the connection: " + f->message));
        return false;
      }
      if (auto* s = std::get_if<proto::stats_reply_msg>(&*msg)) {
        std::lock_guard lock{stats_mu};
        last_stats = *s;
        ++stats_gen;
        stats_cv.notify_all();
      }
      if (auto* d = std::get_if<proto::session_dropped_msg>(&*msg)) {
        std::lock_guard lock{stats_mu};
        last_dropped = d->existed;
        ++dropped_gen;
        stats_cv.notify_all();
      }
    }
  }

  void run() {
    proto::record_bytes rec;
    while (!stopping.load(std::memory_order_relaxed)) {
      const int watched[2] = {ctl, stop_efd};
      const bool data = ipc::wait_readable(events, events_wake, spin, 250ms, watched);
      std::size_t n = 0;
      while (events.try_pop(rec) == ipc::ring_status::ok) {
        dispatch(rec);
        ++n;
      }
      if (n != 0 && events.take_writer_waiting())
        ipc::eventfd_signal(submit_efd); // the daemon waits for room in our ring
      if (lost)
        return;
      if (!data) {
        pollfd p{ctl, POLLIN, 0};
        if (::poll(&p, 1, 0) == 1) {
          // Whatever the daemon wrote before it left is in the ring: take it first.
          while (events.try_pop(rec) == ipc::ring_status::ok)
            dispatch(rec);
          if ((p.revents & POLLIN) ? !handle_control() : true) {
            if (!(p.revents & POLLIN))
              fail_all(make_error(errc::connection_lost, "kvlaned closed the connection"));
            return;
          }
        }
      }
    }
  }

  result<void> push(const std::vector<proto::record_bytes>& records,
                    std::chrono::milliseconds timeout) {
    const auto deadline = clock::now() + timeout;
    std::lock_guard lock{submit_mu};
    for (std::size_t i = 0; i < records.size(); ++i) {
      for (;;) {
        if (lost)
          return lost_reason();
        const auto st = submit.try_push(records[i]);
        if (st == ipc::ring_status::ok)
          break;
        if (submit.reader_sleeping())
          ipc::eventfd_signal(submit_efd);
        if (clock::now() >= deadline) {
          if (i == 0)
            return make_error(errc::timeout, "the submit ring stayed full for " +
                                               std::to_string(timeout.count()) + " ms");
          // Half a request is in the ring: the connection cannot be used any more.
          fail_all(make_error(errc::connection_lost, "a submit timed out half-way"));
          return lost_reason();
        }
        std::this_thread::sleep_for(20us);
      }
    }
    if (submit.reader_sleeping())
      ipc::eventfd_signal(submit_efd);
    return {};
  }

  result<void> check_request(const request& r) const {
    auto bad = [](std::string m) { return make_error(errc::invalid_argument, std::move(m)); };
    if (!r.model.empty() && !valid_model_name(r.model))
      return bad("model name must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
    if (!r.session.empty() && !proto::valid_session_name(r.session))
      return bad("session name must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
    if (!r.prompt.empty() && !r.prompt_tokens.empty())
      return bad("give the prompt as text or as tokens, not both");
    if (r.prompt.empty() && r.prompt_tokens.empty())
      return bad("the prompt is empty");
    if (!proto::valid_utf8(r.prompt))
      return bad("the prompt is not valid UTF-8");
    const std::size_t bytes = r.prompt.empty() ? 4 * r.prompt_tokens.size() : r.prompt.size();
    if (bytes > welcome.max_prompt_bytes)
      return make_error(errc::too_long, "the prompt has " + std::to_string(bytes) +
                                          " bytes; the daemon accepts at most " +
                                          std::to_string(welcome.max_prompt_bytes));
    const auto& s = r.sampling;
    if (!(s.temperature >= 0.0f && s.temperature <= proto::max_temperature))
      return bad("temperature must be in [0, 100]");
    if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
      return bad("top_p must be in (0, 1]");
    if (s.top_k > proto::max_top_k)
      return bad("top_k must be at most " + std::to_string(proto::max_top_k));
    if (s.max_tokens == 0 || s.max_tokens > proto::max_max_tokens)
      return bad("max_tokens must be in 1.." + std::to_string(proto::max_max_tokens));
    if (s.stop_tokens.size() > proto::max_stop_tokens)
      return bad("at most 16 stop tokens");
    return {};
  }

  result<std::shared_ptr<stream::state>> submit_request(const std::shared_ptr<impl>& self,
                                                        const request& r, callback cb,
                                                        std::chrono::milliseconds timeout) {
    if (lost)
      return lost_reason();
    if (auto ok = check_request(r); !ok)
      return ok.error();
    auto st = std::make_shared<stream::state>();
    st->id = next_id.fetch_add(1);
    st->conn = self;
    st->spin = spin;
    st->cb = std::move(cb);

    proto::submit_rec head;
    head.request_id = st->id;
    head.kind = r.prompt.empty() ? proto::prompt_kind::tokens : proto::prompt_kind::text;
    head.prio = r.prio == priority::batch ? proto::priority::batch : proto::priority::interactive;
    head.stop_at_eos = r.sampling.stop_at_eos;
    head.model = r.model;
    head.session = r.session;
    head.temperature = r.sampling.temperature;
    head.top_p = r.sampling.top_p;
    head.top_k = r.sampling.top_k;
    head.max_tokens = r.sampling.max_tokens;
    head.seed = r.sampling.seed;
    head.stop_tokens = r.sampling.stop_tokens;
    std::string prompt = r.prompt;
    if (prompt.empty()) {
      prompt.resize(4 * r.prompt_tokens.size());
      std::memcpy(prompt.data(), r.prompt_tokens.data(), prompt.size());
    }
    std::vector<proto::record_bytes> records;
    proto::pack_submit(head, prompt, records);
    {
      std::lock_guard lock{streams_mu};
      streams[st->id] = st;
    }
    if (auto ok = push(records, timeout); !ok) {
      std::lock_guard lock{streams_mu};
      streams.erase(st->id);
      return ok.error();
    }
    return st;
  }

  result<void> cancel(std::uint64_t id, std::chrono::milliseconds timeout) {
    std::vector<proto::record_bytes> records(1);
    proto::encode(proto::cancel_rec{id}, records[0]);
    return push(records, timeout);
  }
};

// -- stream ---------------------------------------------------------------------

stream::stream(std::shared_ptr<state> st) : state_(std::move(st)) {}

stream::~stream() {
  if (state_ && !state_->finished())
    (void)cancel(100ms);
}

std::uint64_t stream::id() const noexcept {
  return state_->id;
}

result<chunk> stream::next(std::chrono::milliseconds timeout) {
  auto& st = *state_;
  const auto start = clock::now();
  // Spin a little before sleeping: a token is usually microseconds away.
  const auto v0 = st.version.load(std::memory_order_acquire);
  if (st.spin.count() > 0) {
    bool have;
    {
      std::lock_guard lock{st.mu};
      have = !st.tokens.empty() || !st.text.empty() || st.end || st.failure;
    }
    for (unsigned i = 1; !have && st.version.load(std::memory_order_acquire) == v0; ++i) {
      cpu_relax();
      if ((i & 63) == 0 && clock::now() - start >= st.spin)
        break;
    }
  }
  std::unique_lock lock{st.mu};
  const bool ready = st.cv.wait_until(lock, start + timeout, [&] {
    return !st.tokens.empty() || !st.text.empty() || st.end || st.failure;
  });
  if (!ready)
    return make_error(errc::timeout, "no event within " + std::to_string(timeout.count()) + " ms");
  chunk c;
  c.tokens.swap(st.tokens);
  c.text.swap(st.text);
  if (st.end) {
    c.end = st.end;
    st.end_taken = true;
  } else if (st.failure && c.tokens.empty() && c.text.empty()) {
    return *st.failure;
  }
  return c;
}

result<end_info> stream::wait(std::chrono::milliseconds timeout, std::string* text,
                              std::vector<std::uint32_t>* tokens) {
  const auto deadline = clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    auto c = next(std::max(left, std::chrono::milliseconds(0)));
    if (!c)
      return c.error();
    if (text)
      *text += c->text;
    if (tokens)
      tokens->insert(tokens->end(), c->tokens.begin(), c->tokens.end());
    if (c->end)
      return *c->end;
  }
}

result<void> stream::cancel(std::chrono::milliseconds timeout) {
  auto conn = state_->conn.lock();
  if (!conn)
    return make_error(errc::connection_lost, "the connection is closed");
  if (state_->finished())
    return {};
  return conn->cancel(state_->id, timeout);
}

// -- connection -----------------------------------------------------------------

connection::connection(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

connection::~connection() {
  close();
}

void connection::close() {
  if (impl_)
    impl_->shutdown();
}

bool connection::connected() const noexcept {
  return impl_ && !impl_->lost.load();
}

const std::string& connection::default_model() const noexcept {
  return impl_->welcome.default_model;
}

const std::string& connection::socket_path() const noexcept {
  return impl_->path;
}

result<std::unique_ptr<connection>> connection::connect(const connect_options& options) {
  const std::string path = options.socket_path.empty() ? default_socket_path() : options.socket_path;
  if (!proto::valid_client_name(options.client_name))
    return make_error(errc::invalid_argument, "client name must be 1 to 64 bytes of printable UTF-8");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return make_error(errc::invalid_argument, "socket path " + path + " is too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);

  fd_guard fd{::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)};
  if (fd.get() < 0)
    return make_error(errc::internal, std::string{"socket: "} + std::strerror(errno));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    if (e == ENOENT)
      return make_error(errc::daemon_not_running, "kvlaned is not running (no socket at " + path + ")");
    if (e == ECONNREFUSED)
      return make_error(errc::daemon_not_running,
                        "kvlaned is not running (nobody listens on " + path + ")");
    if (e == EACCES || e == EPERM)
      return make_error(errc::permission_denied,
                        "permission denied opening " + path +
                          " (the socket's mode or its directory does not admit this user)");
    return make_error(errc::daemon_not_running,
                      "cannot connect to " + path + ": " + std::strerror(e));
  }

  auto hello = proto::encode(proto::hello_msg{options.client_name});
  if (::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size()))
    return make_error(errc::connection_lost, std::string{"sending hello: "} + std::strerror(errno));

  pollfd p{fd.get(), POLLIN, 0};
  const int ms = static_cast<int>(std::max<long long>(0, options.timeout.count()));
  const int rc = ::poll(&p, 1, ms);
  if (rc == 0)
    return make_error(errc::timeout, "no answer from kvlaned at " + path + " within " +
                                       std::to_string(ms) + " ms");
  if (rc < 0)
    return make_error(errc::internal, std::string{"poll: "} + std::strerror(errno));

  std::array<std::byte, proto::max_control_size> buf{};
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))]{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const auto n = ::recvmsg(fd.get(), &msg, MSG_CMSG_CLOEXEC);
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        fds.push_back(f);
      }
    }
  }
  auto close_fds = [&] {
    for (int f : fds)
      ::close(f);
  };
  if (n <= 0) {
    close_fds();
    return make_error(errc::connection_lost, "kvlaned closed the connection during the handshake");
  }
  auto decoded = proto::decode_control(std::span<const std::byte>{buf.data(), static_cast<std::size_t>(n)});
  if (!decoded) {
    close_fds();
    return make_error(decoded.error().code == proto::errc::version_mismatch ? errc::version_mismatch
                                                                           : errc::protocol_error,
                      "kvlaned's answer: " + decoded.error().message);
  }
  if (auto* r = std::get_if<proto::refuse_msg>(&*decoded)) {
    close_fds();
    return make_error(from_wire(r->code), r->message);
  }
  auto* w = std::get_if<proto::welcome_msg>(&*decoded);
  if (w == nullptr || fds.size() != 3 || (msg.msg_flags & MSG_CTRUNC)) {
    close_fds();
    return make_error(errc::protocol_error, "kvlaned's answer is neither a welcome with 3 fds nor a refusal");
  }

  auto p_impl = std::make_shared<impl>();
  auto& c = *p_impl;
  c.path = path;
  c.welcome = *w;
  c.ctl = fd.release();
  c.memfd = fds[0];
  c.submit_efd = fds[1];
  c.events_wake = fds[2];
  c.spin = std::chrono::microseconds(w->spin_us);
  c.stop_efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c.stop_efd < 0)
    return make_error(errc::internal, std::string{"eventfd: "} + std::strerror(errno));
  struct stat st{};
  const ipc::ring_geometry sg{w->submit_offset, w->submit_capacity, w->record_size};
  const ipc::ring_geometry eg{w->events_offset, w->events_capacity, w->record_size};
  if (::fstat(c.memfd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != w->memfd_size
      || !ipc::valid_geometry(sg, w->memfd_size) || !ipc::valid_geometry(eg, w->memfd_size))
    return make_error(errc::protocol_error, "kvlaned's ring geometry does not match its memfd");
  void* m = ::mmap(nullptr, w->memfd_size, PROT_READ | PROT_WRITE, MAP_SHARED, c.memfd, 0);
  if (m == MAP_FAILED)
    return make_error(errc::internal, std::string{"mmap of the rings: "} + std::strerror(errno));
  c.map = static_cast<std::byte*>(m);
  c.map_size = w->memfd_size;
  c.submit = ipc::ring_writer(c.map, sg, false);
  c.events = ipc::ring_reader(c.map, eg, false);
  c.reader = std::thread{[raw = p_impl.get()] { raw->run(); }};
  return std::unique_ptr<connection>(new connection(std::move(p_impl)));
}

result<std::shared_ptr<stream>> connection::submit(const request& r, std::chrono::milliseconds timeout) {
  auto st = impl_->submit_request(impl_, r, {}, timeout);
  if (!st)
    return st.error();
  return std::make_shared<stream>(std::move(*st));
}

result<std::uint64_t> connection::submit(const request& r, callback cb,
                                         std::chrono::milliseconds timeout) {
  if (!cb)
    return make_error(errc::invalid_argument, "the callback is empty");
  auto st = impl_->submit_request(impl_, r, std::move(cb), timeout);
  if (!st)
    return st.error();
  return (*st)->id;
}

result<void> connection::cancel(std::uint64_t request_id, std::chrono::milliseconds timeout) {
  if (impl_->lost)
    return impl_->lost_reason();
  return impl_->cancel(request_id, timeout);
}

result<bool> connection::drop_session(std::string_view session, std::string_view model,
                                      std::chrono::milliseconds timeout) {
  auto& c = *impl_;
  if (!proto::valid_session_name(session))
    return make_error(errc::invalid_argument,
                      "session name must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
  if (!model.empty() && !valid_model_name(model))
    return make_error(errc::invalid_argument,
                      "model name must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
  if (c.lost)
    return c.lost_reason();
  // One drop at a time: replies carry no id, so they are matched by order.
  std::lock_guard one{c.drop_mu};
  std::uint64_t gen;
  {
    std::lock_guard lock{c.stats_mu};
    gen = c.dropped_gen;
  }
  {
    std::lock_guard lock{c.ctl_mu};
    auto bytes = proto::encode(proto::session_drop_msg{std::string{model}, std::string{session}});
    if (::send(c.ctl, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
      return make_error(errc::connection_lost,
                        std::string{"sending a session drop: "} + std::strerror(errno));
  }
  std::unique_lock lock{c.stats_mu};
  if (!c.stats_cv.wait_for(lock, timeout, [&] { return c.dropped_gen != gen || c.lost; }))
    return make_error(errc::timeout, "no answer to the session drop within " +
                                       std::to_string(timeout.count()) + " ms");
  if (c.dropped_gen == gen)
    return c.lost_reason();
  return c.last_dropped;
}

result<daemon_stats> connection::stats(std::chrono::milliseconds timeout) {
  auto& c = *impl_;
  if (c.lost)
    return c.lost_reason();
  std::uint64_t gen;
  {
    std::lock_guard lock{c.stats_mu};
    gen = c.stats_gen;
  }
  {
    std::lock_guard lock{c.ctl_mu};
    auto bytes = proto::encode(proto::stats_request_msg{});
    if (::send(c.ctl, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
      return make_error(errc::connection_lost, std::string{"sending a stats request: "} + std::strerror(errno));
  }
  std::unique_lock lock{c.stats_mu};
  if (!c.stats_cv.wait_for(lock, timeout, [&] { return c.stats_gen != gen || c.lost; }))
    return make_error(errc::timeout, "no stats from kvlaned within " + std::to_string(timeout.count()) + " ms");
  if (c.stats_gen == gen)
    return c.lost_reason();
  const auto& s = c.last_stats;
  daemon_stats out;
  out.clients = s.clients;
  out.clients_total = s.clients_total;
  out.requests_live = s.requests_live;
  out.engine_live = s.engine_live;
  out.store_used_bytes = s.store_used_bytes;
  out.store_snapshots = s.store_snapshots;
  out.records_in = s.records_in;
  out.records_out = s.records_out;
  out.violations = s.violations;
  out.backlog_cancels = s.backlog_cancels;
  out.disconnect_cancels = s.disconnect_cancels;
  return out;
}

} // namespace kvlane::client
