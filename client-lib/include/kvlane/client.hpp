#pragma once

// kvlane::client — the C++ client library of kvlaned (link kvlane::client).
//
// Problem it solves: an app submits prompts to the local kvlaned and receives
// tokens and their text as they are generated, through shared-memory rings,
// without knowing the wire format (docs/protocol.md).
//
//   auto c = kvlane::client::connect(); // default socket, client name "app"
//   if (!c) { std::cerr << c.error().message; return 1; }
//   kvlane::client::request r;
//   r.prompt = "Hello";
//   auto s = (*c)->submit(r);
//   while (auto chunk = (*s)->next(std::chrono::seconds(5))) {
//     std::cout << chunk->text;
//     if (chunk->end) break;
//   }
//
// Errors are values: every call returns result<T>, which holds a T or an
// `error{code, message}`; nothing throws for a failure of the daemon, the
// socket or a request (std::bad_alloc aside).
//
// Threading: a connection and its streams are thread-safe. Each connection
// runs one reader thread that drains its events ring (it spins briefly, then
// sleeps on its wake-up socket); callbacks given to submit() run on that thread and
// must not block for long. Blocking consumption (stream::next) wakes the
// caller from that thread.
//
// Reconnecting: when the daemon goes away (restart, crash, shutdown), every
// open stream ends with errc::connection_lost (or shutting_down) and every
// later call on the connection fails the same way. Nothing reconnects by
// itself: create a new connection and submit again (docs/protocol.md).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kvlane::client {

enum class errc : int {
  ok = 0,
  daemon_not_running = 1, ///< no socket, or nobody listening on it
  permission_denied = 2,  ///< the socket (or its directory) is not accessible to this user
  not_allowed = 3,        ///< the daemon refused this user ([clients] allow_users / allow_groups)
  version_mismatch = 4,   ///< the daemon speaks another protocol version
  timeout = 5,
  connection_lost = 6,    ///< the daemon closed the connection or died
  protocol_error = 7,     ///< the daemon ended the connection for a malformed message
  invalid_argument = 8,   ///< rejected by the library before anything was sent
  unknown_model = 9,
  invalid_request = 10,   ///< the daemon refused the request's parameters
  too_long = 11,          ///< prompt + max_tokens exceed the model's context, or the prompt limit
  too_many_requests = 12,
  server_busy = 13,       ///< the daemon serves its maximum number of clients
  shutting_down = 14,     ///< the daemon is draining or stopping
  internal = 15,
  model_failed = 16,      ///< the model failed (its scheduler stopped) and serves nothing
  busy = 17,              ///< an admission limit is reached: retry later (the message says when)
  session_busy = 18,      ///< the session's last turn is still running (or all of the user's are)
};

/// Stable lower-case name, e.g. "daemon_not_running".
const char* to_string(errc e) noexcept;

struct error {
  errc code = errc::internal;
  std::string message;
};

/// A value or an error.
template <class T>
class [[nodiscard]] result {
public:
  result(T v) : data_(std::in_place_index<0>, std::move(v)) {}
  result(client::error e) : data_(std::in_place_index<1>, std::move(e)) {}
  bool has_value() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return std::get<0>(data_); }
  const T& value() const& { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const client::error& error() const& { return std::get<1>(data_); }

private:
  std::variant<T, client::error> data_;
};

template <>
class [[nodiscard]] result<void> {
public:
  result() = default;
  result(client::error e) : error_(std::move(e)) {}
  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  const client::error& error() const& { return *error_; }

private:
  std::optional<client::error> error_;
};

enum class priority : std::uint8_t { interactive = 0, batch = 1 };

struct sampling_params {
  float temperature = 0.0f;     ///< 0 = greedy; at most 100
  std::uint32_t top_k = 0;      ///< 0 = off
  float top_p = 1.0f;           ///< (0, 1]; 1 = off
  std::uint64_t seed = 0;
  std::uint32_t max_tokens = 256;
  std::vector<std::uint32_t> stop_tokens; ///< at most 16
  bool stop_at_eos = true;
};

struct request {
  std::string model;                        ///< empty: the daemon's first model
  std::string prompt;                       ///< UTF-8 text (the daemon adds BOS) ...
  std::vector<std::uint32_t> prompt_tokens; ///< ... or token ids, used as is
  sampling_params sampling;
  priority prio = priority::interactive;
  /// Empty: stateless. Else a conversation name (1..64 of [A-Za-z0-9._-]):
  /// the daemon keeps this user's history of the session and submits it
  /// followed by this prompt (BOS only on the first turn); the turn and what
  /// is streamed for it join the history when it ends, however it ends. One
  /// turn at a time per session (errc::session_busy); errc::too_long when the
  /// history would outgrow the context (drop_session() and start again).
  std::string session;
};

enum class end_reason : std::uint8_t {
  length = 0,    ///< max_tokens generated
  stop = 1,      ///< a stop token (not delivered)
  cancelled = 2,
  error = 3,     ///< the device failed; message says why
  backlog = 4,   ///< cancelled by the daemon because this app stopped reading events
};
const char* to_string(end_reason r) noexcept;

