#pragma once

// kvlane::daemon::gateway — the client control socket and the IPC loop.
//
// Problem it solves: many local apps connect at once; each must be
// authenticated, handed its own rings, served, and cleaned up when it goes
// away — with a small, fixed number of daemon threads.
//
// Threads: one, the IPC loop. It epolls the listening socket
// (<runtime_dir>/kvlane.sock, SOCK_SEQPACKET), every connection's control
// socket, every client's submit eventfd (edge-triggered, never read) and a
// private wake-up eventfd. It accepts and authenticates connections
// (SO_PEERCRED against [clients] allow_users / allow_groups), answers
// hello/stats (from figures the engine refreshes off this thread), drains
// submit rings into the engine (at most 256 records per session per pass, so
// no app can hold the loop), retries event delivery to
// apps whose events ring was full, and closes sessions whose control socket
// hung up (cancelling their requests). Token delivery itself does not pass
// through this thread: each request's sink writes into its app's events ring
// directly (see client_session). Hand-shakes are non-blocking: a connection
// that does not say hello within hello_timeout_ms is refused.
//
// Lifecycle: create() binds the socket (refusing to replace a live daemon's
// socket, removing a stale one) and starts the loop; stop() ends every
// session (fatal{shutting_down} to each app), joins the loop and unlinks the
// socket. stop() and the destructor run on the owner's thread.

#include "common/expected.hpp"
#include "daemon/client_session.hpp"
#include "daemon/config.hpp"
#include "ipc/control_codec.hpp"
#include "ipc/peer_access.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/types.h>
#include <thread>

namespace kvlane::actors {
class engine;
} // namespace kvlane::actors

namespace kvlane::daemon {

class gateway {
public:
  /// Resolves the allow lists, binds `socket_path` and starts the loop.
  /// `sessions` holds the clients' conversations (a default table when null).
  static expected<std::unique_ptr<gateway>, std::string>
  create(const clients_section& cfg, std::string socket_path, actors::engine& engine,
         std::shared_ptr<session_table> sessions = {});
  ~gateway();
  gateway(const gateway&) = delete;
  gateway& operator=(const gateway&) = delete;

  /// Ends every session, stops the loop, removes the socket. Idempotent.
  void stop();

  /// Replaces the allow lists for new connections (kvlane reload). Thread-safe.
  void set_policy(std::shared_ptr<const ipc::access_policy> policy);

  /// Applies new admission limits ([clients] max_pending, max_clients_per_user,
  /// max_requests_per_user, max_live_sequences, busy_retry_ms) to the next
  /// connection or request (kvlane reload). Thread-safe.
  void set_admission(const clients_section& cfg);

  const std::string& socket_path() const noexcept { return path_; }
  /// The admission limits apps pass; the HTTP API's requests pass them too, so that
  /// [clients] max_live_sequences bounds both. Thread-safe.
  std::shared_ptr<admission> shared_admission() const noexcept { return admission_; }
  /// Current figures (engine_live and store figures are filled by the loop's
  /// stats handler only; here they are zero).
  const gateway_counters& counters() const noexcept { return counters_; }

private:
  gateway(const clients_section& cfg, std::string path, actors::engine& engine,
          std::shared_ptr<session_table> sessions);
  static admission_limits limits_of(const clients_section& cfg);

  void run();
  void accept_all();
  void handle_pending(int fd);
  void refuse(int fd, ipc::proto::errc code, const std::string& message);
  void close_session(std::uint64_t id, bool shutting_down);
  bool allowed(int fd) const;
  ipc::proto::stats_reply_msg stats();

  struct pending_conn {
    int fd = -1;
    ucred peer{};
    std::chrono::steady_clock::time_point deadline;
  };

  clients_section cfg_;
  std::string path_;
  actors::engine& engine_;
  std::shared_ptr<session_table> conversations_; ///< named sessions of every user
  mutable std::mutex policy_mutex_;
  std::shared_ptr<const ipc::access_policy> policy_; ///< [clients] allow lists
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::shared_ptr<admission> admission_; ///< shared with the HTTP API, whose requests it counts too
  std::atomic<std::uint32_t> max_pending_;
  std::thread loop_;
  std::uint64_t next_id_ = 1;
  std::map<int, pending_conn> pending_;                          ///< by fd
  std::map<std::uint64_t, std::shared_ptr<client_session>> sessions_; ///< by id
  gateway_counters counters_;
};

} // namespace kvlane::daemon
