#include "daemon/admission.hpp"

#include <fmt/format.h>

#include <utility>

namespace kvlane::daemon {

void admission::set_limits(admission_limits limits) {
  std::lock_guard lock{mu_};
  limits_ = limits;
}

admission_limits admission::limits() const {
  std::lock_guard lock{mu_};
  return limits_;
}

std::string admission::retry_hint_locked() const {
  return fmt::format("retry after {} ms", limits_.retry_after.count());
}

std::string admission::retry_hint() const {
  std::lock_guard lock{mu_};
  return retry_hint_locked();
}

std::optional<std::string> admission::admit_client(uid_t uid) {
  std::lock_guard lock{mu_};
  auto& u = users_[uid];
  if (u.clients >= limits_.max_clients_per_user) {
    const auto n = u.clients;
    if (u.clients == 0 && u.requests == 0)
      users_.erase(uid);
    return fmt::format("uid {} already has {} connection(s) ([clients] max_clients_per_user); {}",
                       uid, n, retry_hint_locked());
  }
  ++u.clients;
  return std::nullopt;
}

void admission::release_client(uid_t uid) {
  std::lock_guard lock{mu_};
  auto it = users_.find(uid);
  if (it == users_.end() || it->second.clients == 0)
    return;
  if (--it->second.clients == 0 && it->second.requests == 0)
    users_.erase(it);
}

std::optional<std::string> admission::admit_locked(std::uint64_t principal, std::uint32_t limit,
                                                   const std::function<std::string()>& who,
                                                   std::string_view limit_key) {
  if (live_ >= limits_.max_live_sequences)
    return fmt::format("kvlaned already runs {} live sequence(s) ([clients] max_live_sequences); {}",
                       live_, retry_hint_locked());
  auto& u = users_[principal];
  if (u.requests >= (limit == 0 ? limits_.max_requests_per_user : limit)) {
    const auto n = u.requests;
    if (u.clients == 0 && u.requests == 0)
      users_.erase(principal);
    return fmt::format("{} already has {} live request(s) ({}); {}", who(), n, limit_key,
                       retry_hint_locked());
  }
  ++u.requests;
  ++live_;
  return std::nullopt;
}

std::optional<std::string> admission::admit_request(uid_t uid) {
  std::lock_guard lock{mu_};
  return admit_locked(uid, 0, [uid] { return fmt::format("uid {}", uid); },
                      "[clients] max_requests_per_user");
}

std::optional<std::string> admission::admit_request(std::uint64_t principal, std::uint32_t limit,
                                                    std::string_view who,
                                                    std::string_view limit_key) {
  std::lock_guard lock{mu_};
  return admit_locked(principal, limit, [who] { return std::string{who}; }, limit_key);
}

void admission::release_request(std::uint64_t principal) {
  std::lock_guard lock{mu_};
  auto it = users_.find(principal);
  if (it == users_.end() || it->second.requests == 0)
    return;
  --live_;
  if (--it->second.requests == 0 && it->second.clients == 0)
    users_.erase(it);
}

std::uint64_t admission::live_requests() const {
  std::lock_guard lock{mu_};
  return live_;
}

admission_ticket& admission_ticket::operator=(admission_ticket&& o) noexcept {
  if (this != &o) {
    release();
    admission_ = std::move(o.admission_);
    principal_ = o.principal_;
  }
  return *this;
}

void admission_ticket::release() noexcept {
  if (auto a = std::exchange(admission_, nullptr))
    a->release_request(principal_);
}

} // namespace kvlane::daemon
