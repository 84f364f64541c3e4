#pragma once

// kvlane::daemon::session_table — the conversations of stateful clients.
//
// Problem it solves: an app that names a session on its submits sends only
// each new turn; the daemon keeps the conversation's token history (every
// turn's prompt and what was generated for it) and submits the whole history
// plus the new turn. Prefix reuse (docs/scheduling.md) then finds the KV the
// previous turn left retained, so only the new turn is prefilled.
//
// Sessions belong to a user (peer uid) and are keyed by (model, name): no user
// can read, extend or drop another user's conversation. A turn is two-phase:
// begin_turn() checks the limits and returns the tokens to submit without
// changing the history; end_turn() appends the turn (its prompt and the tokens
// that were streamed, whatever the end reason) and abort_turn() forgets it
// (the submit failed before the engine took it). One turn runs at a time per
// session. Dropping a session while its turn runs discards that turn's end.
//
// Memory is bounded: at most `max_per_user` sessions per user and
// `max_sessions` in all, each holding at most the model's context (a turn that
// would not fit is refused, never truncated). Reaching a cap evicts the least
// recently used idle session; sessions idle longer than `idle_ttl` are
// forgotten.
//
// Threading: every member is thread-safe (one mutex; no call blocks beyond it).
// Turns begin on the gateway's loop thread and end on CAF workers (sinks).

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace kvlane::daemon {

struct session_limits {
  std::uint32_t max_per_user = 16;    ///< 0 disables sessions
  std::uint32_t max_sessions = 256;   ///< all users together
  std::chrono::seconds idle_ttl{1800}; ///< 0 = never expire

  friend bool operator==(const session_limits&, const session_limits&) = default;
};

enum class session_errc : std::uint8_t {
  disabled, ///< [sessions] max_per_user = 0
  busy,     ///< the session's last turn is still running, or every candidate for eviction is
  too_long, ///< history + prompt + max_tokens exceed the model's context
};

struct session_error {
  session_errc code = session_errc::busy;
  std::string message;
};

struct session_key {
  std::uint32_t uid = 0;
  std::string model;
  std::string name;

  friend auto operator<=>(const session_key&, const session_key&) = default;
};

/// A turn that began: submit `tokens`; end it with its ticket.
struct session_turn {
  std::uint64_t ticket = 0;
  std::vector<backends::token_id> tokens; ///< the history followed by the turn's prompt
  std::size_t history_tokens = 0;         ///< how many of `tokens` the history gave
};

struct session_table_stats {
  std::size_t sessions = 0;
  std::size_t running = 0;        ///< sessions with a turn in flight
  std::uint64_t history_tokens = 0;
  std::uint64_t evicted = 0;      ///< for a cap (least recently used first)
  std::uint64_t expired = 0;      ///< idle longer than idle_ttl
  std::uint64_t dropped = 0;      ///< by the app (/clear) or an admin
};

class session_table {
public:
  using clock = std::chrono::steady_clock;

  explicit session_table(session_limits limits = {}) : limits_(limits) {}

  /// Applies new limits (kvlane reload); idle sessions over a new cap are evicted.
  void set_limits(const session_limits& limits, clock::time_point now = clock::now());
  session_limits limits() const;

  /// Begins a turn of `key` whose new prompt is `prompt`. `bos` is put before
  /// the prompt when the session has no history yet (text prompts). Fails,
  /// changing nothing, when sessions are disabled, the session's last turn is
  /// still running, the caps are reached by running sessions only, or the
  /// history + prompt + `max_tokens` would exceed `max_context`. A new
  /// session at a cap evicts another first; that eviction stands even if the
  /// turn is aborted later.
  expected<session_turn, session_error> begin_turn(const session_key& key,
                                                   std::span<const backends::token_id> prompt,
                                                   std::optional<backends::token_id> bos,
                                                   std::uint32_t max_tokens,
                                                   std::uint32_t max_context,
                                                   clock::time_point now = clock::now());

  /// Appends the turn and `generated` to the history. False (nothing changed)
  /// when the session was dropped or expired since the turn began.
  bool end_turn(const session_key& key, std::uint64_t ticket,
                std::span<const backends::token_id> generated, clock::time_point now = clock::now());

  /// Forgets a turn that never reached the engine; a session it created is removed.
  void abort_turn(const session_key& key, std::uint64_t ticket);

  /// Forgets the session and its history. False when there was none.
  bool drop(const session_key& key);

  /// The history of a session (empty when there is none), for tests and tools.
  std::vector<backends::token_id> history(const session_key& key) const;

  session_table_stats stats() const;

private:
  struct entry {
    std::vector<backends::token_id> history;
    std::vector<backends::token_id> turn; ///< while running: what was submitted
    std::uint64_t ticket = 0;             ///< 0: idle
    clock::time_point last_used;
  };
  using map = std::map<session_key, entry>;

  /// Caller holds mu_. Removes idle sessions unused for idle_ttl.
  void expire_locked(clock::time_point now);
  /// Caller holds mu_. Evicts the least recently used idle session of `uid`
  /// (or of anyone when nullopt). False when every candidate is running.
  bool evict_one_locked(std::optional<std::uint32_t> uid);
  std::size_t count_of_locked(std::uint32_t uid) const;

  mutable std::mutex mu_;
  session_limits limits_;
  map sessions_;
  std::uint64_t next_ticket_ = 1;
  std::uint64_t evicted_ = 0, expired_ = 0, dropped_ = 0;
};

} // namespace kvlane::daemon
