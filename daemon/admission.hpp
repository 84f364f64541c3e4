#pragma once

// kvlane::daemon::admission — the limits that keep one user, or a crowd, from
// taking the whole daemon: connections per user, live requests per user, and
// live sequences in all.
//
// Problem it solves: [clients] max_clients and max_requests bound the daemon
// per connection and in connections, but one user opening many connections,
// or many users together, could still fill the engine. Over a limit the new
// connection or request gets a `busy` answer (HTTP: 429) that says when to
// retry; nothing that is already admitted is disturbed.
//
// A user is a peer uid (apps on the socket) or an HTTP identity (an API key of
// [[http.keys]], or the one identity of [http] api_key), whose principal ids
// start at 2^32 so that they never meet a uid. max_live_sequences counts both.
//
// Threading: thread-safe (one mutex, held for a map lookup). The gateway's
// loop admits connections and requests; request releases also come from CAF
// workers (a stream's end). set_limits() applies a reload: lower limits stop
// new admissions until enough is released, nothing admitted is revoked.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
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
  /// Counts a live request of an HTTP identity (`principal` >= 2^32) against its own
  /// `limit` (0: max_requests_per_user) and max_live_sequences, or returns why not;
  /// the refusal names `who` and `limit_key`, the setting that bounds it.
  std::optional<std::string> admit_request(std::uint64_t principal, std::uint32_t limit,
                                           std::string_view who, std::string_view limit_key);
  void release_request(std::uint64_t principal);

  std::uint64_t live_requests() const;
  /// The retry hint appended to every refusal.
  std::string retry_hint() const;

private:
  struct per_user {
    std::uint32_t clients = 0;
    std::uint32_t requests = 0;
  };

  std::string retry_hint_locked() const;
  /// Counts a request of `principal` (limit 0: max_requests_per_user) or says why not;
  /// `who` is called only for a refusal.
  std::optional<std::string> admit_locked(std::uint64_t principal, std::uint32_t limit,
                                          const std::function<std::string()>& who,
                                          std::string_view limit_key);

  mutable std::mutex mu_;
  admission_limits limits_;
  std::map<std::uint64_t, per_user> users_; ///< by uid or HTTP principal
  std::uint64_t live_ = 0;
};

/// One admitted request of an HTTP identity, released once: by release() or when the ticket
/// goes (the engine drops a request's sink after its end, so a ticket in the sink counts the
/// request exactly as long as the engine holds it). Move-only; release() and the destructor
/// must not race (one owner at a time).
class admission_ticket {
public:
  admission_ticket() = default;
  admission_ticket(std::shared_ptr<admission> a, std::uint64_t principal) noexcept
    : admission_(std::move(a)), principal_(principal) {}
  admission_ticket(admission_ticket&& o) noexcept
    : admission_(std::move(o.admission_)), principal_(o.principal_) {}
  admission_ticket& operator=(admission_ticket&& o) noexcept;
  admission_ticket(const admission_ticket&) = delete;
  admission_ticket& operator=(const admission_ticket&) = delete;
  ~admission_ticket() { release(); }

  void release() noexcept;
  explicit operator bool() const noexcept { return admission_ != nullptr; }

private:
  std::shared_ptr<admission> admission_;
  std::uint64_t principal_ = 0;
};

} // namespace kvlane::daemon
