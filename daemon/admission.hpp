#pragma once

// kvlane::daemon::admission — the limits that keep one user, or a crowd, from
// taking the whole daemon: connections per user, live requests per user, and
// live sequences in all.
//
// Problem it solves: [clients] max_clients and max_requests bound the daemon
// per connection and in connections, but one user opening many connections,
// or many users together, could still fill the engine. Over a limit the new
// connection or request gets a `busy` answer that says when to retry;
// nothing that is already admitted is disturbed.
//
// Threading: thread-safe (one mutex, held for a map lookup). The gateway's
// loop admits connections and requests; request releases also come from CAF
// workers (a stream's end). set_limits() applies a reload: lower limits stop
// new admissions until enough is released, nothing admitted is revoked.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>

namespace kvlane::daemon {

struct admission_limits {
  std::uint32_t max_clients_per_user = 16;
  std::uint32_t max_requests_per_user = 1024;
  std::uint32_t max_live_sequences = 4096;
  std::chrono::milliseconds retry_after{200};
};

class admission {
public:
  explicit admission(admission_limits limits) : limits_(limits) {}

  void set_limits(admission_limits limits);
  admission_limits limits() const;

  /// Counts a connection of `uid`, or returns why not (the `busy` message,
  /// ending with the retry hint).
  std::optional<std::string> admit_client(uid_t uid);
  void release_client(uid_t uid);

  /// Counts a live request of `uid`, or returns why not.
  std::optional<std::string> admit_request(uid_t uid);
  void release_request(uid_t uid);

  std::uint64_t live_requests() const;
  /// The retry hint appended to every refusal.
  std::string retry_hint() const;

private:
  struct per_user {
    std::uint32_t clients = 0;
    std::uint32_t requests = 0;
  };

  std::string retry_hint_locked() const;

  mutable std::mutex mu_;
  admission_limits limits_;
  std::map<uid_t, per_user> users_;
  std::uint64_t live_ = 0;
};

} // namespace kvlane::daemon
