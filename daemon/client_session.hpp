#pragma once

// kvlane::daemon::client_session — the daemon's side of one connected app.
//
// Problem it solves: an app talks to kvlaned through a control socket and two
// rings in a memfd created for it alone. This class owns those resources,
// turns the app's submit records into engine requests, and turns each
// request's tokens and end into event records in the app's events ring —
// without ever letting a slow, dead or hostile app block the engine or
// disturb another app.
//
// Threading and ownership:
//  - The gateway's loop thread owns the session: it calls drain_submit(),
//    handle_control(), close() and everything else not marked otherwise.
//  - Each request's stream_sink (called on a CAF worker, must not block) holds
//    a shared_ptr to the session and appends records to its outbox (a deque
//    under `mu_`, bounded by [clients] max_backlog_records), then calls flush().
//  - The events ring has exactly one writer at a time: whoever holds
//    `writer_mu_`, taken with try_lock by sinks and by the loop thread. A sink
//    that gets it while the outbox is empty writes its records straight into
//    the ring; otherwise it queues them, and flush() (by it, or by the holder,
//    which re-checks the outbox after it unlocks) moves them in FIFO order. So
//    no sink waits for another, and records of one request stay in order.
//  - close() (loop thread) cancels every live request in the engine, then
//    unmaps the rings and closes the fds under both locks; sinks that run
//    later find `closed_` and drop their records.
//  - Lock order: writer_mu_ before mu_.
//
// Hostile peers: every index read from the shared ring header is validated
// (ipc::ring_reader/ring_writer in checked mode), every record is copied out
// and decoded by ipc::proto, and the memfd is sealed against resizing (so the
// app cannot make the daemon's mapping fault). No syscall the daemon makes on
// an object it shares with the app can block: the submit eventfd is watched
// edge-triggered and never read or written by the daemon; the app is woken
// through a socket pair whose daemon end only the daemon holds (send with
// MSG_DONTWAIT); the control socket is the daemon's own end, used with
// MSG_DONTWAIT | MSG_NOSIGNAL; the memfd is only mapped, never read or
// written through syscalls after it is shared.

#include "daemon/admission.hpp"
#include "daemon/config.hpp"
#include "daemon/request_tracker.hpp"
#include "daemon/session_table.hpp"
#include "ipc/protocol.hpp"
#include "ipc/record_codec.hpp"
#include "ipc/spsc_ring.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <sys/socket.h>
#include <variant>
#include <unordered_map>
#include <vector>

namespace kvlane::actors {
class engine;
class model_lease;
} // namespace kvlane::actors

namespace kvlane::daemon {

/// Gateway-wide counters, updated by sessions from any thread.
struct gateway_counters {
  std::atomic<std::uint64_t> clients_total{0};
  std::atomic<std::uint64_t> clients_connected{0};
  std::atomic<std::uint64_t> records_in{0};
  std::atomic<std::uint64_t> records_out{0};
  std::atomic<std::uint64_t> violations{0};
  std::atomic<std::uint64_t> backlog_cancels{0};
  std::atomic<std::uint64_t> disconnect_cancels{0};
  std::atomic<std::uint64_t> requests_live{0};
  std::atomic<std::uint64_t> busy_refusals{0}; ///< connections and requests answered `busy`
};

class client_session : public std::enable_shared_from_this<client_session> {
public:
  struct setup {
    int control_fd = -1; ///< connected SOCK_SEQPACKET socket; owned from here on
    ucred peer{};
    std::string name;
    std::uint64_t id = 0;
    const clients_section* limits = nullptr;
    actors::engine* engine = nullptr;
    gateway_counters* counters = nullptr;
    admission* admit = nullptr; ///< per-user and global limits; the client is counted already
    std::shared_ptr<session_table> sessions; ///< conversations of every user; not null
    int loop_wake_fd = -1; ///< eventfd that wakes the gateway loop (daemon-private)
  };

  /// Creates the memfd with both rings and the eventfds. On failure the
  /// control fd is left to the caller.
  static expected<std::shared_ptr<client_session>, std::string> create(setup s);
  ~client_session();
  client_session(const client_session&) = delete;
  client_session& operator=(const client_session&) = delete;

  std::uint64_t id() const noexcept { return id_; }
  const std::string& name() const noexcept { return name_; }
  const ucred& peer() const noexcept { return peer_; }
  int control_fd() const noexcept { return control_fd_; }
  int submit_eventfd() const noexcept { return submit_efd_; }

  /// Sends the welcome with [memfd, submit eventfd, events wake-up socket].
  expected<void, std::string> send_welcome();

  /// Takes up to `max_records` records from the submit ring. False: the
  /// session must be closed (a violation, already reported to the app and
  /// logged). Records left in the ring make prepare_sleep() return true.
  bool drain_submit(std::size_t max_records);

  enum class control_event { none, closed, stats, handled };
  /// Reads and handles one control message. none: nothing to read; closed:
  /// close the session (the peer hung up, or violated the protocol: already
  /// reported); stats: the app asked for a stats_reply (the gateway has the
  /// figures); handled: answered here (a session_drop).
  control_event handle_control();
  /// Sends one control message without blocking; false if it could not.
  bool send_control(const std::vector<std::byte>& bytes);

  /// Sends `fatal{code, message}` (and an error event if the ring is usable),
  /// counts a violation. The caller closes the session afterwards.
  void fail(ipc::proto::errc code, std::string message, std::uint64_t request_id = 0);