struct end_info {
  end_reason reason = end_reason::length;
  std::string message;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated_tokens = 0;
  std::uint32_t preemptions = 0;
  std::chrono::microseconds ttft{0}; ///< submit to first token
  std::chrono::microseconds tpot{0}; ///< mean time per output token after the first
  std::chrono::microseconds e2e{0};  ///< submit to end
};

/// What arrived since the last next(): tokens, their decoded text, maybe the end.
struct chunk {
  std::vector<std::uint32_t> tokens;
  std::string text;
  std::optional<end_info> end;
};

/// One event, as a callback sees it (valid during the call only).
struct event {
  std::uint64_t request_id = 0;
  const std::vector<std::uint32_t>* tokens = nullptr; ///< tokens event
  std::string_view text;
  std::uint64_t daemon_time_ns = 0;  ///< CLOCK_MONOTONIC when the daemon got the tokens
  const end_info* end = nullptr;     ///< end event
  const error* failure = nullptr;    ///< the request failed (or the connection was lost)
};
using callback = std::function<void(const event&)>;

class connection;

/// The consumer end of one request (blocking consumption).
class stream {
public:
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  std::uint64_t id() const noexcept;

  /// Tokens and text that arrived since the last call, waiting up to `timeout`
  /// for at least one token or the end. After the end was returned once,
  /// returns an empty chunk with the end again. Errors: timeout, the
  /// request's failure (unknown_model, too_long, ...), connection_lost.
  result<chunk> next(std::chrono::milliseconds timeout);

  /// Waits for the end; appends every token and the text not yet taken.
  result<end_info> wait(std::chrono::milliseconds timeout, std::string* text = nullptr,
                        std::vector<std::uint32_t>* tokens = nullptr);

  /// Asks the daemon to stop the request; the stream then ends with reason
  /// cancelled (unless it ended first).
  result<void> cancel(std::chrono::milliseconds timeout = std::chrono::seconds(2));

  struct state;
  stream(std::shared_ptr<state> st);

private:
  std::shared_ptr<state> state_;
};

struct connect_options {
  std::string socket_path;          ///< empty: default_socket_path()
  std::string client_name = "app"; ///< shown in the daemon's logs; 1..64 bytes of UTF-8
  std::chrono::milliseconds timeout{2000};
};

/// $KVLANE_SOCKET if set; else the daemon's default for this user:
/// /run/kvlane/kvlane.sock for root, else $XDG_RUNTIME_DIR/kvlane/kvlane.sock
/// (or /tmp/kvlane-<uid>/kvlane.sock without XDG_RUNTIME_DIR), falling back to
/// /run/kvlane/kvlane.sock (a system daemon) when that socket does not exist.
std::string default_socket_path();

struct daemon_stats {
  std::uint32_t clients = 0;
  std::uint64_t clients_total = 0;
  std::uint64_t requests_live = 0;
  std::uint64_t engine_live = 0;
  std::uint64_t store_used_bytes = 0;
  std::uint64_t store_snapshots = 0;
  std::uint64_t records_in = 0;
  std::uint64_t records_out = 0;
  std::uint64_t violations = 0;
  std::uint64_t backlog_cancels = 0;
  std::uint64_t disconnect_cancels = 0;
};

class connection {
public:
  /// Connects and performs the handshake. Errors: daemon_not_running,
  /// permission_denied, not_allowed, version_mismatch, server_busy, timeout.
  static result<std::unique_ptr<connection>> connect(const connect_options& options = {});
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Submits a request whose events are read with the returned stream.
  result<std::shared_ptr<stream>> submit(const request& r,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(2));
  /// Submits a request whose events go to `cb` (on the reader thread; the
  /// last call carries `end` or `failure`). Returns the request id.
  result<std::uint64_t> submit(const request& r, callback cb,
                               std::chrono::milliseconds timeout = std::chrono::seconds(2));
  result<void> cancel(std::uint64_t request_id,
                      std::chrono::milliseconds timeout = std::chrono::seconds(2));

  /// Forgets this user's session `session` of `model` (empty: the default
  /// model) on the daemon: the next turn starts a new conversation. Returns
  /// whether it existed.
  result<bool> drop_session(std::string_view session, std::string_view model = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(2));

  /// The daemon's figures (clients, live requests, store use, counters).
  result<daemon_stats> stats(std::chrono::milliseconds timeout = std::chrono::seconds(2));

  /// False once the daemon went away or close() was called.
  bool connected() const noexcept;
  /// The model a request without one goes to.
  const std::string& default_model() const noexcept;
  const std::string& socket_path() const noexcept;

  /// Ends every open stream (connection_lost) and disconnects. Idempotent.
  void close();

  struct impl;

private:
  explicit connection(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

/// Same as connection::connect.
inline result<std::unique_ptr<connection>> connect(const connect_options& options = {}) {
  return connection::connect(options);
}

} // namespace kvlane::client