  /// Cancels every live request (counted as disconnect_cancels unless
  /// `shutting_down`), frees the rings and closes the fds. Idempotent.
  void close(bool shutting_down = false);

  /// Moves outbox records into the events ring (any thread; never blocks).
  void flush();
  /// True while records wait in the outbox (e.g. the app's ring is full).
  bool backlogged() const noexcept { return outbox_size_.load(std::memory_order_relaxed) != 0; }
  /// Set by any thread when the session must be closed by the loop.
  bool doomed() const noexcept { return doomed_.load(std::memory_order_acquire); }
  std::string doom_reason() const;

  /// Sets the submit ring's waiting flag before the loop sleeps; true if
  /// records arrived meanwhile (do not sleep).
  bool prepare_sleep();
  void done_waiting();

  std::size_t live_requests() const;

  // -- called by this session's sinks (CAF worker threads) --------------------
  void deliver(std::uint64_t request_id, std::vector<ipc::proto::record_bytes>&& records);
  void deliver_end(std::uint64_t request_id, std::vector<ipc::proto::record_bytes>&& records);
  /// True if the request was cancelled for backlog (its end says so).
  bool overflowed(std::uint64_t request_id) const;

private:
  explicit client_session(setup s);

  bool handle_record(const ipc::proto::record_bytes& raw);
  /// Admits a complete submit and submits it, or parks a session turn whose
  /// model is not loaded until it is (await_model).
  void submit_to_engine(complete_submit req);
  /// Submits an admitted request to the engine (a session's turn tokenized here).
  void submit_admitted(complete_submit req);
  /// A session's turn is tokenized with its model's tokenizer, so it waits for
  /// the model to load: the load starts now, and the turn goes on once it has
  /// (resume_loaded_turns), or ends with the load's error.
  void await_model(complete_submit req, const std::string& model);
  /// Loop thread: submits the turns whose model loaded meanwhile.
  void resume_loaded_turns();
  /// The model a submit or session_drop naming `model` goes to.
  std::string resolve_model(const std::string& model) const;
  void push_error(std::uint64_t request_id, ipc::proto::errc code, std::string message);
  /// Ends a request the engine never saw (its only record is the end).
  void push_end(std::uint64_t request_id, ipc::proto::end_reason reason, std::string message);
  /// Queues a request's last records past the backlog bound and flushes them.
  void push_last(std::uint64_t request_id, std::vector<ipc::proto::record_bytes>& records);
  /// Caller holds mu_. Appends records; applies the backlog bound unless `force`.
  void enqueue_locked(std::uint64_t request_id, std::vector<ipc::proto::record_bytes>& records,
                      bool force, std::vector<std::pair<std::string, std::uint64_t>>& to_cancel);
  void doom(std::string why);
  void signal_reader();

  struct request_state {
    std::string model;
    std::uint64_t seq = 0; ///< engine sequence id; 0 until submitted
    bool overflowed = false;
    bool admitted = false; ///< counted by admission (from its submission to the engine)
    /// A session turn waiting for its model to load: its wait's number (an id
    /// cancelled and reused meanwhile has another); 0 when not waiting.
    std::uint64_t awaiting_load = 0;
  };

  /// A session turn whose model finished loading (or failed to), for the loop thread.
  struct loaded_turn {
    complete_submit submit;
    std::uint64_t wait = 0; ///< request_state::awaiting_load of the turn
    std::shared_ptr<actors::model_lease> lease; ///< keeps the model loaded until it is submitted
    std::string error;                       ///< why the load failed, when `lease` is null
  };

  /// Caller holds mu_. Forgets a request and returns its admission.
  void erase_request_locked(std::unordered_map<std::uint64_t, request_state>::iterator it);

  const std::uint64_t id_;
  const std::string name_;
  const ucred peer_;
  const clients_section limits_;
  actors::engine& engine_;
  gateway_counters& counters_;
  admission& admission_;
  const std::shared_ptr<session_table> sessions_;
  const int loop_wake_fd_;

  int control_fd_ = -1;
  int memfd_ = -1;
  int submit_efd_ = -1;
  int events_wake_fd_ = -1; ///< daemon's end of the events wake-up socket pair
  int app_wake_fd_ = -1;    ///< the app's end, until the welcome hands it over
  std::byte* map_ = nullptr;
  std::size_t map_size_ = 0;
  ipc::ring_geometry submit_geo_{}, events_geo_{};
  ipc::ring_reader submit_;             ///< loop thread only

  std::mutex writer_mu_;                ///< the events ring's single writer
  ipc::ring_writer events_;

  mutable std::mutex mu_;
  bool closed_ = false;
  std::deque<ipc::proto::record_bytes> outbox_;
  std::atomic<std::size_t> outbox_size_{0};
  std::unordered_map<std::uint64_t, request_state> requests_;
  std::vector<loaded_turn> loaded_turns_; ///< filled by load callbacks, drained by the loop
  std::uint64_t waits_ = 0;               ///< the last awaiting_load number handed out
  /// loaded_turns_ may hold turns: the loop looks under mu_ only then.
  std::atomic<bool> turns_loaded_{false};
  request_tracker tracker_;

  std::atomic<bool> doomed_{false};
  mutable std::mutex doom_mu_;
  std::string doom_reason_;
};

} // namespace kvlane::daemon
